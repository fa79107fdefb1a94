"""Pending changes of a copy workspace: collected from the (hostile) sandbox, checked, kept.

At the end of a run the toolbox lists every entry of the copy (`manifest`); the host compares
that with the base recorded at copy time, path by path, and fetches the content of every
changed file (`read_files`), checking it against the hash the listing gave. Nothing the
sandbox says is taken on trust: each path must pass `paths.problem`, each entry be a file,
directory or link with a plain mode (set-id bits are dropped and said so), each file stay
under the size caps, each link target be plain text. What fails is listed under `refused`
with the reason, never applied.

changes.json (format version 1):

    {"version": 1, "id": "<16 hex>", "session": ..., "root": ..., "collected_at": ...,
     "base_taken_at": ..., "changes": [{"path", "before": [kind, mode, size, sha256, target]
     | null, "after": ... | null, "flags": [...], "added": n | null, "removed": n | null}],
     "refused": [{"path", "reason"}], "notes": [...]}

Contents live in the blob store under their sha256: the after-state of every changed file,
and the before-state of modified and deleted ones (read from the host with care, and kept
only when it still matches the base).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from executor import toolmeta
from executor.errors import WorkspaceError
from executor.messages import ToolResult
from executor.workspace import hostfs
from executor.workspace.manifest import (
    Entry,
    Manifest,
    check,
    from_row,
    manifest_from_rows,
    manifest_rows,
    normal,
)
from executor.workspace.paths import problem, sort_key
from executor.workspace.resolve import Lookup, after_state, leaves_root

if TYPE_CHECKING:
    from executor.toolmeta import Chunk
from executor.workspace.risk import flags
from executor.workspace.store import BlobStore, read_json, session_dir, write_json

FORMAT_VERSION = 1
MAX_FILE = 64 * 1024 * 1024
"""Bytes one changed file may have to come back."""
MAX_TOTAL = 1024 * 1024 * 1024
"""Bytes all changed files of a run may have to come back."""
MAX_ENTRIES = 200_000
READ_BATCH = 8 * 1024 * 1024
"""Bytes asked for in one read_files call."""
TEXT_SNIFF = 8192
DIFF_LINES_MAX = 20_000
"""Files with more lines than this get +/- counts without difflib's matching."""


def utc_now() -> str:
    """The current time as ISO 8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Caller(Protocol):
    """What collecting needs of a sandbox: its `call`."""

    def __call__(self, tool: str, args: dict[str, Any], *, timeout: float | None = None
                 ) -> ToolResult: ...


@dataclass(frozen=True)
class Change:
    """One path's change: its state before (the base) and after (the sandbox)."""

    path: str
    before: Entry | None
    after: Entry | None
    flags: list[str] = field(default_factory=list)
    added: int | None = None
    removed: int | None = None
    bits: int | None = None
    """The permission bits a file this change writes where none is gets (an undo putting a
    removed file back: the bits it had); None: its normal mode."""
    host_bits: int | None = None
    """The permission bits of the file at this path in the tree now (for display: a mode
    change is shown as it will really happen); None: not looked at, or not a file."""

    @property
    def status(self) -> str:
        """A: added, D: deleted, M: modified, T: kind changed."""
        if self.before is None:
            return "A"
        if self.after is None:
            return "D"
        return "T" if self.before.kind != self.after.kind else "M"

    def to_json(self) -> dict[str, Any]:
        """The form kept in changes.json."""
        return {"path": self.path, "before": self.before.row() if self.before else None,
                "after": self.after.row() if self.after else None, "flags": self.flags,
                "added": self.added, "removed": self.removed}


@dataclass
class Changeset:
    """Everything a copy session changed, relative to its base."""

    session: str
    root: str
    changes: list[Change]
    refused: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    collected_at: str = field(default_factory=utc_now)
    base_taken_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """The form kept in changes.json."""
        return {"version": FORMAT_VERSION, "id": self.id, "session": self.session,
                "root": self.root, "collected_at": self.collected_at,
                "base_taken_at": self.base_taken_at,
                "changes": [c.to_json() for c in self.changes], "refused": self.refused,
                "notes": self.notes}

    def by_path(self) -> dict[str, Change]:
        """Changes by path."""
        return {c.path: c for c in self.changes}


# ---------------------------------------------------------------------------- base and changes


@dataclass
class Base:
    """What a copy was made from."""

    manifest: Manifest
    taken_at: str
    notes: list[str] = field(default_factory=list)


