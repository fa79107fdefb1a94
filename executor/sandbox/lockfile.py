"""Lock files in the lock dir whose names go when they are let go: one protocol for all of them.

A session's lock (`<lock dir>/<container>.lock`, deployment.py) and a root's (`root-<key>.lock`,
rootlock.py) are exclusive flocks. A free lock and a missing one mean the same (nobody runs
there), so a holder removes the name before it lets go, and `gc` removes a free one while it
holds it: the lock dir no longer keeps a file for every session ever run.

The classic race of removable lock files: A opens the name; B, holding the lock, unlinks the
name and closes; A's flock then succeeds on an inode no name leads to, while C creates a new
file under the name and locks that one too. So every locker and every probe, once its flock
succeeded, checks that the name still leads to the inode it locked (`_names`) and starts again
when not; a name is only ever unlinked by the process holding its flock, after the same check.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RACES = 50
"""Times a locker may find its inode unlinked under it before it gives up (each one is a whole
holder's turn, so this is never reached by chance)."""


class NotALock(OSError):
    """What is at a lock's name is not a lock file of ours (a FIFO, a directory, another
    user's file): never locked, never removed."""


def acquire(path: Path | str, *, tries: int = 1, pause: float = 0.1) -> int:
    """An fd holding the exclusive flock of the file named `path` (made 0600 when missing), the
    name checked to lead to it; BlockingIOError when another process holds it through `tries`
    tries `pause` seconds apart. Closing the fd lets go (`release` also removes the name)."""
    races = 0
    while True:
        fd = _open(path, create=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            tries -= 1
            if tries <= 0:
                raise
            time.sleep(pause)
            continue
        except BaseException:
            os.close(fd)
            raise
        if _names(fd, path):
            return fd
        os.close(fd)  # its holder unlinked it between our open and our flock: a new one
        races += 1
        if races >= _RACES:
            raise BlockingIOError(f"{path} keeps being removed while we lock it")


def release(fd: int, path: Path | str) -> None:
    """Let go of a lock `acquire` gave, its name removed first (while we still hold it)."""
    try:
        if _names(fd, path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        os.close(fd)


def held(path: Path | str) -> bool:
    """Whether some process holds the lock named `path` (a missing name: nobody does). Taken
    for a moment to tell, never made, never through a link, never blocking on a FIFO; what is
    not a lock file of ours counts as held (we cannot tell, so it is not ours to end)."""
    for _ in range(_RACES):
        try:
            fd = _open(path, create=False)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            if _names(fd, path):
                return False
        finally:
            os.close(fd)  # closing lets go of the lock we may have taken
    return True


def sweep(paths: Iterable[Path]) -> int:
    """Remove each of `paths` that nobody holds (taken, checked, unlinked, let go); how many."""
    removed = 0
    for path in paths:
        try:
            fd = _open(path, create=False)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        removed += _names(fd, path)
        release(fd, path)
    return removed


def _open(path: Path | str, *, create: bool) -> int:
    """The lock file: never through a link, never blocking, only a regular file we own."""
    fd = os.open(path, _OPEN | (os.O_CREAT if create else 0), 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise NotALock(f"{path} is not a lock file of ours")
    os.set_blocking(fd, True)
    return fd


def _names(fd: int, path: Path | str) -> bool:
    """Whether `path` (not followed) still leads to the file `fd` has open."""
    try:
        there = os.lstat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)
