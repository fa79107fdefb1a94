"""Warm starts: a session's container made ahead (a *standby*), adopted when that session starts.

A standby is the container a session would get, made for a session id chosen ahead (its name,
lock file, channel directory and labels are that session's), created and started with our
own PID 1 (`boot.standby_toolbox`) and no toolbox: nothing but PID 1 ever runs in it. It
costs what a cold start costs, but while nobody waits (orchestrate prepares one for its next
child while the model works); the session that adopts it skips the engine's create and
start, about 100 ms of a 130 ms start.

Its creator holds the session's lock (so `gc` leaves it alone) and PID 1's lifeline (so it
ends with its creator, by whatever death, as every bind container does), and arms its PID 1
with a nonce only the host holds. A standby *left* for the next process (`leave`, the
`warm` setting: CI's next review, the next `ask` on the project) is armed with a TTL
instead: while nobody adopts it nothing but PID 1 runs there, so its maker's death does not
end it, its TTL does; its record (`left/`, beside the locks: 0600, ours, opened without
following a link) names the container, the nonce and what it was made with, and the next
process on the root with the same mount mode claims it by renaming the record away (one
process wins; any other starts cold) and taking the session's lock, and gives it its own
lifeline at `go`. One nobody adopts is removed with the mountpoints its engine made, nothing
more: its run record says it is a standby's (nothing but PID 1 ran there), so what the person
did in the tree meanwhile is not taken for a sandbox's doing; an adopter writes its own
record, with its own start's baseline, before it asks PID 1. A session adopts a standby
only when all of these hold, decided at its own start, otherwise removes it and starts cold:

- the spec digest of what this session would create now (with the standby's PID 1) equals
  the container's label: mounts, options, image id, toolbox argv and git surface are the
  ones decided now (the start-of-session scan still runs first);
- it is the container made for this session, its label names the run that made it (this
  one, or the one the host's record names), and it is still running, no exec in it now;
- every path it mounts from the host (the root, each protected path, the hidden state dir)
  is still the very file it was when it was made (device, inode): a `.git` replaced on the
  host since (`rm -rf .git && git init`) has equal paths and an equal spec, but is not what
  the standby mounts (red-team round 14's case);
- its PID 1, asked once with the nonce (a container someone else made, labels and all,
  does not know it), says the kernel's last pid in its namespace is what it was when PID 1
  began (any `docker exec`, even one that ended, took a pid there), and that nobody asked
  before: it answers once, so two sessions can never both adopt one standby;
- a left one's TTL has not passed (its record says when it ends; its PID 1 ends then).

Only the quick path has standbys: a bind session on Docker with runc, the toolbox's FIFO
channel, no network and no egress, and nothing the engine would make in the tree (no
missing protected path; a writable session's state dir exists). Elsewhere the toolbox is a
`docker exec` anyway, or the session carries state a standby cannot know.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from executor.errors import SandboxError
from executor.sandbox import lockfile, runrecord
from executor.sandbox.boot import init
from executor.sandbox.config import SandboxConfig
from executor.sandbox.fifos import channel_dir, drop_channel, hold_life, make_life
from executor.sandbox.runrecord import RunRecord
from executor.sandbox.spec import LABEL_SPEC
from executor.state import LEGACY_DIR, own_dir
from executor.toolbox.nofollow import read_plain

LABEL_STANDBY = "sandbox-agent.standby"
"""Set on a standby: the run id of the process that made it (a label is data: the host's own
record and the nonce are what decide)."""
LEFT = "left"
"""The left standbys' records' own directory in the lock dir."""
MAX_TTL = 86400
_ANSWER_SECONDS = 5.0
_MARGIN_SECONDS = 2.0
"""A left standby this close to its end is not claimed: its PID 1 may end meanwhile."""
_ID = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*")
_NONCE = re.compile(rb"[0-9a-f]{%d}" % init.NONCE_SIZE)
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
    nonce: bytes = b""
    """What its PID 1 was armed with: only whoever holds it can claim it."""
    ttl: int = 0
    """Seconds it waits for a later process (0: it ends with its maker)."""
    made_at: float = 0.0
    maker: str = field(default_factory=lambda: run_id())
    """The run id its label names."""
    maker_session: str = ""
    """The session of the run that made it."""
    root: str = ""

    def arm(self, ttl: int) -> None:
        """Give PID 1 its nonce and TTL (0: it ends with this process); it says when armed."""
        self.nonce = secrets.token_hex(init.NONCE_SIZE // 2).encode()
        self.ttl, self.made_at = ttl, time.time()
        sock = getattr(self.attached, "_sock", self.attached)
        try:
            sock.settimeout(_ANSWER_SECONDS)
            sock.sendall(init.STANDBY_ARM + self.nonce + b"%0*d" % (init.TTL_SIZE, ttl))
            armed = _read_frame(sock) == init.STANDBY_ARMED
        except OSError as exc:
            raise SandboxError(f"the container made ahead did not take its nonce: {exc}"
                               ) from exc
        if not armed:
            raise SandboxError("the container made ahead did not take its nonce")

    def origin(self) -> dict[str, str]:
        """When and by which run it was made (the adopting session's audit says so)."""
        return {"made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.made_at)),
                "made_by_run": self.maker, "made_by_session": self.maker_session}

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
            (attrs.get("Name") == f"/{self.name}", "it is not this session's container"),
            (labels.get(LABEL_SPEC) == digest, "it was made with another sandbox spec"),
            (labels.get(LABEL_STANDBY) == self.maker, "another run made it"),
            ((attrs.get("State") or {}).get("Status") == "running", "it is not running"),
            (not attrs.get("ExecIDs"), "a process was exec'd in it"),
            (identities(root, list(self.identities)) == self.identities,
             "a path it mounts was replaced on the host since it was made"),
        ]
        return next((why for ok, why in checks if not ok), "")

    def claim(self) -> bool:
        """Ask PID 1 (with the nonce) whether nothing but itself ever ran there and nobody
        asked before; on yes, tell it to start the first toolbox on the attached stream (a
        left one first opens the lifeline made for it here: it dies with this process)."""
        sock = getattr(self.attached, "_sock", self.attached)
        channel = channel_dir(self.lock_dir, self.name) if self.lock_dir else None
        if not self.nonce or (self.ttl and channel is None):
            return False
        try:
            sock.settimeout(_ANSWER_SECONDS)
            sock.sendall(init.STANDBY_ASK + self.nonce)
            if _read_frame(sock) != init.STANDBY_FRESH:
                return False
            if self.ttl and channel is not None:
                make_life(channel)
            sock.sendall(init.STANDBY_GO)
            if self.ttl and channel is not None:
                self.life = hold_life(channel, timeout=10.0)
                if self.life is None:
                    return False
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
        life, lock = self.take_life(), self.take_lock()
        if life is not None:
            os.close(life)
        if lock is not None:  # its name goes with it
            if self.lock_dir is None:
                os.close(lock)
            else:
                lockfile.release(lock, self.lock_dir / f"{self.name}.lock")

    def settle(self, warn: Callable[[str], None]) -> None:
        """Never taken: the container goes, then what it left in the tree and beside the lock
        (as `gc` settles one whose maker died)."""
        self.discard()
        if self.lock_dir is None:
            return
        drop_channel(self.lock_dir, self.name)
        records = [self.record] if self.record is not None else [  # a left one's, on disk
            r for r in runrecord.abandoned(self.lock_dir, Path(self.root)) if r.name == self.name
        ] if self.root else []
        for record in records:
            record.run_checks(warn)
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


