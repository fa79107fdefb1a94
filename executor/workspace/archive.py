"""The copy of a project that goes into a copy workspace: planned, guarded, streamed as tar.

`plan` walks the tree once (stat only) from directory descriptors, never following a link:
links are copied as links, FIFOs, sockets and devices are skipped with a note, the legacy
in-tree state dir and the person's excludes are left out, and the size guard is checked
before anything is sent. `.git` entries (any depth) go to a separate part, so the engine can
give them to another owner: read-only for the sandbox's user.

`Archive.main()` and `Archive.git()` stream the two parts as tar (ustar, PAX records for long
names): each file is opened from its parent's descriptor with O_NOFOLLOW, checked to be the
inode that was planned, read once, hashed from the very bytes sent, and recorded in
`Archive.manifest` — the base that changes are later compared against. Modes are normalised
(0644/0755 files, 0755 directories): set-id bits are never copied in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import stat
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from executor.errors import ProjectTooLargeError, WorkspaceError
from executor.state import LEGACY_DIR, real_root, state_home
from executor.toolbox.gitshape import kind_of
from executor.toolbox.nofollow import open_beneath
from executor.workspace.manifest import Entry, Manifest, normal
from executor.workspace.paths import Excludes, is_git_name, parent_of, sort_key

BLOCK = 512
CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

BlobReader = Callable[[str], bytes]
"""Returns the content of a blob by sha256 (the state dir's blob store)."""


class Planned(NamedTuple):
    """One entry to copy: where it comes from and what it is (a tuple: a big tree makes
    one an entry, and a frozen dataclass costs several times a tuple to make)."""

    path: str
    kind: str
    mode: int
    size: int = 0
    mtime: int = 0
    ino: int = 0
    target: str | None = None
    blob: str | None = None
    """sha256 of the content in the blob store (a pending change put back on resume)."""


@dataclass
class Plan:
    """What a copy holds, before a byte of it is read."""

    main: list[Planned] = field(default_factory=list)
    git: list[Planned] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was skipped, and why (shown to the person)."""
    bytes: int = 0
    entries: int = 0


@dataclass(frozen=True)
class Limits:
    """The size guard and what is left out."""

    max_bytes: int
    max_entries: int
    excludes: Excludes = field(default_factory=Excludes)
    git_apart: bool = True
    """Put `.git` entries in their own part (False: --allow-git-writes)."""


# ---------------------------------------------------------------------------- planning


def plan(root: Path, limits: Limits) -> Plan:
    """Walk `root` without following links; ProjectTooLargeError past the guard."""
    found, sizes = Plan(), _TopSizes()
    skip = _state_inside(root)
    with _opened(root) as root_fd:
        stack: list[tuple[str, bool]] = [("", False)]
        while stack:
            rel_dir, in_git = stack.pop()
            for rel, st, target in _listing(root_fd, rel_dir, found.notes):
                if rel in skip:
                    continue
                sub = _place(found, limits, rel, st, target, in_git)
                if sub is not None:
                    stack.append((rel, sub))
                _count(found, sizes, limits, rel, st)
    found.main.sort(key=lambda p: sort_key(p.path))
    found.git.sort(key=lambda p: sort_key(p.path))
    return found


def _state_inside(root: Path) -> set[str]:
    """The legacy in-tree state dir, and the state home should it lie in the tree."""
    skip = {LEGACY_DIR}
    home, real = real_root(state_home()), real_root(root)
    if real in home.parents:
        skip.add(home.relative_to(real).as_posix())
    return skip


def _place(found: Plan, limits: Limits, rel: str, st: os.stat_result, target: str | None,
           in_git: bool) -> bool | None:
    """Add one entry to the plan; for a directory to enter, whether it is inside a repository."""
    kind = kind_of(st.st_mode)
    name = rel.rpartition("/")[2]
    git = in_git or (limits.git_apart and name.lower() == ".git")
    if kind == "other":
        found.notes.append(f"skipped {rel}: not a regular file, directory or link")
        return None
    if not git and limits.excludes.excluded(rel, kind == "dir"):
        return None
    if kind == "symlink" and target is None:
        found.notes.append(f"skipped {rel}: its link target could not be read")
        return None
    entry = Planned(rel, kind, normal(kind, st.st_mode), st.st_size if kind == "file" else 0,
                    max(0, int(st.st_mtime)), st.st_ino, target)
    (found.git if git else found.main).append(entry)
    return git if kind == "dir" else None


def _count(found: Plan, sizes: _TopSizes, limits: Limits, rel: str, st: os.stat_result) -> None:
    found.entries += 1
    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    found.bytes += size
    sizes.add(rel, size)
    if found.entries > limits.max_entries:
        raise ProjectTooLargeError(
            f"the project has more than {limits.max_entries:,} files and directories, more "
            "than the copy workspace takes" + sizes.largest(), fix=_TOO_BIG_FIX)
    if found.bytes > limits.max_bytes:
        raise ProjectTooLargeError(
            f"the project holds more than {_human(limits.max_bytes)}, more than the copy "
            "workspace takes (--copy-limit)" + sizes.largest(), fix=_TOO_BIG_FIX)


_TOO_BIG_FIX = ("leave big directories out with --exclude (gitignore-style, e.g. --exclude "
                "node_modules/), raise --copy-limit, or use --workspace bind")


class _TopSizes:
    """Bytes and entries per top-level name, to say what makes a project too big."""

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}

    def add(self, rel: str, size: int) -> None:
        top = rel.partition("/")[0]
        self.bytes[top] = self.bytes.get(top, 0) + size

    def largest(self) -> str:
        top = sorted(self.bytes.items(), key=lambda item: -item[1])[:3]
        shown = ", ".join(f"{name} {_human(size)}" for name, size in top if size)
        return f"; largest so far: {shown}" if shown else ""


def _human(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return ""


@contextlib.contextmanager
def _opened(root: Path) -> Iterator[int]:
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the project root {root}: {exc.strerror}") from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _listing(root_fd: int, rel_dir: str, notes: list[str]
             ) -> list[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, link target) of a directory's entries, from the root's fd."""
    try:
        fd = open_dir(root_fd, rel_dir)
    except OSError as exc:
        notes.append(f"skipped {rel_dir or '.'}: {exc.strerror}")
        return []
    found = []
    try:
        with os.scandir(fd) as it:
            prefix = f"{rel_dir}/" if rel_dir else ""
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since the listing
                target = _link_target(entry.name, fd, st) if stat.S_ISLNK(st.st_mode) else None
                found.append((prefix + entry.name, st, target))
    except OSError as exc:
        notes.append(f"skipped {rel_dir or '.'}: {exc.strerror}")
    finally:
        os.close(fd)
    return found


def _link_target(name: str, dir_fd: int, st: os.stat_result) -> str | None:
    if not stat.S_ISLNK(st.st_mode):
        return None
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def open_dir(root_fd: int, rel: str) -> int:
    """A descriptor of `rel` under the root, opened one component at a time, no link followed."""
    return open_beneath(root_fd, rel.split("/") if rel else [], os.O_RDONLY)


# ---------------------------------------------------------------------------- overlay


def overlay(found: Plan, changes: dict[str, Entry | None]) -> Plan:
    """The plan with pending changes put back: `changes` maps paths to their state after
    (None: deleted); file contents come from the blob store."""
    main = {p.path: p for p in found.main}
    for path, after in changes.items():
        main.pop(path, None)
        if after is not None:
            main[path] = Planned(path, after.kind, after.mode, after.size,
                                 target=after.target, blob=after.sha256)
    kept = {path: p for path, p in main.items() if _has_parents(path, main)}
    found.main = sorted(kept.values(), key=lambda p: sort_key(p.path))
    return found


def _has_parents(path: str, planned: dict[str, Planned]) -> bool:
    parent = parent_of(path)
    while parent:
        if planned.get(parent) is None or planned[parent].kind != "dir":
            return False
        parent = parent_of(parent)
    return True


# ---------------------------------------------------------------------------- streaming


class Archive:
    """A planned copy, streamed as tar; `manifest` fills in as the main part is sent."""

    def __init__(self, root: Path, found: Plan, *, uid: int, gid: int, git_uid: int,
                 git_gid: int, blobs: BlobReader | None = None) -> None:
        self.root, self.plan = root, found
        self.uid, self.gid, self.git_uid, self.git_gid = uid, gid, git_uid, git_gid
        self.blobs = blobs
        self.manifest: Manifest = {}
        self.open_dirs = {parent_of(p.path) for p in found.git
                          if p.path.rpartition("/")[2].lower() == ".git"}
        """Directories holding a `.git`: sent writable by all (0777) so that the other user
        can create the repository in them; `load_copy` closes them (0755) afterwards."""
        self.notes = list(found.notes)
        self.sent = 0
        self.main_entries = 0
        """Entries of the main part sent so far."""

    def main(self) -> Generator[bytes, None, None]:
        """The project without its repositories, owned by the sandbox's user."""
        yield from self._stream(self.plan.main, self.uid, self.gid, record=True)

    def git(self) -> Generator[bytes, None, None]:
        """Every `.git` entry and what is inside, owned by another user."""
        yield from self._stream(self.plan.git, self.git_uid, self.git_gid, record=False)

    def _stream(self, entries: list[Planned], uid: int, gid: int, *, record: bool
                ) -> Generator[bytes, None, None]:
        with _opened(self.root) as root_fd, _DirCursor(root_fd) as cursor:
            batch: list[bytes] = []
            size = 0  # of the batch, kept as it grows (summing it each time was quadratic)
            for entry in entries:
                parts = self._entry(cursor, entry, uid, gid, record)
                batch.extend(parts)
                size += sum(map(len, parts))
                if size >= CHUNK:
                    yield from self._flush(batch)
                    size = 0
            batch.append(bytes(2 * BLOCK))
            yield from self._flush(batch)

    def _flush(self, batch: list[bytes]) -> Generator[bytes, None, None]:
        data = b"".join(batch)
        batch.clear()
        self.sent += len(data)
        yield data

    def _entry(self, cursor: _DirCursor, entry: Planned, uid: int, gid: int, record: bool
               ) -> list[bytes]:
        name = os.fsencode(entry.path)
        if entry.kind == "dir":
            mode = 0o777 if record and entry.path in self.open_dirs else entry.mode
            parts = [header(name + b"/", b"5", mode, uid, gid, 0, entry.mtime)]
            state = Entry("dir", entry.mode)
        elif entry.kind == "symlink":
            target = os.fsencode(entry.target or "")
            parts = [header(name, b"2", 0o777, uid, gid, 0, entry.mtime, target)]
            state = Entry("symlink", 0o777, target=entry.target)
        else:
            data = self._content(cursor, entry)
            if data is None:
                return []
            parts = [header(name, b"0", entry.mode, uid, gid, len(data), entry.mtime), data,
                     bytes(-len(data) % BLOCK)]
            state = Entry("file", entry.mode, len(data), hashlib.sha256(data).hexdigest())
        if record:
            self.main_entries += 1
            if not is_git_path(entry.path):  # repositories are never part of a change
                self.manifest[entry.path] = state
        return parts

    def _content(self, cursor: _DirCursor, entry: Planned) -> bytes | None:
        """The bytes to send: a pending change's blob, else the host file as planned."""
        if entry.blob is not None and self.blobs is not None:
            return self.blobs(entry.blob)
        try:
            return _read_planned(cursor, entry)
        except OSError as exc:
            self.notes.append(f"skipped {entry.path}: {exc.strerror or exc}")
            return None


def _read_planned(cursor: _DirCursor, entry: Planned) -> bytes:
    parent = cursor.at(parent_of(entry.path))
    fd = os.open(entry.path.rpartition("/")[2], _FILE_FLAGS, dir_fd=parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_ino != entry.ino:
            raise OSError("it was replaced while the copy was made")
        first = os.read(fd, info.st_size + 1)
        if len(first) == info.st_size:  # one byte more was asked for: this is the end
            return first
        chunks = [first]  # it grew or shrank meanwhile, or the read was capped: to the end
        while chunks[-1]:
            chunks.append(os.read(fd, CHUNK))
        return b"".join(chunks)
    finally:
        os.close(fd)


class _DirCursor:
    """Descriptors of the current directory chain, so siblings share their parent's."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.chain: list[tuple[str, int]] = []

    def __enter__(self) -> _DirCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, fd in self.chain:
            os.close(fd)
        self.chain.clear()

    def at(self, rel: str) -> int:
        """A descriptor of directory `rel` (no link followed on the way)."""
        if not rel:
            return self.root_fd
        while self.chain and not (rel == self.chain[-1][0]
                                  or rel.startswith(self.chain[-1][0] + "/")):
            os.close(self.chain.pop()[1])
        if self.chain and self.chain[-1][0] == rel:
            return self.chain[-1][1]
        base, fd = self.chain[-1] if self.chain else ("", self.root_fd)
        rest = rel[len(base) + 1:] if base else rel
        for name in rest.split("/"):
            fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            base = f"{base}/{name}" if base else name
            self.chain.append((base, fd))
        return fd


# ---------------------------------------------------------------------------- tar


def header(name: bytes, kind: bytes, mode: int, uid: int, gid: int, size: int, mtime: int,
           link: bytes = b"") -> bytes:
    """A ustar header block, preceded by a PAX record block for long names or big ids."""
    records = {}
    if len(name) > 100:
        records["path"] = name
    if len(link) > 100:
        records["linkpath"] = link
    if uid > 0o7777777 or gid > 0o7777777:
        records.update(uid=str(uid).encode(), gid=str(gid).encode())
    pax = _pax(records) if records else b""
    return pax + _ustar(name[:100], kind, mode, min(uid, 0o7777777), min(gid, 0o7777777), size,
                        mtime, link[:100])


_MAGIC = b"ustar\x0000"
_TAIL = bytes(BLOCK - 265)  # what follows the magic: prefix, devices, all zero


def _ustar(name: bytes, kind: bytes, mode: int, uid: int, gid: int, size: int, mtime: int,
           link: bytes) -> bytes:
    head = b"%s%07o\0%07o\0%07o\0%011o\0%011o\0" % (
        name.ljust(100, b"\0"), mode, uid, gid, size, min(mtime, 0o77777777777))
    rest = kind + link.ljust(100, b"\0") + _MAGIC
    checksum = sum(head) + sum(rest) + 8 * ord(" ")  # the checksum field counts as spaces
    return b"".join((head, b"%06o\0 " % checksum, rest, _TAIL))


def _pax(records: dict[str, bytes]) -> bytes:
    body = b"".join(_pax_record(key, value) for key, value in records.items())
    return (_ustar(b"././@PaxHeader", b"x", 0o644, 0, 0, len(body), 0, b"") + body
            + bytes(-len(body) % BLOCK))


def _pax_record(key: str, value: bytes) -> bytes:
    payload = b" " + key.encode() + b"=" + value + b"\n"
    length = len(payload) + 1
    while len(str(length)) + len(payload) != length:
        length += 1
    return str(length).encode() + payload


def is_git_path(path: str) -> bool:
    """Whether any component of `path` is a `.git` (or quarantined) entry."""
    if ".git" not in path.lower():  # most paths: no component to look at
        return False
    return any(is_git_name(part) for part in path.split("/"))


class Prefetch:
    """A stream's chunks produced ahead in a thread (at most `limit` bytes waiting), so the
    archive is read and hashed while the container is still being created."""

    _END = object()

    def __init__(self, chunks: Generator[bytes, None, None], limit: int = 64 << 20) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max(1, limit // CHUNK))
        self._stop = threading.Event()
        self.produced = threading.Event()
        """Set once the stream has made its last chunk (they may not all be consumed yet)."""
        self._thread = threading.Thread(target=self._run, args=(chunks,), daemon=True,
                                        name="copy-prefetch")
        self._thread.start()

    def _run(self, chunks: Generator[bytes, None, None]) -> None:
        try:
            for chunk in chunks:
                if not self._put(chunk):
                    return
            self.produced.set()
            self._put(self._END)
        except BaseException as exc:  # handed to the consumer, raised in its thread
            self._put(exc)
        finally:
            chunks.close()  # its directory descriptors

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():  # closed from another thread: nothing more comes
                    raise WorkspaceError("the copy was stopped") from None
                continue
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]

    def close(self) -> None:
        """Stop producing (the copy is not needed, or failed)."""
        self._stop.set()
        self._thread.join(timeout=5)

