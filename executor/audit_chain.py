"""The audit chain on disk: canonical form, hashes, day files, and the writer that appends.

The format is described in executor/audit.py and docs/AUDIT.md. The writer (`ChainFiles`)
is on every tool call's path, three records a call, so it keeps the lock file and the day
file it last wrote open between records: the chain's head is taken from memory, and the
file written through the descriptor already open, whenever the day file still has the inode
and the size our last record left (then no one else appended, renamed or replaced it).
Anything else takes the careful way again: the file opened without following links and
checked (a regular file we own), its last record read back, a torn tail set apart.
What a record promises is unchanged: one `write` of a whole line, synced as
executor/durable.py says, before `append` returns.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor import durable
from executor.durable import fsync_dir, write_all
from executor.state import open_private

ZERO_HASH = "0" * 64
"""`prev` of the very first record."""
LOCK_NAME = ".lock"
"""Lock file in the audit directory held while a record is appended."""
DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.ndjson$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TAIL_CHUNK = 64 * 1024
_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                         allow_nan=False)


def canonical(record: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of `record` (sorted keys, compact, ASCII)."""
    return _JSON.encode(record).encode("ascii")


def record_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical form of `record` without its `hash` key."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(body)).hexdigest()


def sealed(record: Mapping[str, Any]) -> tuple[str, bytes]:
    """(hash, the line to write) of a record without `hash`: `canonical` of it with its hash,
    and a newline. The body is encoded once, in two halves around where `hash` sorts, rather
    than once to hash it and once more to write it."""
    low = _JSON.encode({k: v for k, v in record.items() if k < "hash"})
    high = _JSON.encode({k: v for k, v in record.items() if k > "hash"})
    digest = hashlib.sha256(_joined(low, high).encode("ascii")).hexdigest()
    return digest, (_joined(low, f'{{"hash":"{digest}"}}', high) + "\n").encode("ascii")


def _joined(*objects: str) -> str:
    """JSON objects with disjoint, ordered keys as one object (as `sort_keys` writes it)."""
    return "{" + ",".join(o[1:-1] for o in objects if o != "{}") + "}"


@dataclass(frozen=True)
class Head:
    """The last record of the chain: what the next record links to."""

    seq: int
    hash: str


def day_names(directory: Path) -> list[str]:
    """Names of the day files in chain order (they sort chronologically)."""
    try:
        return sorted(p for p in os.listdir(directory) if DAY_FILE.match(p))
    except (FileNotFoundError, NotADirectoryError):
        return []


def day_files(directory: Path) -> list[Path]:
    """Day files in chain order."""
    return [directory / name for name in day_names(directory)]


def _parse_head(line: bytes) -> Head | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    seq, digest = data.get("seq"), data.get("hash")
    if type(seq) is int and isinstance(digest, str) and _HEX64.match(digest):
        return Head(seq, digest)
    return None


def _last_record_of(path: Path) -> Head | None:
    """The last readable record of a file; a torn or garbled tail is skipped (verify reports it)."""
    with os.fdopen(open_private(path, os.O_RDONLY), "rb") as f:
        size = f.seek(0, os.SEEK_END)
        chunk = _TAIL_CHUNK
        while True:
            start = max(0, size - chunk)
            f.seek(start)
            lines = f.read(size - start).split(b"\n")
            for line in reversed(lines[1:] if start else lines):
                head = _parse_head(line)
                if head:
                    return head
            if start == 0:
                return None
            chunk *= 4


def read_head(files: Sequence[Path]) -> Head:
    """The last readable record of the newest file that has one (the chain's start: zeros)."""
    for path in reversed(files):
        head = _last_record_of(path)
        if head:
            return head
    return Head(0, ZERO_HASH)


@dataclass
class _Open:
    """The day file our last record went to, still open: its name, size and inode then."""

    name: str
    fd: int
    size: int
    ino: int
    head: Head


class ChainFiles:
    """The lock and day files of one audit directory, for one writer (the caller serialises
    its own threads); `close` (or the object's end) closes what it holds open."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock_path = directory / LOCK_NAME
        self._fds: dict[str, int] = {}
        """Open descriptors by role ('lock', 'day'), closed by the finalizer too."""
        self._open: _Open | None = None
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    @contextlib.contextmanager
    def locked(self) -> Iterator[list[str]]:
        """Hold the directory's lock; yields the day file names as they are now."""
        fd = self._lock_fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield day_names(self.directory)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def head(self, names: Sequence[str]) -> Head:
        """The chain's head (under the lock), from memory when no one appended since our last."""
        if self._current(names):
            assert self._open is not None
            return self._open.head
        self._drop_day()
        return read_head([self.directory / name for name in names])

    def append(self, name: str, line: bytes, head: Head) -> None:
        """Append `line` to day file `name` durably (under the lock); `head` is its record's.
        On failure the file is cut back so no torn record remains."""
        current = self._open
        if current is None or current.name != name:
            self._drop_day()
            current = self._open_day(name)
        size = current.size
        try:
            write_all(current.fd, line)
            durable.sync(current.fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(current.fd, size)
            self._drop_day()
            raise
        current.size, current.head = size + len(line), head

    def close(self) -> None:
        """Close the lock and day files (a later record opens them again)."""
        self._open = None
        _close_all(self._fds)

    def _current(self, names: Sequence[str]) -> bool:
        """Whether the newest day file is still the one we hold, as our last record left it."""
        held = self._open
        if held is None or not names or names[-1] != held.name:
            return False
        try:
            st = os.lstat(self.directory / held.name)
        except OSError:
            return False
        return (st.st_ino, st.st_size) == (held.ino, held.size)

    def _lock_fd(self) -> int:
        """The lock file's descriptor, opened again when the name no longer leads to it."""
        fd = self._fds.get("lock")
        if fd is not None:
            try:
                same = os.lstat(self._lock_path).st_ino == os.fstat(fd).st_ino
            except OSError:
                same = False
            if same:
                return fd
            os.close(self._fds.pop("lock"))
        fd = self._fds["lock"] = open_private(self._lock_path, os.O_RDWR | os.O_CREAT)
        return fd

    def _open_day(self, name: str) -> _Open:
        """Open (or create) a day file, checked; a torn last line is ended first."""
        path = self.directory / name
        created = not os.path.lexists(path)
        fd = self._fds["day"] = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        st = os.fstat(fd)
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            try:  # a torn line from a crash: our record starts on a line of its own
                write_all(fd, b"\n")
            except OSError:
                self._drop_day()
                raise
        if created:
            fsync_dir(self.directory)
        self._open = _Open(name, fd, os.fstat(fd).st_size, st.st_ino, Head(0, ZERO_HASH))
        return self._open

    def _drop_day(self) -> None:
        self._open = None
        fd = self._fds.pop("day", None)
        if fd is not None:
            os.close(fd)


def _close_all(fds: dict[str, int]) -> None:
    for role in list(fds):
        with contextlib.suppress(OSError):
            os.close(fds.pop(role))
