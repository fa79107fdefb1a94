"""A toolbox process and a tiny client for its protocol, and the helpers the toolbox tests share.

The root is a temp dir and a secret file sits next to it (never inside). No Docker: the fork
and memory bombs are exercised in real containers by tests/docker; here they are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.unit import toolbox_view as toolbox

PACKAGE = Path(toolbox.MODULES[0].__file__ or "").parent
REPO = Path(__file__).resolve().parents[3]
PYTHON = os.environ.get("TOOLBOX_TEST_PYTHON", sys.executable)
SECRET = "TOP-SECRET-never-in-output"
HAS_RG = shutil.which("rg") is not None


class Box:
    """A toolbox process and a tiny client for its protocol."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None,
                 fsize: int | None = None) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "executor.toolbox", "--root", str(root), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**(env if env is not None else os.environ), "PYTHONPATH": str(REPO)},
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize)))
            if fsize else None,
        )
        self._buf = b""
        self._next = 0
        self.ready = self.read()

    def call(self, tool: str, **args: Any) -> dict[str, Any]:
        """One tool call; checks the reply belongs to it."""
        self._next += 1
        reply = self.request({"id": self._next, "tool": tool, "args": args})
        assert reply["id"] == self._next
        return reply

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send an arbitrary request object."""
        return self.send_line(json.dumps(message).encode())

    def send_line(self, line: bytes) -> dict[str, Any]:
        """Send raw bytes plus a newline, read one reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self, timeout: float = 30) -> dict[str, Any]:
        """The next protocol line, parsed (every stdout line must be one)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                assert sel.select(max(0.0, deadline - time.monotonic())), "toolbox hung"
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, f"toolbox exited with {self.proc.wait()}"
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    def alive(self) -> None:
        """The process still answers."""
        assert self.call("ping")["output"] == "pong"

    def close(self) -> int:
        """Close stdin and wait for the exit code."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()


def failed(reply: dict[str, Any], *fragments: str) -> str:
    """Assert a failed result whose output holds every fragment; return the output."""
    assert reply["ok"] is False, reply
    for fragment in fragments:
        assert fragment in reply["output"], reply["output"]
    return str(reply["output"])


def gone(pid: int, within: float = 3.0) -> bool:
    """Whether a process disappeared (or is a zombie) within a few seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in (b"Z", b"X"):
            return True
        time.sleep(0.02)
    return False


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def preview(box: Box, tool: str, **args: Any) -> dict[str, Any]:
    """A preview reply: always ok, the facts in meta (duration dropped)."""
    reply = preview_request(box, {"tool": tool, "args": args})
    assert reply["ok"], reply
    reply["meta"].pop("duration_ms")
    return reply


def shell(box: Box, command: str, **args: Any) -> dict[str, Any]:
    """One run_shell_command call."""
    return box.call("run_shell_command", command=command, **args)


def by_path(reply: dict[str, Any], key: str = "changes") -> dict[str, dict[str, Any]]:
    """A result's change records by path."""
    return {change["path"]: change for change in reply["meta"][key]}


def change(path: str, kind: str, what: str, **fields: Any) -> dict[str, Any]:
    """A full change record: every field None unless given."""
    record: dict[str, Any] = {"path": path, "change": what, "kind": kind, "target": None}
    for side in ("before", "after"):
        for name in ("sha256", "size", "mode"):
            record[f"{name}_{side}"] = None
    return {**record, **fields}


def stat_mode(path: Path) -> int:
    return path.lstat().st_mode & 0o7777


def preview_request(box: Box, args: dict[str, Any]) -> dict[str, Any]:
    """A raw preview request (its own `tool` argument would clash with `Box.call`'s)."""
    return box.request({"id": 1, "tool": "preview", "args": args})

