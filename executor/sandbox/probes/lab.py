"""The probes' lab: a throwaway project next to a secret, its state dir, the sandboxes that
attack it, and the servers on the host whose reach a probe checks."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from executor.errors import SandboxAgentError
from executor.messages import ToolResult
from executor.network.egress import EgressConfig
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.state import LEGACY_DIR, ensure_project_dir
from executor.text import inert_line

Factory = Callable[[SandboxConfig], DockerSandbox]
"""Builds the sandbox a probe attacks (tests hand in deliberately weakened ones)."""

DISK_BUDGET = 8 << 20
"""The probes' own disk budget: small, so that going past it is quick."""


class Breach(Exception):
    """A probe saw its guarantee broken; the message is the evidence."""


class Caveat(Exception):
    """A probe saw its guarantee hold, but at a cost; the message is the evidence, cost
    included."""


def inert(text: str, limit: int = 160) -> str:
    """`text` as one inert line (executor.text: control, bidi and invisible characters shown
    as escapes), its lines joined with " | ", cut at `limit`."""
    flat = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    shown = inert_line(flat)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


class Lab:
    """A throwaway project next to a secret, its state dir, and the sandboxes attacking it."""

    def __init__(self, template: SandboxConfig, factory: Factory) -> None:
        self.template, self.factory = template, factory
        self.mark = "probe-secret-" + secrets.token_hex(8)
        self.base = Path(tempfile.mkdtemp(prefix="sandbox-agent-probe-")).resolve()
        self.root = self.base / "proj"
        self.secret = self.base / "secret.txt"
        self.state: Path | None = None
        self._boxes: dict[tuple[bool, bool], DockerSandbox] = {}
        self._engine: Any = None

    def __enter__(self) -> Self:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _build(self) -> None:
        self.root.mkdir()
        self.secret.write_text(self.mark + "\n")
        (self.root / "hello.txt").write_text("hello\n")
        (self.root / "secret-link").symlink_to(self.secret)
        for repo in (self.root, self.root / "vendor" / "lib"):
            (repo / ".git" / "hooks").mkdir(parents=True)
            (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
            (repo / ".git" / "config").write_text("[core]\n\tbare = false\n")
        (self.root / LEGACY_DIR / "audit").mkdir(parents=True)
        (self.root / LEGACY_DIR / "audit" / "old.ndjson").write_text(self.mark + "\n")
        self.state = ensure_project_dir(self.root)
        (self.state / "probe.txt").write_text(self.mark + "\n")

    def close(self) -> None:
        """Remove the containers, the project and its state dir."""
        for box in self._boxes.values():
            with contextlib.suppress(SandboxAgentError):
                box.stop()
        self._boxes.clear()
        if self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def box(self, *, read_only: bool = False, egress: EgressConfig | None = None
            ) -> DockerSandbox:
        """The started sandbox on the project (one read-write, one read-only, one with
        `egress`: the first one asked for)."""
        key = (read_only, egress is not None)
        if key not in self._boxes:
            config = self.template.model_copy(update={
                "root": self.root, "read_only": read_only, "disk_budget": DISK_BUDGET,
                "session_id": "probe-" + secrets.token_hex(5), "egress": egress})
            box = self.factory(config)
            self._boxes[key] = box
            box.start()
        return self._boxes[key]

    def writable(self) -> None:
        """A control: the sandbox can write the project at all (else a refusal proves nothing)."""
        result = self.shell("echo control > control.txt && chmod 0644 control.txt && "
                            "cat control.txt && rm control.txt")
        if not result.ok:
            raise Breach(f"inconclusive: the sandbox cannot write the project at all: "
                         f"{inert(result.output, 90)}")

    def shell(self, command: str, *, read_only: bool = False, timeout: int = 30) -> ToolResult:
        """Run `command` in the sandbox."""
        return self.box(read_only=read_only).call(
            "run_shell_command", {"command": command, "timeout_seconds": timeout})

    def events(self, container_id: str, since: float) -> set[str]:
        """What the engine saw happen to a container since `since` (`die`, `oom`, `start`...;
        empty when it cannot say)."""
        from executor.sandbox.engine import connect

        try:
            self._engine = self._engine or connect(timeout=10)
            return {str(event.get("status") or event.get("Action")) for event in
                    self._engine.events(since=int(since), until=int(time.time()) + 1,
                                        filters={"container": container_id}, decode=True)}
        except Exception:  # evidence of how it went down, not of whether: best effort
            return set()

    def tree(self) -> str:
        """A digest of every path, mode and byte in the project (its state dir left out)."""
        digest = hashlib.sha256()
        for path in sorted(self.root.rglob("*")):
            info = path.lstat()
            digest.update(f"{path.relative_to(self.root)}|{info.st_mode}|".encode())
            if stat.S_ISREG(info.st_mode):
                digest.update(path.read_bytes())
        return digest.hexdigest()

    def setid_files(self) -> list[str]:
        """Files in the project with a set-uid or set-gid bit."""
        return [str(p.relative_to(self.root)) for p in self.root.rglob("*")
                if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]


@contextlib.contextmanager
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback, noting who connected."""
    server = socket.create_server(("127.0.0.1", 0))
    with _serving(server) as hits:
        yield server.getsockname()[1], hits


@contextlib.contextmanager
def unix_server(path: Path) -> Iterator[list[str]]:
    """A unix stream server at `path` (world-writable: only the kernel's rules decide)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    try:
        with _serving(server) as hits:
            yield hits
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _serving(server: socket.socket) -> Iterator[list[str]]:
    hits: list[str] = []
    stop = threading.Event()
    server.settimeout(0.1)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append("hit")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield hits
    finally:
        stop.set()
        thread.join()
        server.close()
