"""One writable bind session per project root at a time: a lock beside the sessions' own.

Two bind sessions on one root would each walk the tree at their start and check it after
their end while the other's sandbox still writes it: a directory swapped for a link between
the walk and a chmod or a mount would have the host act on a path outside the project
(red-team round 17). So a writable bind session holds `<lock dir>/root-<key>.lock` from
before it settles dead runs and walks the tree until its after-session checks ran, and a
second one on the same root fails at once, naming the session that holds it. A delegated
child runs in its parent's process while the parent waits for its call: the sessions of one
process share the lock. A copy session never writes the root and a read-only one cannot:
neither takes it. `gc` takes it too, without waiting, to run a dead run's checks.

The lock is the kernel's on the root directory itself (`flock` of its own descriptor), so
every spelling of the root — a link, a bind mount elsewhere — and every lock dir (another
`$XDG_RUNTIME_DIR`, another `$HOME`) is the same lock (red-team round 21: keyed by the path
in an environment-chosen dir, two sessions ran at once). The file in the lock dir only names
the holder, for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from executor.errors import SandboxError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
"""What a holder's name may be (the file is data: anything else is not shown)."""
_TRIES = 20
"""Tries, 0.1 s apart: `gc` holds a free lock for a moment while it checks a dead run."""


@dataclass
class _Held:
    fd: int
    root_fd: int
    holder: str
    count: int = 1


_HELD: dict[str, _Held] = {}
"""The root locks this process holds, by lock file path."""
_GUARD = threading.Lock()


def lock_path(lock_dir: Path, root: Path) -> Path:
    """The lock file of `root` (a real path) in `lock_dir`."""
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
        fd = -1
        try:
            fd = _open(str(lock_path(lock_dir, root)))
            _flock(root_fd, fd, root, wait)
            _write_holder(fd, holder.encode())
        except BaseException:
            for each in (fd, root_fd):
                if each >= 0:
                    os.close(each)
            raise
        _HELD[key] = _Held(fd, root_fd, holder)
    return key


def release(path: str) -> None:
    """Give back one `hold`; the lock goes with the last."""
    with _GUARD:
        held = _HELD.get(path)
        if held is None:
            return
        held.count -= 1
        if held.count == 0:
            del _HELD[path]
            os.close(held.root_fd)
            os.close(held.fd)


def _open(path: str) -> int:
    """The lock file, never through a link, a FIFO or someone else's file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SandboxError(f"could not open the project's lock {path}: {exc.strerror}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise SandboxError(f"{path} is not a lock file of ours; remove it")
    return fd


def _open_root(root: Path) -> int:
    """The root directory itself, not through a link (its lock is the kernel's, on it)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"could not open the project {root} to lock it: "
                           f"{exc.strerror}") from exc


def _flock(root_fd: int, fd: int, root: Path, wait: bool) -> None:
    """The root's lock (`root_fd`); `fd`, the name file, says who has it when it is taken."""
    for _ in range(_TRIES if wait else 1):
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if wait:
                time.sleep(0.1)
    raise SandboxError(
        f"the project {root} is in use by bind session {_holder(fd)} in another process: "
        "two bind sessions on one project would race each other's checks of it",
        fix="wait for that session to end, or run this one with --workspace copy or "
            "--read-only")


def _write_holder(fd: int, name: bytes) -> None:
    """The holder's name as the whole file: written, then cut to its length. Cut to zero
    first, ext4 writes the file out at its close (its guard for files replaced by truncation),
    which made every bind start a few milliseconds slower."""
    os.pwrite(fd, name, 0)
    os.ftruncate(fd, len(name))


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it (a name, or a placeholder)."""
    with contextlib.suppress(OSError):
        name = os.pread(fd, 256, 0).decode("ascii", "replace").strip()
        if _NAME.fullmatch(name):
            return name
    return "(unnamed)"