def save_base(directory: Path, base: Base) -> None:
    """Keep the base of a session's copy."""
    write_json(directory / "base.json", {"version": FORMAT_VERSION, "taken_at": base.taken_at,
                                         "entries": manifest_rows(base.manifest),
                                         "notes": base.notes})


def load_base(directory: Path) -> Base | None:
    """The base of a session's copy; None when none was kept."""
    raw = read_json(directory / "base.json")
    if raw is None:
        return None
    try:
        manifest = manifest_from_rows(raw["entries"])
        return Base(manifest, str(raw.get("taken_at", "")), [str(n) for n in raw.get("notes", [])])
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkspaceError(f"{directory / 'base.json'} is not a valid base ({exc})") from exc


def save_changes(directory: Path, changeset: Changeset) -> None:
    """Keep a session's pending changes (replacing the previous run's)."""
    write_json(directory / "changes.json", changeset.to_json())


def load_changes(root: Path, session: str) -> Changeset | None:
    """A session's pending changes; None when it has none recorded (a bind session)."""
    path = session_dir(root, session) / "changes.json"
    raw = read_json(path)
    if raw is None:
        return None
    try:
        return _changeset(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkspaceError(f"{path} is not a valid changeset ({exc})",
                             fix=f"move it away: mv {path} {path}.bad") from exc


def _changeset(raw: Any) -> Changeset:
    if raw.get("version") != FORMAT_VERSION:
        raise ValueError(f"format version {raw.get('version')!r}")
    changes = []
    for item in raw["changes"]:
        reason = problem(item["path"])
        if reason:
            raise ValueError(f"{item['path']!r}: {reason}")
        changes.append(Change(
            item["path"], from_row(item["before"]) if item["before"] else None,
            from_row(item["after"]) if item["after"] else None,
            [str(f) for f in item.get("flags", [])], item.get("added"), item.get("removed")))
    return Changeset(str(raw["session"]), str(raw["root"]), changes,
                     [dict(r) for r in raw.get("refused", [])],
                     [str(n) for n in raw.get("notes", [])], str(raw["id"]),
                     str(raw["collected_at"]), str(raw.get("base_taken_at", "")))


# ---------------------------------------------------------------------------- collecting


def collect(call: Caller, root: Path, session: str, base: Base, blobs: BlobStore,
            copied: Manifest | None = None) -> Changeset:
    """The changes of the sandbox's copy relative to `base`, checked and with their blobs.
    `copied`: what this container's copy held when the toolbox kept its baseline (entries
    it names as still so are those)."""
    after, refused = _listing(call, base.manifest, copied)
    changeset = Changeset(session, str(root), [], refused, [], base_taken_at=base.taken_at)
    pending = [(p, base.manifest.get(p), after.get(p)) for p in set(base.manifest) | set(after)]
    pending = [(p, b, a) for p, b, a in pending if not (b is not None and (b is a or b.same(a)))]
    pending.sort(key=lambda item: sort_key(item[0]))  # the changes only, not the whole tree
    _fetch(call, [(p, a) for p, _, a in pending if a is not None and a.kind == "file"], blobs,
           changeset)
    _keep_before(root, [(p, b) for p, b, _ in pending if b is not None and b.kind == "file"],
                 blobs)
    failed = {r["path"] for r in changeset.refused}
    lookup = after_state(root, {p: a for p, _, a in pending if p not in failed})
    for path, before, entry in pending:
        if path not in failed:
            changeset.changes.append(_change(root, path, before, entry, blobs, lookup))
    return changeset


def _listing(call: Caller, base: Manifest | None = None, copied: Manifest | None = None
             ) -> tuple[Manifest, list[dict[str, str]]]:
    """The copy's entries as the toolbox lists them, each checked; refusals with reasons. A
    row that says what `base` holds for its path is that entry (most rows, in a big tree).
    With `copied`, the toolbox may name entries unchanged since the copy arrived instead
    (their row is `copied`'s)."""
    result = _manifest(call, copied is not None)
    same = toolmeta.manifest_same(result.meta) or []
    if same and (copied is None or not all(isinstance(p, str) and p in copied for p in same)):
        result, same = _manifest(call, False), []  # unchanged, yet not copied: list it all
    rows = toolmeta.manifest_entries(result.meta)
    if not result.ok or rows is None:
        raise WorkspaceError(f"the sandbox did not list its files: {result.output[:300]}")
    if not toolmeta.manifest_complete(result.meta):
        raise WorkspaceError(f"the copy holds more than the toolbox walks ({MAX_ENTRIES:,} "
                             "entries): its changes cannot be told apart")
    if len(rows) + len(same) > MAX_ENTRIES:
        raise WorkspaceError(f"the copy holds more than {MAX_ENTRIES:,} entries")
    found: Manifest = {}
    refused: list[dict[str, str]] = []
    for row in [*_same_rows(same, copied or {}, base, found), *rows]:
        path, entry, reason = _unchanged(row, base) or _entry(row)
        if reason:
            refused.append({"path": str(path)[:4096], "reason": reason})
        elif entry is not None:
            found[path] = entry
    return found, refused


def _manifest(call: Caller, since_baseline: bool) -> ToolResult:
    args = {"since_baseline": True} if since_baseline else {}
    result = call("manifest", args, timeout=600)
    if toolmeta.toolbox_restarted(result.meta):  # a call cut short (Ctrl-C) left it busy: again
        result = call("manifest", args, timeout=600)
    return result


def _same_rows(same: list[str], copied: Manifest, base: Manifest | None,
               found: Manifest) -> list[list[Any]]:
    """Entries named unchanged since the copy arrived are what was copied there: those that
    are the base's entry go straight into `found` (checked as `_unchanged` checks them);
    the rows of the others (a pending change put back) are returned, to be checked."""
    rows: list[list[Any]] = []
    base = base or {}
    for path in same:
        known = copied[path]
        if base.get(path) is known and known.size <= MAX_FILE and not problem(path):
            found[path] = known
        else:
            rows.append([path, *known.row()])
    return rows


def _unchanged(row: Any, base: Manifest | None) -> tuple[str, Entry, None] | None:
    """(path, base's entry, None) when `row` lists just that entry (checked when the base was
    taken); None when the row must be checked as it is (about 20 µs a row)."""
    if base is None or not isinstance(row, list) or len(row) != 6 or type(row[0]) is not str:
        return None
    known = base.get(row[0])
    if known is None or row[1:] != known.row() or known.size > MAX_FILE or problem(row[0]):
        return None
    return row[0], known, None


def _entry(row: Any) -> tuple[str, Entry | None, str | None]:
    """(path, entry, None) or (path, None, why it is refused) for one hostile row."""
    if not isinstance(row, list) or len(row) != 6:
        return "?", None, "malformed entry"
    path, kind, mode, size, digest, target = row
    reason = problem(path)
    if reason:
        return str(path), None, reason
    if kind == "other":
        return path, None, "not a regular file, directory or link (not applied)"
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        return path, None, "invalid mode"
    mode_clean = normal(kind, mode) if kind in ("file", "dir", "symlink") else mode
    try:
        check(kind, mode_clean, size, digest, target)
    except ValueError as exc:
        return path, None, str(exc)
    if kind == "file" and size > MAX_FILE:
        return path, None, f"larger than {MAX_FILE >> 20} MiB (not brought back)"
    if kind != "file":
        size, digest = 0, None
    return path, Entry(kind, mode_clean, size, digest, target if kind == "symlink" else None), None


def _fetch(call: Caller, files: list[tuple[str, Entry]], blobs: BlobStore,
           changeset: Changeset) -> None:
    """Bring back the content of changed files, each checked against its listed hash."""
    wanted = [(p, e) for p, e in files if e.sha256 and not blobs.has(e.sha256)]
    if sum(e.size for _, e in wanted) > MAX_TOTAL:
        raise WorkspaceError(f"the changed files hold more than {MAX_TOTAL >> 30} GiB")
    parts: dict[str, list[bytes]] = {p: [] for p, _ in wanted}
    for batch in _batches(wanted):
        result = call("read_files", {"files": batch}, timeout=600)
        if not result.ok:
            raise WorkspaceError(f"the sandbox did not send its files: {result.output[:300]}")
        for item in toolmeta.chunks(result.meta):
            _take(item, parts)
    for path, entry in wanted:
        data = b"".join(parts[path])
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            changeset.refused.append({"path": path, "reason": "its content changed or did not "
                                                              "arrive while it was fetched"})
        else:
            blobs.put(data)


def _batches(wanted: list[tuple[str, Entry]]) -> list[list[list[Any]]]:
    batches: list[list[list[Any]]] = [[]]
    room = READ_BATCH
    for path, entry in wanted:
        offset = 0
        while offset < entry.size or (entry.size == 0 and offset == 0):
            take = min(entry.size - offset, READ_BATCH)
            if take > room and batches[-1]:
                batches.append([])
                room = READ_BATCH
            batches[-1].append([path, offset, take])
            room -= take
            offset += take
            if entry.size == 0:
                break
    return [b for b in batches if b]


def _take(item: Chunk, parts: dict[str, list[bytes]]) -> None:
    if not isinstance(item, dict) or item.get("path") not in parts or "data" not in item:
        return
    try:
        parts[item["path"]].append(base64.b64decode(item["data"], validate=True))
    except (binascii.Error, TypeError, ValueError):
        return  # the hash check refuses the file


def _keep_before(root: Path, files: list[tuple[str, Entry]], blobs: BlobStore) -> None:
    """Keep the base content of changed files, read from the host with care, when it is
    still what was copied (a file changed on the host since is a conflict anyway)."""
    for path, entry in files:
        if entry.sha256 is None or blobs.has(entry.sha256) or entry.size > MAX_FILE:
            continue
        data = hostfs.read_file(root, path, MAX_FILE)
        if data is not None and hashlib.sha256(data).hexdigest() == entry.sha256:
            blobs.put(data)


def _change(root: Path, path: str, before: Entry | None, after: Entry | None, blobs: BlobStore,
            lookup: Lookup) -> Change:
    content = _reader(blobs)
    found = flags(path, before, after, content,
                  leaves=lambda link, target: leaves_root(root, link, target, lookup))
    added, removed = line_counts(before, after, content, as_text=bool(found))
    return Change(path, before, after, found, added, removed)


def _reader(blobs: BlobStore) -> Callable[[str], bytes | None]:
    def read(digest: str) -> bytes | None:
        try:
            return blobs.get(digest)
        except WorkspaceError:
            return None
    return read


def line_counts(before: Entry | None, after: Entry | None,
                content: Callable[[str], bytes | None], *, as_text: bool = False
                ) -> tuple[int | None, int | None]:
    """(+lines, -lines) of a text change; (None, None) for binary or unknown content, and
    when neither side is a file. `as_text`: a NUL does not make it binary (text_lines)."""
    if "file" not in (before and before.kind, after and after.kind):
        return None, None
    old = text_lines(before, content, as_text=as_text)
    new = text_lines(after, content, as_text=as_text)
    if old is None or new is None:
        return None, None
    if len(old) + len(new) > DIFF_LINES_MAX:
        return max(0, len(new) - len(old)), max(0, len(old) - len(new))
    added = removed = 0
    for tag, i1, i2, j1, j2 in Matcher(old, new).get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return added, removed


Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]


