"""Change tracking: snapshots of the tree before and after each command."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
from collections import Counter

from .gitshape import kind_of as _kind
from .limits import CHANGES_MAX, HASH_FILE_MAX, HASH_WALK_MAX, QUARANTINE, TRACK_MAX_ENTRIES
from .paths import _chmod_nofollow, _inside, rel

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Any

    from .paths import Rooted
    from .wire import Change, ChangeRecord, Identity, Lstat, Reopened, Walk
    pass



# -- change tracking --------------------------------------------------------------------------


class Snapshot:
    """One walk of the tree under the root: lstat fields by relative path, hashes, link targets.

    `stats[path]` is `_entry(lstat)`; an entry whose tuple did not change since the last walk
    keeps its hash without being read again. `gits` lists the `.git` entries met (not entered).
    """

    hashes: dict[str, str]  # sha256 of regular files
    unhashed: dict[str, str]  # why a regular file has no hash
    targets: dict[str, str]  # symlink targets

    def __init__(self, stats: dict[str, Lstat], complete: bool, gits: list[str]) -> None:
        self.stats, self.complete, self.gits = stats, complete, gits
        self.hashes, self.unhashed, self.targets = {}, {}, {}
        self.hash_left = HASH_WALK_MAX

    @property
    def size(self) -> int:
        """Bytes the tree takes on disk."""
        return _size(self.stats)


def _entry(st: os.stat_result) -> Lstat:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_blocks,
            st.st_nlink)


def _opaque(name: str) -> bool:
    """Names a copy's manifest lists but never brings back: git's files, and quarantined ones."""
    return _is_git(name) or name.startswith(QUARANTINE)


def _is_git(name: str) -> bool:
    # Any case: on a case-insensitive host file system git takes .GIT for .git.
    return len(name) == 4 and name.lower() == ".git"


def _walk(ctx: Rooted) -> Walk:
    """(stats, complete, .git paths, directories that could not be listed) under the root.

    Everything is entered except read-only mount points (the protected .git and hook paths:
    nothing below them can change). A directory a command made unreadable is opened for the
    walk and closed again after it: what it holds still counts, for the audit and the budget.
    """
    reopened: Reopened = []
    try:
        return _walk_tree(ctx, reopened)
    finally:
        for path, ino, mode in reversed(reopened):  # deepest first, as they were opened
            with contextlib.suppress(OSError):
                _chmod_nofollow(ctx.root, path, ino, mode, kind=stat.S_IFDIR)


def _walk_tree(ctx: Rooted, reopened: Reopened) -> Walk:
    stats: dict[str, Lstat] = {}
    gits: list[str] = []
    unlisted: list[str] = []
    stack = [("", ctx.root)]
    frozen = _readonly_mounts(ctx.root)
    while stack:
        prefix, directory = stack.pop()
        for entry in _listing(ctx, directory, unlisted, prefix, reopened):
            if not prefix and entry.name in ctx.hidden:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            path = prefix + entry.name
            stats[path] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                           st.st_blocks, st.st_nlink)  # _entry(st), inline: the hot loop
            if _is_git(entry.name):
                gits.append(path)
            if stat.S_ISDIR(st.st_mode) and entry.path not in frozen:
                stack.append((path + "/", entry.path))
            if len(stats) >= TRACK_MAX_ENTRIES:
                return stats, False, gits, unlisted
    return stats, True, gits, unlisted


def _listing(ctx: Rooted, directory: str, unlisted: list[str], prefix: str,
             reopened: Reopened) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except PermissionError:
        if _reopen(ctx, directory, prefix, reopened):
            with contextlib.suppress(OSError), os.scandir(directory) as it:
                return list(it)
    except OSError:
        pass
    unlisted.append(prefix)  # gone, or still unreadable: what it held stays unknown
    return []


def _reopen(ctx: Rooted, directory: str, prefix: str, reopened: Reopened) -> bool:
    """Give a directory a command made unreadable (ours: same uid) read and search rights
    for the walk; _walk puts its mode back afterwards."""
    if not prefix:
        return False
    path = prefix.rstrip("/")
    try:
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            return False
        _chmod_nofollow(ctx.root, path, st.st_ino, stat.S_IMODE(st.st_mode) | 0o500,
                        kind=stat.S_IFDIR)
    except OSError:
        return False
    reopened.append((path, st.st_ino, stat.S_IMODE(st.st_mode)))
    return True


def _size(stats: dict[str, Lstat]) -> int:
    """Bytes allocated (st_blocks), hard links counted once."""
    total = sum(st[5] for st in stats.values())
    linked: dict[int, tuple[int, int]] = {}  # inode -> (blocks, names counted)
    for st in stats.values():
        if st[6] > 1 and not stat.S_ISDIR(st[0]):
            blocks, seen = linked.get(st[4], (st[5], 0))
            linked[st[4]] = (blocks, seen + 1)
    return (total - sum(blocks * (seen - 1) for blocks, seen in linked.values())) * 512


def _tree_size(ctx: Rooted) -> int:
    """The project's size on disk now (a stat-only walk)."""
    return _size(_walk(ctx)[0])


