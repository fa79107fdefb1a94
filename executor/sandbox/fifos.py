"""A session's channel directory: the FIFOs the toolbox talks over and PID 1's lifeline.

The directory is ours, beside the session's lock file, and mounted read-only at `CHANNEL`.
Every open is beneath it, never through a link: the sandbox could plant one on the way
(toolbox/nofollow.py: `open_dir`, the rule the host and the toolbox share).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from pathlib import Path

from executor.sandbox.engine import endpoint
from executor.toolbox.nofollow import open_dir


def open_channel_dir(lock_dir: Path, name: str) -> Path | None:
    """The host side of container `name`'s `CHANNEL`, made when missing; None when the engine
    runs elsewhere (it would not see our FIFOs) or the directory is not ours alone."""
    if not endpoint().startswith("unix://"):
        return None
    path = channel_dir(lock_dir, name)
    try:
        path.mkdir(mode=0o755, exist_ok=True)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return None
        os.chmod(path, 0o755)  # the tools' uid passes through it in the container
    except OSError:
        return None
    return path


def fifo_pair(directory: Path) -> tuple[int, int] | None:
    """Fresh FIFOs `in` and `out` in `directory` (ours, mounted read-only at `CHANNEL`): our
    (read end of `out`, write end of `in`), held open so that the toolbox's non-blocking opens
    succeed; None when they cannot be made (the toolbox then stays on stdio)."""
    fds: list[int] = []
    try:
        folder = open_dir(directory)
    except OSError:
        return None
    try:
        for name in _FIFOS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
            os.mkfifo(name, 0o600, dir_fd=folder)
            os.chmod(name, 0o666, dir_fd=folder)  # for the tools' uid, whichever it is
        for name, mode in (("out", os.O_RDONLY | os.O_NONBLOCK), ("in", os.O_RDWR)):
            fds.append(os.open(name, mode | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder))
        return fds[0], fds[1]
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    finally:
        os.close(folder)


_FIFOS = ("in", "out")


_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*")


def channel_dir(lock_dir: Path, name: str) -> Path:
    """The host side of container `name`'s `CHANNEL`: beside its lock file."""
    return lock_dir / f"{name}.channel"


def drop_channel(lock_dir: Path, name: str) -> None:
    """Remove container `name`'s channel directory and what is left in it (`gc` passes the
    engine's name for a container: checked, never a path)."""
    if _NAME.fullmatch(name):
        path = channel_dir(lock_dir, name)
        unlink_fifos(path)
        with contextlib.suppress(OSError):
            path.rmdir()


def unlink_fifos(directory: Path) -> None:
    """Remove the FIFOs' names: once both ends are open, nothing else may open them. Never
    through a link: `directory` is reached without following one."""
    try:
        folder = open_dir(directory)
    except OSError:
        return
    try:
        for name in _FIFOS:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
    finally:
        os.close(folder)


def make_life(directory: Path) -> None:
    """A fresh FIFO `life` in our channel `directory`, for the container's PID 1 to open
    (boot/init.py: it watches the host through it)."""
    try:
        folder = open_dir(directory)
    except OSError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink("life", dir_fd=folder)
        os.mkfifo("life", 0o600, dir_fd=folder)
        os.chmod("life", 0o666, dir_fd=folder)  # PID 1 runs as the root's owner
    except OSError:
        pass
    finally:
        os.close(folder)


def hold_life(directory: Path, timeout: float = 2.0) -> int | None:
    """Our write end of `life`, once PID 1 holds the other (a non-blocking open for writing
    fails until a reader exists); the name is unlinked either way. None: no PID 1 took it."""
    try:
        folder = open_dir(directory)
    except OSError:
        return None
    deadline, fd = time.monotonic() + timeout, None
    try:
        while fd is None and time.monotonic() < deadline:
            try:
                fd = os.open("life", os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=folder)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    break
                time.sleep(0.005)
        with contextlib.suppress(OSError):
            os.unlink("life", dir_fd=folder)
    finally:
        os.close(folder)
    return fd
