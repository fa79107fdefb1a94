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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
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
    path = str(lock_path(lock_dir, root))
    with _GUARD:
        held = _HELD.get(path)
        if held is not None:
            held.count += 1
            return path
        fd = _acquire(path, root, wait)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        except BaseException:
            lockfile.release(fd, path)
            raise
        _HELD[path] = _Held(fd, holder)
    return path


def release(path: str) -> None:
    """Give back one `hold`; the lock goes with the last (and its file: lockfile.py)."""
    with _GUARD:
        held = _HELD.get(path)
        if held is None:
            return
        held.count -= 1
        if held.count == 0:
            del _HELD[path]
            lockfile.release(held.fd, path)


def _acquire(path: str, root: Path, wait: bool) -> int:
    """The lock file held, never through a link, a FIFO or someone else's file."""
    try:
        return lockfile.acquire(path, tries=_TRIES if wait else 1)
    except BlockingIOError:
        raise SandboxError(
            f"the project {root} is in use by bind session {_holder(path)} in another "
            "process: two bind sessions on one project would race each other's checks of it",
            fix="wait for that session to end, or run this one with --workspace copy or "
                "--read-only") from None
    except lockfile.NotALock:
        raise SandboxError(f"{path} is not a lock file of ours; remove it") from None
    except OSError as exc:
        raise SandboxError(
            f"could not open the project's lock {path}: {exc.strerror or exc}") from exc


def _holder(path: str) -> str:
    """Who holds the lock, as its holder wrote it (a name, or a placeholder)."""
    with contextlib.suppress(OSError):
        name = read_plain(path, most=256, owner=os.geteuid())
        text = (name or b"").decode("ascii", "replace").strip()
        if _NAME.fullmatch(text):
            return text
    return "(unnamed)"