def _tree_measure(ctx: Rooted) -> tuple[int, int, bool]:
    """(bytes on disk, entries, whether the walk saw everything) of the project now."""
    stats, complete, _, unlisted = _walk(ctx)
    return _size(stats), len(stats), complete and not unlisted


def _snapshot(ctx: Rooted, old: Snapshot | None, unread: int | None = None) -> Snapshot:
    """A new walk; what did not change is taken from `old`, what did is hashed or read.
    An entry whose ctime is before `unread` (ns) is not read at all (the caller knows its
    content: a copy's baseline), so its hash here may be missing or stale."""
    stats, complete, gits, unlisted = _walk(ctx)
    snap = Snapshot(stats, complete and not unlisted, gits)
    before = {} if old is None else old.stats
    if old is not None:
        snap.hashes, snap.unhashed = dict(old.hashes), dict(old.unhashed)
        snap.targets = dict(old.targets)
        _carry_unseen(old, snap, complete, unlisted)
    for path, st in stats.items():
        if before.get(path) != st and (unread is None or st[3] >= unread):
            _describe(ctx, snap, path, st)
    for path in before.keys() - stats.keys():
        _forget(snap, path)
    return snap


def _carry_unseen(old: Snapshot, snap: Snapshot, complete: bool, unlisted: list[str]) -> None:
    """Keep what a capped walk or an unreadable directory hid: unknown is not deleted."""
    if complete and not unlisted:
        return
    for path in old.stats.keys() - snap.stats.keys():
        if not complete or any(path.startswith(prefix) for prefix in unlisted):
            snap.stats[path] = old.stats[path]
            if path in old.gits:
                snap.gits.append(path)


def _forget(snap: Snapshot, path: str) -> None:
    for table in (snap.hashes, snap.unhashed, snap.targets):
        table.pop(path, None)


def _describe(ctx: Rooted, snap: Snapshot, path: str, st: Lstat) -> None:
    """Hash a new or changed regular file, read a new or changed symlink."""
    _forget(snap, path)
    if stat.S_ISREG(st[0]):
        _hash_into(ctx, snap, path, st)
    elif stat.S_ISLNK(st[0]):
        with contextlib.suppress(OSError):
            snap.targets[path] = os.readlink(os.path.join(ctx.root, path))


def _hash_into(ctx: Rooted, snap: Snapshot, path: str, st: Lstat) -> None:
    size = st[1]
    if size > HASH_FILE_MAX:
        snap.unhashed[path] = f"not hashed: larger than {HASH_FILE_MAX >> 20} MiB"
    elif size > snap.hash_left:
        snap.unhashed[path] = f"not hashed: over the {HASH_WALK_MAX >> 20} MiB hashed per walk"
    else:
        snap.hash_left -= size
        digest, why = _sha256(os.path.join(ctx.root, path), st[4])
        if digest:
            snap.hashes[path] = digest
        else:
            assert why is not None  # _sha256 says why whenever it gives no digest
            snap.unhashed[path] = why


