"""Writing a session file: whole lines appended durably, held open between the appends.

The format and the crash-safety promise are executor/session.py's; this is the writer on the
agent loop's path (two lines a tool call), kept apart from reading and listing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from executor import durable
from executor.durable import write_all
from executor.errors import SessionError
from executor.state import open_private


def utc_now() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. `2026-11-29T23:05:01.123Z`."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def line_of(record: dict[str, Any]) -> bytes:
    """One record as its line (UTF-8 JSON and a newline)."""
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:  # lone surrogates (undecodable tool output): escape them
        return (json.dumps(record) + "\n").encode()


def event_line(event: str, data: dict[str, Any]) -> bytes:
    """The line of an event record."""
    return line_of({"type": "event", "ts": utc_now(), "event": event, "data": data})


def _last_line_start(fd: int, size: int) -> int:
    """Offset just after the last newline before `size` (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _heal_tail(fd: int) -> bytes:
    """Make the file end on a line boundary; what to write first to record the repair."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return b""
    start = _last_line_start(fd, size)
    try:
        json.loads(os.pread(fd, size - start, start))
        return b"\n"  # a whole record that only lacks its newline: keep it
    except ValueError:
        os.ftruncate(fd, start)  # never glue a new record onto a torn fragment
        return event_line("torn_line_dropped", {"bytes": size - start})


class Appender:
    """A session file held open between appends (each one a message of the agent loop).

    The descriptor is written through only while the file's name still leads to its inode
    with the size our last append left (so no one else wrote, truncated or replaced it);
    otherwise the file is opened again, without following links, and its tail repaired, as
    every append did before. Each append takes the exclusive `flock` for its write.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: list[int] = []  # [fd, inode, size] while open
        self._finalizer = weakref.finalize(self, _close_held, self._held)
        self._lock = threading.Lock()  # threads share the descriptor (flock would not order them)

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, data: bytes) -> None:
        """Write `data` (whole lines) durably at the end of the file."""
        with self._lock:
            self._append(data)

    def _append(self, data: bytes) -> None:
        try:
            fd = self._current()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if fd != self._current_fd():  # changed while we waited for the lock
                    raise _Changed
                if self._held[2] < 0:
                    data = _heal_tail(fd) + data
                write_all(fd, data)
                durable.sync(fd)
                self._held[2] = os.fstat(fd).st_size
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except _Changed:
            _close_held(self._held)
            self._append(data)
        except OSError as exc:
            _close_held(self._held)
            raise SessionError(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Let go of the file (the next append opens it again)."""
        with self._lock:
            _close_held(self._held)

    def _current_fd(self) -> int | None:
        """The held descriptor when the name still leads to it as we left it, else None."""
        if not self._held:
            return None
        fd, ino, size = self._held
        try:
            st = os.lstat(self.path)
        except OSError:
            return None
        return fd if st.st_ino == ino and (size < 0 or st.st_size == size) else None

    def _current(self) -> int:
        fd = self._current_fd()
        if fd is not None:
            return fd
        _close_held(self._held)
        try:
            fd = open_private(self.path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError as exc:
            raise SessionError(f"session file {self.path} has disappeared") from exc
        self._held[:] = [fd, os.fstat(fd).st_ino, -1]  # size -1: the tail is checked first
        return fd


class _Changed(Exception):
    """The session file changed between the check and the lock: open it again."""


def _close_held(held: list[int]) -> None:
    if held:
        fd = held[0]
        held.clear()
        with contextlib.suppress(OSError):
            os.close(fd)


