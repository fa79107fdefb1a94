"""One writable bind session per project root at a time: a lock beside the sessions' own.

Two bind sessions on one root would each walk the tree at their start and check it after
their end while the other's sandbox still writes it: a directory swapped for a link between
the walk and a chmod or a mount would have the host act on a path outside the project
(red-team round 17). So a writable bind session holds its root's lock from
before it settles dead runs and walks the tree until its after-session checks ran, and a
second one on the same root fails at once, naming the session that holds it. A delegated
child runs in its parent's process while the parent waits for its call: the sessions of one
process share the lock. A copy session never writes the root and a read-only one cannot:
neither takes it. `gc` takes it too, without waiting, to run a dead run's checks.

The lock is the kernel's on the root directory itself (`flock` of its own descriptor), so
every spelling of the root — a link, a bind mount elsewhere — and every lock dir (another
`$XDG_RUNTIME_DIR`, another `$HOME`) is the same lock (red-team round 21: keyed by the path
in an environment-chosen dir, two sessions ran at once). The file in the lock dir only names
the holder, for the message. A session also holds a shared lock on every directory above its
root, so that a root inside another one's, or around it, is refused too (red-team round 22: a
session on a subdirectory ran beside one on the project); sibling roots never meet.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from executor.errors import SandboxError
from executor.sandbox import lockfile
from executor.toolbox.nofollow import read_plain

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
"""What a holder's name may be (the file is data: anything else is not shown)."""
_TRIES = 20
"""Tries, 0.1 s apart: `gc` holds a free lock for a moment while it checks a dead run."""


@dataclass
class _Held:
    fd: int
    root_fd: int
    path: str
    above: list[int]
    holder: str
    count: int = 1


_HELD: dict[str, _Held] = {}
"""The root locks this process holds, by the root's identity (device:inode)."""
_GUARD = threading.Lock()


def lock_path(lock_dir: Path, root: Path) -> Path:
    """The file naming the holder of `root`'s lock (a real path) in `lock_dir`."""
    return lock_dir / f"root-{hashlib.sha256(os.fsencode(root)).hexdigest()[:32]}.lock"


def hold(lock_dir: Path, root: Path, holder: str, *, wait: bool = True) -> str:
    """Hold `root`'s lock for `holder` (shared with this process's own holder); what to pass
    to `release`. A SandboxError naming the other holder when another process has it."""
    root_fd = _open_root(root)
    info = os.fstat(root_fd)
    key = f"{info.st_dev}:{info.st_ino}"
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            os.close(root_fd)
            held.count += 1
            return key
        path = str(lock_path(lock_dir, root))
        above: list[int] = []
        try:
            _flock_root(root_fd, path, root, wait)
            above = _hold_above(root, wait)
            fd = _acquire(path)
        except BaseException:
            for each in [*above, root_fd]:
                os.close(each)
            raise
        try:
            _write_holder(fd, holder.encode())
        except BaseException:
            lockfile.release(fd, path)
            for each in [*above, root_fd]:
                os.close(each)
            raise
        _HELD[key] = _Held(fd, root_fd, path, above, holder)
    return key


def release(key: str) -> None:
    """Give back one `hold`; the lock goes with the last (and its name file: lockfile.py)."""
    with _GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count == 0:
            del _HELD[key]
            lockfile.release(held.fd, held.path)
            for each in [*held.above, held.root_fd]:
                os.close(each)


def _open_root(root: Path) -> int:
    """The root directory itself, not through a link (its lock is the kernel's, on it)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"could not open the project {root} to lock it: "
                           f"{exc.strerror}") from exc


_FIX = "wait for that session to end, or run this one with --workspace copy or --read-only"


def _taken(fd: int, kind: int, wait: bool) -> bool:
    """Whether the flock of `kind` on `fd` was taken (tried `_TRIES` times when waiting)."""
    for _ in range(_TRIES if wait else 1):
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if wait:
                time.sleep(0.1)
    return False


def _flock_root(root_fd: int, path: str, root: Path, wait: bool) -> None:
    """The root's lock; the name file at `path` says who has it when it is taken."""
    if not _taken(root_fd, fcntl.LOCK_EX, wait):
        holder = _holder(path)
        who = f"bind session {holder}" if holder else (
            "a bind session (of another lock dir: XDG_RUNTIME_DIR or HOME differ, so its "
            "name is not known here)")
        raise SandboxError(
            f"the project {root} is in use by {who} in another process: two bind sessions "
            "on one project would race each other's checks of it", fix=_FIX)


def _hold_above(root: Path, wait: bool) -> list[int]:
    """A shared lock on each directory above `root` (a real path): refused while a session
    holds one of them as its root."""
    held: list[int] = []
    try:
        for parent in root.parents:
            fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            held.append(fd)
            if not _taken(fd, fcntl.LOCK_SH, wait):
                raise SandboxError(
                    f"the project {root} lies inside {parent}, in use by a bind session in "
                    "another process: two bind sessions on one tree would race each other's "
                    "checks of it", fix=_FIX)
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return held


def _acquire(path: str) -> int:
    """The name file held (the root's lock is ours already), never through a link, a FIFO or
    someone else's file."""
    try:
        return lockfile.acquire(path, tries=_TRIES)
    except BlockingIOError:  # a holder of an older version, which locked the file alone
        raise SandboxError(f"the project's lock {path} is held by another process",
                           fix="wait for that session to end") from None
    except lockfile.NotALock:
        raise SandboxError(f"{path} is not a lock file of ours; remove it") from None
    except OSError as exc:
        raise SandboxError(
            f"could not open the project's lock {path}: {exc.strerror or exc}") from exc


def _write_holder(fd: int, name: bytes) -> None:
    """The holder's name as the whole file: written, then cut to its length. Cut to zero
    first, ext4 writes the file out at its close (its guard for files replaced by truncation),
    which made every bind start a few milliseconds slower."""
    os.pwrite(fd, name, 0)
    os.ftruncate(fd, len(name))


def _holder(path: str) -> str:
    """Who holds the lock, as its holder wrote it ("": not known in this lock dir)."""
    with contextlib.suppress(OSError):
        name = read_plain(path, most=256, owner=os.geteuid())
        text = (name or b"").decode("ascii", "replace").strip()
        if _NAME.fullmatch(text):
            return text
    return ""
