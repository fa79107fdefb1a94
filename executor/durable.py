"""When session and audit lines reach the disk: the fsync policy (docs/SESSIONS.md, AUDIT.md).

Every session message and audit record is written with one `write` of whole lines before the
loop goes on, so a process that is killed (SIGKILL, a crash, Ctrl-C) loses nothing: the kernel
has the bytes. What `fsync` adds is surviving a crash of the machine itself, and it costs about
a millisecond a call on an ordinary disk, several times per tool call. So by default
(`background`) the fsync runs on a background thread at most GROUP_DELAY (50 ms) after the write,
one per file for all the writes of that moment, while the loop goes on; `Runner.close()` waits
for it. A machine that
loses power can lose the lines of the last moments, never a torn line in the middle of a file.
`always` fsyncs before the write returns, as a database with synchronous commits does.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Literal

log = logging.getLogger(__name__)

FsyncPolicy = Literal["background", "always"]


GROUP_DELAY = 0.05
"""Seconds the background thread waits after a write for more before it fsyncs (group commit)."""


class Syncer:
    """fsyncs files after their writes: at once (`always`) or on a background thread."""

    def __init__(self, policy: FsyncPolicy = "background", delay: float = GROUP_DELAY) -> None:
        self.policy: FsyncPolicy = policy
        self._delay = delay
        self._pending: dict[tuple[int, int], int] = {}
        self._busy = False
        self._hurry = False
        self._errors: list[OSError] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def sync(self, fd: int) -> None:
        """Make what was written to `fd` durable now (`always`) or soon (`background`);
        the caller keeps `fd` and may close it at once."""
        if self.policy == "always":
            os.fsync(fd)
            return
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._cond:
            if key in self._pending:  # an fsync not yet begun covers this write too
                return
            own = _reopen(fd)
            if own is None:
                os.fsync(fd)
                return
            self._pending[key] = own
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fsync", daemon=True)
                self._thread.start()
            if len(self._pending) == 1:
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> list[OSError]:
        """Wait until every write handed over so far is fsynced; the errors since last asked."""
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)
            self._hurry = False
            errors, self._errors = self._errors, []
        return errors

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                self._cond.wait_for(lambda: self._hurry, self._delay)  # let more writes come
                batch, self._pending = self._pending, {}
                self._busy = True
            for fd in batch.values():
                self._fsync(fd)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            log.warning("fsync failed: %s", exc)
            with self._cond:
                self._errors.append(exc)
        finally:
            os.close(fd)


def _reopen(fd: int) -> int | None:
    """A descriptor of its own for `fd`'s file (not a dup: a dup shares the caller's `flock`,
    which would then last until the fsync); None where /proc cannot give one."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


SYNCER = Syncer()
"""The process's syncer: sessions and audit logs hand their writes to it."""


def sync(fd: int) -> None:
    """`SYNCER.sync(fd)`."""
    SYNCER.sync(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (os.write may write less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a new entry of `directory` durable (always at once: a new file is rare)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
