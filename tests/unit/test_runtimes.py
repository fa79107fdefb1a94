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
from executor.sandbox.config import SandboxConfig
from executor.sandbox.engine import docker_errors
from executor.sandbox.hardening import container_options


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
    assert "make engine" in (caught.value.fix or "") and caught.value.exit_code == 16
    assert isinstance(caught.value, SandboxError)


def test_probe_evidence_is_one_inert_line():
    from executor.sandbox.probes.lab import inert

    hostile = "ok\x1b[2J\x1b]0;owned\x07\r\nnext\x9b31m line\x00" + "x" * 300
    shown = inert(hostile, 80)
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert shown.startswith("ok\\x1b[2J\\x1b]0;owned\\x07 | next\\x9b31m line\\x00")
    assert len(shown) == 80 and shown.endswith("...")


# -- signed toolbox lines -------------------------------------------------------------------------


def _frames(*lines: bytes) -> bytes:
    """Docker's multiplexed stdout frames, one per line."""
    import struct

    return b"".join(struct.pack(">BxxxI", 1, len(line) + 1) + line + b"\n" for line in lines)


def test_only_lines_the_toolbox_signed_are_answers(tmp_path: Path):
    import io
    import json
    import socket
    import time

    from executor.sandbox.channel import Channel
    from executor.toolbox.channel import Signed

    key, other = b"k" * 32, b"x" * 32
    signed, forged = io.BytesIO(), io.BytesIO()
    Signed(signed, key).write(b'{"id": 1, "ok": true}\n')
    Signed(forged, other).write(b'{"id": 1, "ok": true, "output": "FORGED"}\n')
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(_frames(b'{"id": 1, "output": "FORGED"}', forged.getvalue().strip(),
                               b"x" * 40, signed.getvalue().strip()))
        channel = Channel(ours, key)
        reply = channel.read_json(time.monotonic() + 5)
    assert reply == {"id": 1, "ok": True} and channel.dropped == 3
    assert json.loads(signed.getvalue().split(b" ", 1)[1]) == reply


def test_the_toolbox_signs_when_asked(tmp_path: Path):
    import hmac
    import subprocess

    from tests.unit import toolbox_view as toolbox

    key = bytes(range(32))
    done = subprocess.run([*toolbox.COMMAND, "--root", str(tmp_path), "--sign"],
                          input=key.hex().encode() + b"\n", capture_output=True, timeout=60,
                          check=False)
    mac, line = done.stdout.splitlines()[0].split(b" ", 1)
    assert mac == hmac.new(key, line, "sha256").hexdigest()[:32].encode()
    assert b'"ready": true' in line