def _sha256(path: str, ino: int) -> tuple[str | None, str | None]:
    """(hex digest, None) of a regular file, or (None, why not); never follows a link or blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_ino != ino:
                return None, "not hashed: replaced while being read"
            digest = hashlib.sha256()
            # Plain reads sized to the file: a buffered 1 MiB read each was most of the cost
            # of hashing a tree of small files (a copy's manifest hashes every one).
            want = min(info.st_size + 1, 1 << 20)
            while True:
                chunk = os.read(fd, want)
                if not chunk:
                    break
                digest.update(chunk)
                want = 1 << 20
        finally:
            os.close(fd)
    except OSError as exc:
        return None, f"not hashed: {exc.strerror or exc}"
    return digest.hexdigest(), None


def _diff(old: Snapshot, new: Snapshot) -> list[Change]:
    """Sorted (path, change) pairs from `old` to `new`; contents, not timestamps, decide."""
    found: list[Change] = []
    for path, st in new.stats.items():
        prev = old.stats.get(path)
        if prev is None:
            found.append((path, "created"))
        elif prev != st:
            change = _change_kind(old, new, path, prev, st)
            if change:
                found.append((path, change))
    found += [(path, "deleted") for path in old.stats.keys() - new.stats.keys()]
    found.sort()
    return found


def _change_kind(old: Snapshot, new: Snapshot, path: str, prev: Lstat, st: Lstat) -> str | None:
    if _kind(prev[0]) != _kind(st[0]):
        return "type"
    if stat.S_ISREG(st[0]) and _content_changed(old, new, path, prev, st):
        return "modified"
    if stat.S_ISLNK(st[0]) and old.targets.get(path) != new.targets.get(path):
        return "modified"
    return "mode" if stat.S_IMODE(prev[0]) != stat.S_IMODE(st[0]) else None


def _content_changed(old: Snapshot, new: Snapshot, path: str, prev: Lstat, st: Lstat) -> bool:
    before, after = old.hashes.get(path), new.hashes.get(path)
    if before and after:
        return before != after
    # Not hashed: size, mtime or ctime tell (a command can set mtime back, never ctime).
    return prev[1] != st[1] or prev[2] != st[2] or prev[3] != st[3]


def _change_record(old: Snapshot, new: Snapshot, path: str, change: str) -> ChangeRecord:
    """One entry of meta["changes"] / meta["outside_changes"]."""
    a, b = old.stats.get(path), new.stats.get(path)
    st = b or a
    assert st is not None  # a change is of a path in one walk or the other
    record: ChangeRecord = {
        "path": path, "change": change, "kind": _kind(st[0]),
        "sha256_before": _file_hash(old, path, a), "sha256_after": _file_hash(new, path, b),
        "size_before": _file_size(a), "size_after": _file_size(b),
        "mode_before": _octal(a), "mode_after": _octal(b),
        "target": new.targets.get(path) if b else old.targets.get(path)}
    why = (b and new.unhashed.get(path)) or (a and old.unhashed.get(path))
    if why:
        record["unhashed"] = why
    return record


def _file_hash(snap: Snapshot, path: str, st: Lstat | None) -> str | None:
    return snap.hashes.get(path) if st and stat.S_ISREG(st[0]) else None


def _file_size(st: Lstat | None) -> int | None:
    return st[1] if st and stat.S_ISREG(st[0]) else None


def _octal(st: Lstat | None) -> str | None:
    """Permission bits as the 4-digit octal text chmod takes, e.g. '0644' or '4755'."""
    return None if st is None else f"{stat.S_IMODE(st[0]):04o}"


def _counts(found: list[Change]) -> str:
    """'2 created, 1 modified' for a list of (path, change)."""
    count = Counter(change for _, change in found)
    words = (("created", "created"), ("modified", "modified"), ("deleted", "deleted"),
             ("mode", "mode changed"), ("type", "type changed"))
    return ", ".join(f"{count[key]} {word}" for key, word in words if count[key])


def _coarse_now_ns() -> int:
    """Now, on the clock file timestamps come from (Linux stamps files with the coarse clock,
    up to a tick behind time.time_ns(): a file made right after us must not look older)."""
    try:
        return time.clock_gettime_ns(5)  # CLOCK_REALTIME_COARSE
    except (AttributeError, OSError):
        return time.time_ns()


class Tracker:
    """The index of the project between calls, and which .git entries were there before."""

    def __init__(self, ctx: Rooted) -> None:
        self.ctx = ctx
        self.index: Snapshot | None = None  # the last walk (None before the first)
        self.started_ns = _coarse_now_ns()
        # .git entries older than the session: path -> identity
        self.known_git: dict[str, Identity | None] = {}
        # .git entries our commands made that could not be disabled
        self.own_git: set[str] = set()

    def start(self) -> None:
        """The first index; .git entries made since the toolbox started count as new."""
        self.index = _snapshot(self.ctx, None)
        self.known_git = {path: self.identity(self.index, path) for path in self.index.gits
                          if self.index.stats[path][3] < self.started_ns}

    def rewalk(self) -> tuple[Snapshot, Snapshot, list[Change]]:
        """(old index, new index, changes between them); the new one becomes the index."""
        assert self.index is not None  # start() came first
        old, self.index = self.index, _snapshot(self.ctx, self.index)
        return old, self.index, _diff(old, self.index)

    @staticmethod
    def identity(snap: Snapshot, path: str) -> Identity | None:
        """What makes a .git entry the same one: its kind, inode and link target."""
        st = snap.stats.get(path)
        return None if st is None else (_kind(st[0]), st[4], snap.targets.get(path))

    def foreign_git(self) -> list[str]:
        """.git entries that appeared or were replaced during the session, not by our commands."""
        assert self.index is not None  # start() came first
        return [path for path in self.index.gits if path not in self.own_git
                and self.known_git.get(path) != self.identity(self.index, path)]

    def refresh(self, path: str) -> None:
        """Re-read one entry's lstat after we changed it ourselves (its content is the same)."""
        assert self.index is not None  # start() came first
        self.index.stats[path] = _entry(os.lstat(os.path.join(self.ctx.root, path)))

    def forget(self, path: str) -> None:
        """Drop an entry we removed ourselves."""
        assert self.index is not None  # start() came first
        self.index.stats.pop(path, None)
        for table in (self.index.hashes, self.index.unhashed, self.index.targets):
            table.pop(path, None)

    def rename(self, path: str, new_path: str) -> None:
        """Move an entry we renamed, and everything indexed below it, to its new name."""
        assert self.index is not None  # start() came first
        below = path + "/"
        for old in [p for p in self.index.stats if p == path or p.startswith(below)]:
            moved = new_path + old[len(path):]
            self.index.stats[moved] = self.index.stats.pop(old)
            for table in (self.index.hashes, self.index.unhashed, self.index.targets):
                if old in table:
                    table[moved] = table.pop(old)
        self.index.gits = [g for g in self.index.gits if g != path and not g.startswith(below)]
        self.refresh(new_path)

    def note_write(self, real: str, digest: str) -> None:
        """A write_file/edit_file result, so the next walk does not call it an outside change."""
        path = rel(self.ctx, real)
        parts = path.split("/")
        if self.index is None or parts[0] in self.ctx.hidden:
            return
        for i in range(1, len(parts) + 1):  # the file and the directories made for it
            sub = "/".join(parts[:i])
            if i == len(parts) or sub not in self.index.stats:
                self.refresh(sub)
        _forget(self.index, path)
        self.index.hashes[path] = digest
        if _is_git(parts[-1]) and path not in self.index.gits:
            self.index.gits.append(path)


class _Tracking:
    """What tracking adds to one shell call's result: meta keys, lines for the model, verdict."""

    meta: dict[str, Any]
    lines: list[str]
    status: str | None  # the status line, when tracking decides it (the disk budget)
    fsize_note: str | None

    def __init__(self) -> None:
        self.meta, self.lines, self.failed, self.status = {}, [], False, None
        self.fsize_note = None

    def add_changes(self, key: str, old: Snapshot, new: Snapshot, found: list[Change]) -> None:
        """meta[key] (capped), key_total and key_truncated for a list of (path, change)."""
        self.meta[key] = [_change_record(old, new, path, change)
                          for path, change in found[:CHANGES_MAX]]
        self.meta[f"{key}_total"] = len(found)
        self.meta[f"{key}_truncated"] = len(found) > CHANGES_MAX


def _mount_table(root: str, mountinfo: str = "/proc/self/mountinfo") -> dict[bytes, str]:
    """{mount id: mount point} of the mounts below root (their ids survive a rename)."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    table: dict[bytes, str] = {}
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 5:
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]),
                                       fields[4]))
            if point != root and _inside(root, point):
                table[fields[0]] = point
    return table


def _readonly_mounts(root: str, mountinfo: str = "/proc/self/mountinfo") -> set[str]:
    """Mount points at or under root that are mounted read-only."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    found: set[str] = set()
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 5 and b"ro" in fields[5].split(b","):
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]),
                                       fields[4]))
            if _inside(root, point):
                found.add(point)
    return found
