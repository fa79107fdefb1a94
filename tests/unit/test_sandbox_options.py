"""The container's network options: none, and no network sandbox for the engine to set up."""

from __future__ import annotations

import os
from pathlib import Path

from executor.gitsafety.hostgit import Protected
from executor.sandbox.bundle import INIT_TAG as _INIT_TAG
from executor.sandbox.config import SandboxConfig
from executor.sandbox.deployment import Deployment
from executor.sandbox.hardening import HOSTS, container_options, hosts_file


def _options(tmp_path: Path, **config: object) -> dict:
    settings = SandboxConfig(root=tmp_path, session_id="s1", **config)  # type: ignore[arg-type]
    return container_options(settings, tmp_path / "l.lock", "1000:1000",
                             hosts=hosts_file(tmp_path / "locks"))


def _hosts_mount(options: dict) -> list[dict]:
    return [m for m in options["mounts"] if m["Target"] == "/etc/hosts"]


def test_without_a_network_the_engine_sets_up_none_and_etc_hosts_is_ours(tmp_path: Path):
    options = _options(tmp_path)
    assert options["network_mode"] == "none" and options["network_disabled"] is True
    [mount] = _hosts_mount(options)
    assert mount["ReadOnly"] is True and Path(mount["Source"]).read_bytes() == HOSTS
    assert b"127.0.0.1\tlocalhost" in HOSTS and b"sandbox" in HOSTS


def test_with_a_network_the_engine_sets_it_up_as_before(tmp_path: Path):
    options = _options(tmp_path, network=True)
    assert options["network_mode"] == "bridge" and "network_disabled" not in options
    assert _hosts_mount(options) == []


def test_without_a_hosts_file_the_options_are_the_engines_none(tmp_path: Path):
    options = container_options(SandboxConfig(root=tmp_path, session_id="s1"),
                                tmp_path / "l.lock", "1000:1000")
    assert options["network_mode"] == "none" and "network_disabled" not in options


def test_the_hosts_file_is_rewritten_when_it_differs_never_followed(tmp_path: Path):
    directory = tmp_path / "locks"
    directory.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"mine\n")
    os.symlink(elsewhere, directory / "hosts")
    path = hosts_file(directory)
    assert not path.is_symlink() and path.read_bytes() == HOSTS
    assert elsewhere.read_bytes() == b"mine\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_pid_1_is_ours_with_or_without_the_first_toolbox(tmp_path: Path):
    """Never the engine's init (docker-init, catatonit): it passed `kill -INT 1` on to its
    child, which stopped the container."""
    plain = _options(tmp_path)
    assert plain["init"] is False and plain["command"][:4] == ["python3", "-I", "-S", "-c"]
    assert plain["command"][4].startswith(_INIT_TAG)  # reaps, forks no toolbox
    assert plain["command"][4].rstrip().endswith("reap(0, end=True)")  # a bind container
    first = container_options(SandboxConfig(root=tmp_path, session_id="s1"), tmp_path / "l.lock",
                              "1000:1000", toolbox=["--root", "/workspace"])
    assert first["init"] is False and first["command"][5].startswith(_INIT_TAG)
    assert first["command"][5].count("    first_toolbox()\n") == 1 and first["command"][-2:] == ["--root", "/workspace"]
    for code in (plain["command"][4], first["command"][5]):
        compile(code, "pid1", "exec")
        assert "signal.SIG_IGN" in code and "signal.valid_signals()" in code


def _deployment_options(tmp_path: Path, channel: Path | None) -> dict:
    config = SandboxConfig(root=tmp_path, session_id="s1", workspace="copy",
                           lock_dir=tmp_path / "locks")
    place = Deployment(config, warn=lambda _: None)
    return place.options(config, Protected((), ()), toolbox=list, channel=channel)


def test_a_copy_session_on_an_engine_here_has_no_network_sandbox_either(tmp_path: Path):
    (tmp_path / "locks").mkdir()
    here = _deployment_options(tmp_path, tmp_path / "channel")  # its FIFOs are mounted: local
    assert here["network_mode"] == "none" and here["network_disabled"] is True
    [mount] = _hosts_mount(here)
    assert Path(mount["Source"]).read_bytes() == HOSTS
    elsewhere = _deployment_options(tmp_path, None)  # maybe remote: no path of ours is mounted
    assert elsewhere["network_mode"] == "none" and "network_disabled" not in elsewhere
    assert _hosts_mount(elsewhere) == []
