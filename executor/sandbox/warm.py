"""Warm starts: a session's container made ahead (a *standby*), adopted when that session starts.

A standby is the container a session would get, made for a session id chosen ahead (its name,
lock file, channel directory and labels are that session's), created and started with our
own PID 1 (`boot.standby_toolbox`) and no toolbox: nothing but PID 1 ever runs in it. It
costs what a cold start costs, but while nobody waits (orchestrate prepares one for its next
child while the model works); the session that adopts it skips the engine's create and
start, about 100 ms of a 130 ms start.

Its creator holds the session's lock (so `gc` leaves it alone) and PID 1's lifeline (so it
ends with its creator, by whatever death, as every bind container does). A session adopts a
standby only when all of these hold, decided at its own start, otherwise removes it and
starts cold:

- the spec digest of what this session would create now (with the standby's PID 1) equals
  the container's label: mounts, options, image id, toolbox argv and git surface are the
  ones decided now (the start-of-session scan still runs first);
- it is ours (its labels name this process's run) and still running, no exec in it now;
- every path it mounts from the host (the root, each protected path, the hidden state dir)
  is still the very file it was when it was made (device, inode): a `.git` replaced on the
  host since (`rm -rf .git && git init`) has equal paths and an equal spec, but is not what
  the standby mounts (red-team round 14's case);
- its PID 1, asked once, says the kernel's last pid in its namespace is what it was when
  PID 1 began (any `docker exec`, even one that ended, took a pid there), and that nobody
  asked before: it answers once, so two sessions can never both adopt one standby.

Only the quick path has standbys: a bind session on Docker with runc, the toolbox's FIFO
channel, no network and no egress, and nothing the engine would make in the tree (no
missing protected path; a writable session's state dir exists). Elsewhere the toolbox is a
`docker exec` anyway, or the session carries state a standby cannot know.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from executor.errors import SandboxError
from executor.gitsafety.aftercheck import after_session
from executor.sandbox import runrecord
from executor.sandbox.boot import init
from executor.sandbox.config import SandboxConfig
from executor.sandbox.fifos import drop_channel
from executor.sandbox.runrecord import RunRecord
from executor.sandbox.spec import LABEL_SPEC
from executor.state import LEGACY_DIR

LABEL_STANDBY = "sandbox-agent.standby"
"""Set on a standby: the run id of the process that made it (only that process adopts it)."""
_ANSWER_SECONDS = 5.0
_RUN_IDS: dict[int, str] = {}

Identity = tuple[int, ...] | None


def run_id() -> str:
    """This process's run id, as a standby's label names its maker (a fork is another run)."""
    return _RUN_IDS.setdefault(os.getpid(), f"{socket.gethostname()}:{os.getpid()}:"
                                            f"{time.time_ns()}")


class Warmable(Protocol):
    """What a standby is made from: a sandbox that can make its container ahead."""

    def standby(self) -> Standby | None:
        """Its container, made and started with no toolbox in it (None: it can have none)."""
        ...


@dataclass
class Standby:
    """A container made ahead for one session id, and what its creator holds for it."""

    name: str
    container: Any
    attached: Any
    """The container's stdin/stdout, attached before its start (the toolbox's stream)."""
    life: int | None
    """Our end of its PID 1's lifeline."""
    lock_fd: int | None
    """The session's lock, held since the standby was made."""
    digest: str
    """The spec digest it was made with."""
    identities: dict[str, Identity] = field(default_factory=dict)
    """(device, inode) of each host path it mounts, when it was made."""
    made: list[Path] = field(default_factory=list)
    """Mountpoints its engine made in the tree: the adopting session removes them after."""
    record: RunRecord | None = None
    """Its run record (runrecord.py: `gc` settles a standby whose maker died)."""
    lock_dir: Path | None = None

    def take_lock(self) -> int | None:
        """The session's lock, handed to the session that adopts (or discards) this."""
        fd, self.lock_fd = self.lock_fd, None
        return fd

    def take_life(self) -> int | None:
        """PID 1's lifeline, handed to the session's runtime."""
        fd, self.life = self.life, None
        return fd

    def why_not(self, digest: str, root: Path) -> str:
        """Why a session with spec `digest` may not adopt this ('' when it may)."""
        with contextlib.suppress(Exception):
            self.container.reload()
        attrs = getattr(self.container, "attrs", {}) or {}
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        checks = [
            (labels.get(LABEL_SPEC) == digest, "it was made with another sandbox spec"),
            (labels.get(LABEL_STANDBY) == run_id(), "another run made it"),
            ((attrs.get("State") or {}).get("Status") == "running", "it is not running"),
            (not attrs.get("ExecIDs"), "a process was exec'd in it"),
            (identities(root, list(self.identities)) == self.identities,
             "a path it mounts was replaced on the host since it was made"),
        ]
        return next((why for ok, why in checks if not ok), "")

    def claim(self) -> bool:
        """Ask PID 1 whether nothing but itself ever ran there and nobody asked before; on
        yes, tell it to start the first toolbox on the attached stream."""
        sock = getattr(self.attached, "_sock", self.attached)
        try:
            sock.settimeout(_ANSWER_SECONDS)
            sock.sendall(init.STANDBY_ASK)
            if _read_frame(sock) != init.STANDBY_FRESH:
                return False
            sock.sendall(init.STANDBY_GO)
            sock.settimeout(None)
        except OSError:
            return False
        return True

    def discard(self) -> None:
        """Remove the container; let go of what was held for it (the session that took it
        keeps its lock, record, channel directory and mountpoints: they are its own now)."""
        with contextlib.suppress(Exception):
            self.attached.close()
        with contextlib.suppress(Exception):
            self.container.remove(force=True, v=True)
        for fd in (self.take_life(), self.take_lock()):
            if fd is not None:
                os.close(fd)

    def settle(self, warn: Callable[[str], None]) -> None:
        """Never taken: the container goes, then what it left in the tree and beside the lock
        (as `gc` settles one whose maker died)."""
        self.discard()
        if self.lock_dir is None:
            return
        drop_channel(self.lock_dir, self.name)
        if self.record is not None:
            root = Path(self.record.root)
            after_session(root, self.record.tree, self.record.started_ns,
                          self.record.identities, [root / rel for rel in self.record.made_dirs],
                          set(), warn)
            runrecord.forget(self.lock_dir, self.name)


