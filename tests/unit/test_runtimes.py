"""The OCI runtime and engine choices, as far as they show without an engine.

What each runtime and engine really does is in tests/docker/ (the `engine` fixture runs the
security tests on Docker+runc, Docker+runsc and Podman).
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import pytest

from executor.config import DEFAULT_NOFILE, DEFAULT_NPROC, Settings
from executor.errors import RuntimeNotFoundError, SandboxError
from executor.sandbox.docker import SandboxConfig, container_options
from executor.sandbox.engine import docker_errors


def options(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    config = SandboxConfig(root=tmp_path, session_id="s1", **overrides)
    return container_options(config, tmp_path / "lock", "1000:1000")


def test_the_runtime_is_passed_only_when_chosen(tmp_path: Path):
    assert "runtime" not in options(tmp_path)
    assert options(tmp_path, runtime="runsc")["runtime"] == "runsc"


def test_the_runtime_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    assert Settings().runtime is None
    monkeypatch.setenv("SANDBOX_AGENT_RUNTIME", "runsc")
    assert Settings().runtime == "runsc"


def test_nofile_and_nproc_are_set_explicitly_within_our_hard_limits(tmp_path: Path):
    # Podman's defaults (1048576 files, 4194304 processes) exceed common hard limits and the
    # container does not start ("error setting rlimit type 7").
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in options(tmp_path)["ulimits"]}
    for name, which, wanted in [("nofile", resource.RLIMIT_NOFILE, DEFAULT_NOFILE),
                                ("nproc", resource.RLIMIT_NPROC, DEFAULT_NPROC)]:
        hard = resource.getrlimit(which)[1]
        expected = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        assert limits[name] == (expected, expected)
    assert limits["fsize"] == (1 << 30, 1 << 30)  # the disk budget's, as before


def test_tmp_is_noexec_on_every_engine(tmp_path: Path):
    # Docker adds noexec to a tmpfs by itself; Podman does not.
    assert "noexec" in options(tmp_path)["tmpfs"]["/tmp"].split(",")


class _Refused(Exception):
    pass


def test_dockers_unknown_runtime_is_one_clear_error():
    import docker.errors

    with pytest.raises(RuntimeNotFoundError) as caught, docker_errors("creating the sandbox"):
        raise docker.errors.APIError("400 Client Error", explanation="Unknown runtime specified gvisor")
    assert caught.value.message == "creating the sandbox: the engine has no OCI runtime 'gvisor'"
    assert "make engine" in (caught.value.fix or "") and caught.value.exit_code == 15
    assert isinstance(caught.value, SandboxError)


def test_probe_evidence_is_one_inert_line():
    from executor.sandbox.probes import inert

    hostile = "ok\x1b[2J\x1b]0;owned\x07\r\nnext\x9b31m line\x00" + "x" * 300
    shown = inert(hostile, 80)
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert shown.startswith("ok\\x1b[2J\\x1b]0;owned\\x07 | next\\x9b31m line\\x00")
    assert len(shown) == 80 and shown.endswith("...")