class Matcher(difflib.SequenceMatcher[str]):
    """difflib's matcher on what lies between the common first and last lines only: a small
    change in a long file (or in one full of equal lines) stays cheap to diff."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        start = 0
        while start < min(len(a), len(b)) and a[start] == b[start]:
            start += 1
        end = 0
        while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
            end += 1
        self.start, self.end = start, end
        super().__init__(None, a[start:len(a) - end], b[start:len(b) - end], autojunk=False)
        self.whole = (a, b)

    def get_opcodes(self) -> list[Opcode]:
        """Opcodes over the whole of both sequences."""
        a, b = self.whole
        start, end = self.start, self.end
        ops: list[Opcode] = [("equal", 0, start, 0, start)] if start else []
        ops += [(tag, i1 + start, i2 + start, j1 + start, j2 + start)
                for tag, i1, i2, j1, j2 in super().get_opcodes()]
        if end:
            ops.append(("equal", len(a) - end, len(a), len(b) - end, len(b)))
        merged: list[Opcode] = []
        for op in ops:
            if merged and op[0] == merged[-1][0] == "equal":
                merged[-1] = ("equal", merged[-1][1], op[2], merged[-1][3], op[4])
            elif op[1] != op[2] or op[3] != op[4]:
                merged.append(op)
        return merged or [("equal", 0, 0, 0, 0)]


def text_lines(entry: Entry | None, content: Callable[[str], bytes | None], *,
               as_text: bool = False) -> list[str] | None:
    """The lines of a text file's content; [] when absent or not a file; None when binary or
    not kept.

    A NUL in the first 8 KiB makes a file binary, unless `as_text`: a flagged file (a
    Makefile, a script, a hook) is always shown as text, because make and the shells run a
    file with a NUL in it all the same; at a terminal its NULs and undecodable bytes are
    shown escaped.
    """
    if entry is None or entry.kind != "file":
        return []
    if entry.sha256 is None:
        return None
    data = content(entry.sha256)
    if data is None or (b"\0" in data[:TEXT_SNIFF] and not as_text):
        return None
    # Only "\n" ends a line: str.splitlines would also split at "\r", "\x0c", U+2028 and more,
    # and a diff that hides where a line really ends could hide what it does.
    parts = data.decode("utf-8", "surrogateescape").split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines
