"""What the host asks of a copy workspace (never offered to the model)."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import time

from .gitshape import kind_of as _kind
from .nofollow import open_parent
from .paths import rel, resolve
from .tracking import _is_git, _opaque, _sha256, _snapshot
from .wire import ok

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Any

    from .context import Context
    from .records import ManifestSince, ReadFilesMeta
    from .tracking import Snapshot
    from .wire import Chunk, Lstat, ManifestEntry, Result, RootIdentity
    pass



# -- host operations: what the host asks of a copy workspace (never offered to the model) ------

READ_FILES_MAX = 16 * 1024 * 1024  # bytes of file content in one read_files answer


def _identity(path: str) -> RootIdentity | None:
    """What tells a directory apart across machines: device, inode and mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns}


BASELINE_TICK_MAX = 0.1
"""Seconds `baseline` waits for the coarse clock to tick (every few ms)."""
CLOCK_REALTIME_COARSE = 5  # Linux's; the time module does not name it


def op_baseline(ctx: Context) -> Result:
    """Mark the moment a copy has arrived, before any tool ran: a later `manifest` with
    `since_baseline` names the entries unchanged since instead of reading them.

    The kernel stamps an inode's ctime with the clock at every change of its content or
    metadata, a rename or a new link included, and nothing in the container can set a ctime
    or the clock back. So once the clock has ticked past the copy's last write, an entry whose
    ctime is still before that tick is as the copy wrote it. No walk is needed: one tick."""
    first = _coarse_now()
    deadline = time.monotonic() + BASELINE_TICK_MAX
    while first and _coarse_now() <= first and time.monotonic() < deadline:
        time.sleep(0.001)
    mark = _coarse_now()
    ctx.baseline = mark if first and mark > first else None
    kept = ctx.baseline is not None
    return ok("baseline kept" if kept else "no baseline", kept=kept)


def _coarse_now() -> int:
    """The clock file times come from (a coarse one, ticking every few ms), in ns; 0 when
    it cannot be read (then no baseline is kept)."""
    try:
        return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
    except (OSError, AttributeError):
        return 0


def _since(ctx: Context, asked: bool) -> int | None:
    """The baseline's mark, when asked for and the clock has not gone back before it."""
    mark = ctx.baseline if asked else None
    return mark if mark is not None and _coarse_now() >= mark else None


def op_manifest(ctx: Context, since_baseline: bool = False) -> Result:
    """Every entry of the tree with its kind, mode, size, hash and link target; with
    `since_baseline`, entries unchanged since the baseline (ctime before its mark) are only
    named ("same"), unread."""
    entries: list[ManifestEntry]
    skipped: list[list[str]]
    same: list[str] = []
    old = ctx.tracker.index if ctx.tracker is not None else None
    mark = _since(ctx, since_baseline)
    snap = _snapshot(ctx, old, mark)  # what a command's walk already hashed is not read again
    entries, skipped = [], []
    for path, st in snap.stats.items():
        if ".git" in path.lower():  # .git and .git.quarantined-* names hold it: most do not
            parts = path.split("/")
            if any(_opaque(name) for name in parts[:-1]):
                continue  # inside a .git entry (a walk never enters one; a carried-over may be)
            if _opaque(parts[-1]):
                skipped.append([path, "git repository" if _is_git(parts[-1]) else "quarantined"])
                continue
        if mark is not None and st[3] < mark:
            same.append(path)
            continue
        entries.append(_manifest_entry(ctx, snap, path, st))
    entries.sort()
    skipped.sort()
    listed: ManifestSince = {"entries": entries, "skipped": skipped, "complete": snap.complete}
    if mark is not None:
        listed["same"] = same
    return ok(f"{len(entries) + len(same)} entries", **listed)


def _manifest_entry(ctx: Context, snap: Snapshot, path: str, st: Lstat) -> ManifestEntry:
    kind, digest = _kind(st[0]), None
    if kind == "file":
        digest = snap.hashes.get(path) or _sha256(os.path.join(ctx.root, path), st[4])[0]
    return [path, kind, stat.S_IMODE(st[0]), st[1] if kind == "file" else 0, digest,
            snap.targets.get(path) if kind == "symlink" else None]


def op_read_files(ctx: Context, files: list[Any]) -> Result:
    """Chunks of regular files, never through a link; errors per file."""
    found: list[Chunk]
    found, budget = [], READ_FILES_MAX
    for item in files:
        if budget <= 0:
            break
        found.append(_read_chunk(ctx, item, budget))
        budget -= found[-1].get("length", 0)
    sent: ReadFilesMeta = {"files": found}
    return ok(f"{len(found)} files", **sent)


def _read_chunk(ctx: Context, item: object, budget: int) -> Chunk:
    if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str)
            or not all(isinstance(n, int) and n >= 0 for n in item[1:])):
        return {"path": str(item)[:200], "error": "expected [path, offset, length]"}
    path, offset, length = item
    if not _plain_relative(ctx, path):
        return {"path": path, "error": "not a plain relative path"}
    try:
        parent, leaf = open_parent(ctx.root, path)
        try:
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=parent)
        finally:
            os.close(parent)
        with os.fdopen(fd, "rb"):
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return {"path": path, "error": "not a regular file"}
            data = os.pread(fd, min(length, budget), offset)
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}
    return {"path": path, "offset": offset, "size": info.st_size, "length": len(data),
            "data": base64.b64encode(data).decode("ascii")}


def _plain_relative(ctx: Context, path: str) -> bool:
    parts = path.split("/")
    return (bool(path) and "\0" not in path and not path.startswith("/")
            and all(part not in ("", ".", "..") for part in parts) and parts[0] not in ctx.hidden)


def op_snapshot(ctx: Context, path: str, max_bytes: int = 0) -> Result:
    """The file a write of `path` would change, as it is now (content when small enough)."""
    real = resolve(ctx, path, write=True)
    found: dict[str, Any] = {"resolved": rel(ctx, real), "exists": False}
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return ok("absent", **found)
    found.update(exists=True, kind=_kind(st.st_mode), mode=stat.S_IMODE(st.st_mode),
                 size=st.st_size)
    if found["kind"] == "file":
        found.update(_snapshot_content(real, st, max_bytes))
    return ok(found["kind"], **found)


def _snapshot_content(real: str, st: os.stat_result, max_bytes: int) -> dict[str, str | None]:
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_ino != st.st_ino:
            return {"sha256": None}
        digest, kept = hashlib.sha256(), bytearray()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if len(kept) <= max_bytes:
                kept += chunk
    small = len(kept) <= max_bytes
    return {"sha256": digest.hexdigest(),
            "data": base64.b64encode(bytes(kept)).decode("ascii") if small else None}