def _read_frame(sock: Any) -> bytes:
    """One frame of the engine's multiplexed stream (8-byte header: stream, size)."""
    header = _read_exactly(sock, 8)
    (size,) = struct.unpack(">I", header[4:])
    return _read_exactly(sock, size)


def _read_exactly(sock: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the standby's stream ended")
        data += chunk
    return data


def identities(root: Path, rels: list[str]) -> dict[str, Identity]:
    """(device, inode) of each path under `root` ('.' is the root), not following a link, and
    for the protected paths their ctime too: a `.git` removed and made again can get the freed
    inode number back, while its ctime is new (the root's ctime moves with every file made in
    it, so it is left out: a replaced root holds no path git on the host runs)."""
    found: dict[str, Identity] = {}
    for rel in rels:
        try:
            info = os.lstat(root / rel)
        except OSError:
            found[rel] = None
            continue
        found[rel] = (info.st_dev, info.st_ino) + ((info.st_ctime_ns,) if rel != "." else ())
    return found


def mounted_paths(config: SandboxConfig, existing: tuple[str, ...]) -> list[str]:
    """The host paths a bind standby's container mounts (or covers) in the tree."""
    return [".", *existing, *([] if config.read_only else [LEGACY_DIR])]


def eligible(config: SandboxConfig, missing: tuple[str, ...], *, quick: bool) -> str:
    """Why `config`'s session can have no standby ('' when it can); `quick`: the toolbox is
    the container's first process and talks over the FIFO channel."""
    checks = [
        (config.workspace == "bind", "a copy is loaded per session"),
        (quick, "the toolbox would be a docker exec there"),
        (not config.network and config.egress is None, "a network is made per session"),
        (not missing, "the engine would make mountpoints for protected paths in the tree"),
    ]
    return next((why for ok, why in checks if not ok), "")


class Pool:
    """The standbys this process made, by container name; each adopted or discarded once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[str, tuple[str, Future[Standby | None]]] = {}
        self._ids: dict[str, list[str]] = {}
        """Session ids with a standby coming, by the key of the sessions they suit."""
        self._exit_hook = False

    def prepare(self, key: str, session_id: str, name: str,
                make: Callable[[], Warmable], warn: Callable[[str], None]) -> None:
        """Make a standby for session `session_id` (container `name`) in the background;
        a later session of `key` takes the id (`reserve`) and the container (`take`)."""
        future: Future[Standby | None] = Future()
        self._add(key, session_id, name, future)
        threading.Thread(target=_make, args=(future, make, warn), name="standby",
                         daemon=True).start()

    def put(self, key: str, session_id: str, standby: Standby | None) -> None:
        """A standby made already, for a later session of `key` (as `prepare` leaves one)."""
        future: Future[Standby | None] = Future()
        future.set_result(standby)
        if standby is not None:
            self._add(key, session_id, standby.name, future)

    def _add(self, key: str, session_id: str, name: str,
             future: Future[Standby | None]) -> None:
        with self._lock:
            if not self._exit_hook:
                atexit.register(self.close)  # the lifeline ends it anyway; this is sooner
                self._exit_hook = True
            self._ready[name] = (key, future)
            self._ids.setdefault(key, []).append(session_id)

    def reserve(self, key: str) -> str | None:
        """A session id whose standby suits a session of `key` (once), or None."""
        with self._lock:
            ids = self._ids.get(key) or []
            return ids.pop(0) if ids else None

    def take(self, name: str, timeout: float = 30.0) -> Standby | None:
        """The standby made for container `name` (waiting for it if it is being made)."""
        with self._lock:
            _, future = self._ready.pop(name, ("", None))
        if future is None:
            return None
        try:
            return future.result(timeout)
        except Exception:
            return None

    def close(self, key: str | None = None, warn: Callable[[str], None] = lambda _: None
              ) -> None:
        """Settle every standby not adopted (only `key`'s when given)."""
        with self._lock:
            for k in [key] if key else list(self._ids):
                self._ids.pop(k, None)
            names = [n for n, (k, _) in self._ready.items() if key in (None, k)]
            futures = [self._ready.pop(n)[1] for n in names]
        for future in futures:
            with contextlib.suppress(Exception):
                standby = future.result(30.0)
                if standby is not None:
                    standby.settle(warn)


def _make(future: Future[Standby | None], make: Callable[[], Warmable],
          warn: Callable[[str], None]) -> None:
    """Make one standby; a failure only makes the next session's start a cold one, said
    here because a background thread has nobody else to say it."""
    try:
        future.set_result(make().standby())
    except Exception as exc:
        warn("no container was made ahead for the next session: "
             f"{exc.message if isinstance(exc, SandboxError) else exc}")
        future.set_result(None)


POOL = Pool()
"""This process's standbys."""

__all__ = ["LABEL_STANDBY", "POOL", "Pool", "Standby", "eligible"]