# -- a standby left for the next process (the `warm` setting) ---------------------------------


def leave(standby: Standby, lock_dir: Path, *, read_only: bool) -> None:
    """Leave `standby` (armed with a TTL) for the next process on its root with the same mount
    mode: its record written (one per root and mode: an earlier one's container goes), then
    everything this process held for it let go; PID 1 ends it at its TTL."""
    folder = _left_dir(lock_dir, make=True)
    path = folder / _left_file(standby.root, read_only)
    earlier = _claim_record(path)
    record = {
        "name": standby.name, "container": str(standby.container.id), "root": standby.root,
        "read_only": read_only, "digest": standby.digest,
        "identities": {k: list(v) if v else None for k, v in standby.identities.items()},
        "made": [str(p.relative_to(standby.root)) for p in standby.made],
        "nonce": standby.nonce.decode(), "ttl": standby.ttl, "made_at": standby.made_at,
        "maker": standby.maker, "maker_session": standby.maker_session}
    temporary = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(record).encode())
    os.replace(temporary, path)
    with contextlib.suppress(Exception):
        standby.attached.close()
    for held in (standby.take_life(), standby.take_lock()):
        if held is not None:
            os.close(held)
    if earlier is not None and earlier.get("container") != record["container"]:
        with contextlib.suppress(Exception):  # never claimed: `gc` or the next start settles it
            standby.container.client.containers.get(str(earlier["container"])).remove(
                force=True, v=True)


def left(lock_dir: Path, root: Path, *, read_only: bool, client: Any) -> Standby | None:
    """The standby a process left for this one (root, mount mode), claimed: its record renamed
    away (one claimer wins), validated, the session's lock taken; None: there is none, or it
    is not one to adopt (then whatever it was is left to its TTL, `gc` and the next start)."""
    try:
        folder = _left_dir(lock_dir)
    except OSError:
        return None
    raw = _claim_record(folder / _left_file(str(root), read_only))
    found = _valid(raw, str(root), read_only) if raw is not None else None
    if found is None:
        return None
    lock = _lock(lock_dir / f"{found.name}.lock")
    if lock is None:
        return None
    found.lock_fd, found.lock_dir = lock, lock_dir
    try:
        found.container = client.containers.get(found.container)
        found.attached = client.api.attach_socket(
            found.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    except Exception:
        os.close(lock)
        return None
    return found


def waiting(container: Any, lock_dir: Path) -> bool:
    """Whether `container` is a left standby still waiting for its next process (its record,
    ours, names it and its TTL has not passed): `gc` leaves it alone."""
    if LABEL_STANDBY not in (container.labels or {}) or container.status != "running":
        return False
    return waiting_named(lock_dir, container.name, container.id)


def waiting_named(lock_dir: Path, name: str, container_id: str = "") -> bool:
    """Whether our record of a left standby names container `name` (and `container_id`, when
    given) and its TTL has not passed (its run record is not a dead run's: the next start on
    the root leaves it alone)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(_left_dir(lock_dir)):
            raw = _read_record(Path(entry.path)) if not entry.name.startswith(".") else None
            if raw and raw.get("name") == name \
                    and container_id in ("", raw.get("container")) \
                    and _number(raw.get("made_at")) + _number(raw.get("ttl")) > time.time():
                return True
    return False


def _left_dir(lock_dir: Path, *, make: bool = False) -> Path:
    """The records' directory (made 0700 when `make`; ours alone, never a link)."""
    return own_dir(lock_dir / LEFT, make=make)


def _left_file(root: str, read_only: bool) -> str:
    """`<root's key>.<ro|rw>.json`: one left standby per root and mount mode."""
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return f"{key}.{'ro' if read_only else 'rw'}.json"


def _claim_record(path: Path) -> dict[str, Any] | None:
    """The record at `path`, taken away by an atomic rename first (of two processes, one gets
    it); None: none, or not a plain file of ours."""
    taken = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.claimed")
    try:
        os.rename(path, taken)
    except OSError:
        return None
    try:
        return _read_record(taken)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(taken)


def _read_record(path: Path) -> dict[str, Any] | None:
    data = read_plain(path, most=1 << 20, owner=os.geteuid())
    try:
        raw = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def _valid(raw: dict[str, Any], root: str, read_only: bool) -> Standby | None:
    """The standby a record describes, when every value is what we write and its TTL has not
    passed (the record is ours, but validated as data all the same)."""
    try:
        name, nonce = str(raw["name"]), str(raw["nonce"]).encode()
        ttl, made_at = int(raw["ttl"]), float(raw["made_at"])
        made = [str(rel) for rel in raw["made"]]
        found = Standby(
            name, str(raw["container"]), None, None, None, str(raw["digest"]),
            {str(k): tuple(int(n) for n in v) if v else None
             for k, v in raw["identities"].items()},
            [Path(root) / rel for rel in made], None, None, nonce, ttl, made_at,
            str(raw["maker"]), str(raw["maker_session"]), root)
        checks = [raw["root"] == root, raw["read_only"] is read_only,
                  _NAME.fullmatch(name) is not None,
                  _ID.fullmatch(found.container) is not None,
                  _NONCE.fullmatch(nonce) is not None, 0 < ttl <= MAX_TTL,
                  time.time() + _MARGIN_SECONDS < made_at + ttl,
                  all(_relative(rel) for rel in [*made, *found.identities])]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return found if all(checks) else None


def _relative(rel: str) -> bool:
    """A path inside the root, as we record them (no '..', not absolute)."""
    return rel == "." or (rel != "" and not rel.startswith("/")
                          and ".." not in Path(rel).parts)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _lock(path: Path) -> int | None:
    """The session's lock, taken without blocking for long (`gc` holds a free one for a
    moment while it checks it); None: another process holds it, or it is not ours."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
        for _ in range(10):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                time.sleep(0.05)
    os.close(fd)
    return None


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

__all__ = ["LABEL_STANDBY", "POOL", "Pool", "Standby", "eligible", "leave", "left",
           "waiting"]
