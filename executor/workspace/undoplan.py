"""What an undo would take back, read from a session's journal and the blob store alone.

`plan_undo` finds the last apply of a session still in place (copy mode), else the writes a
bind session recorded, and turns it into the inverse changes: each path from what was
written back to what was there. What cannot be restored is said with why: content that was
never kept and that no path holds now, a path the records cannot follow (a shell command's
change not fully recorded), or one changed outside the session between two of its writes
(going back would undo that change too). The tree is not read here; `apply.undo` checks it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.workspace.changes import Change
from executor.workspace.manifest import Entry, from_row
from executor.workspace.paths import problem
from executor.workspace.store import BlobStore, read_lines, session_dir


@dataclass
class UndoPlan:
    """What an undo would take back, and what it cannot."""

    session: str
    undoes: str
    """The apply id, or 'session' for a bind session's recorded writes."""
    changes: list[Change]
    cannot: list[tuple[str, str]]
    """(path, why it cannot be restored)."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) left alone because it changed outside the session while it ran."""
    sources: dict[str, list[str]] = field(default_factory=dict)
    """sha256 -> the paths whose last recorded state holds that content, for each content a
    change needs that the blob store lacks (`mv a b`: b holds what a had)."""


def plan_undo(root: Path, session: str) -> UndoPlan | None:
    """The inverse of the session's last apply still in place, else of its bind-mode writes;
    None when there is nothing to undo. Reads the journal and the blob store, not the tree."""
    records = read_lines(session_dir(root, session) / "journal.ndjson")
    blobs = BlobStore.for_root(root)
    undone = {str(r.get("undoes")): set(recorded_paths(r.get("files"))) for r in records
              if r.get("type") == "undo"}
    for record in reversed([r for r in records if r.get("type") == "apply"]):
        files = [f for f in record.get("files") or [] if isinstance(f, dict)
                 and f.get("path") not in undone.get(str(record.get("id")), set())]
        if files:
            return UndoPlan(session, str(record.get("id")), *_inverse(files, blobs))
    writes = _bind_writes(records)
    if writes:
        return UndoPlan(session, "session", *_inverse_writes(writes, blobs))
    return None


def _bind_writes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recorded writes no undo has taken back yet (a path written again after an undo counts
    again)."""
    active: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("type") == "write":
            active.setdefault(str(record.get("path")), []).append(record)
        elif record.get("type") == "undo" and record.get("undoes") == "session":
            for path in recorded_paths(record.get("files")):
                active.pop(path, None)
    return [r for rs in active.values() for r in rs]


Inverse = tuple[list[Change], list[tuple[str, str]], list[tuple[str, str]],
                dict[str, list[str]]]
"""(changes, what cannot be restored, conflicts, sources) of an `UndoPlan`."""


def _inverse(files: list[dict[str, Any]], blobs: BlobStore) -> Inverse:
    """An apply's files taken back: each from what the apply wrote to what was there."""
    changes, cannot = [], []
    for item in files:
        try:
            before = from_row(item["before"]) if item.get("before") else None
            after = from_row(item["after"]) if item.get("after") else None
        except (KeyError, TypeError, ValueError) as exc:
            cannot.append((str(item.get("path")), f"unreadable journal record ({exc})"))
            continue
        changes.append(Change(str(item["path"]), after, before, bits=_bits(item)))
    offered = _offered((c.path, c.before) for c in changes)
    for change in list(changes):
        digest = _lacking(change.after, blobs, offered)
        if digest:
            changes.remove(change)
            cannot.append((change.path, f"its earlier content (sha256 {digest[:12]}) was not "
                                        "kept, so it cannot be restored"))
    return changes, cannot, [], _sources(changes, offered, blobs)


def _offered(entries: Iterable[tuple[str, Entry | None]]) -> dict[str, list[str]]:
    """sha256 -> the paths that (by the records) hold a file with that content now."""
    offered: dict[str, list[str]] = {}
    for path, entry in entries:
        if entry is not None and entry.kind == "file" and entry.sha256:
            offered.setdefault(entry.sha256, []).append(path)
    return offered


def _lacking(entry: Entry | None, blobs: BlobStore, offered: dict[str, list[str]]
             ) -> str | None:
    """The sha256 of `entry` when it is a file whose content is neither kept nor held by a
    path of the plan (so nothing can bring it back)."""
    if entry is None or entry.kind != "file" or not entry.sha256:
        return None
    digest = entry.sha256
    return None if blobs.has(digest) or digest in offered else digest


def _sources(changes: list[Change], offered: dict[str, list[str]], blobs: BlobStore
             ) -> dict[str, list[str]]:
    """For each content `changes` write that the blob store lacks: the paths holding it."""
    needed = {c.after.sha256 for c in changes
              if c.after is not None and c.after.kind == "file" and c.after.sha256}
    return {digest: offered[digest] for digest in sorted(needed)
            if digest in offered and not blobs.has(digest)}


def _bits(record: dict[str, Any], key: str = "bits_before", *, most: int = 0o777) -> int | None:
    """The permission bits a journal record names (no more than `most`); None without."""
    try:
        return int(str(record[key]), 8) & most
    except (KeyError, ValueError):
        return None


def _inverse_writes(writes: list[dict[str, Any]], blobs: BlobStore) -> Inverse:
    """Per path: from the last recorded after back to the first recorded before, when the
    records form a chain (each write found the path as the write before it had left it)."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for record in writes:
        by_path.setdefault(str(record.get("path")), []).append(record)
    unreadable = {path: why for path, records in by_path.items()
                  if (why := _unreadable(path, records))}
    offered = _offered((path, _row_entry(records[-1].get("after")))
                       for path, records in by_path.items() if path not in unreadable)
    changes, cannot, conflicts = [], [], []
    for path, records in by_path.items():
        reason = unreadable.get(path)
        gap = None if reason else _gap(records)
        reason = reason or (None if gap else _unrestorable(records, blobs, offered))
        if gap:
            conflicts.append((path, gap))
        elif reason:
            cannot.append((path, reason))
        else:
            first, last = records[0], records[-1]
            changes.append(Change(path, _row_entry(last.get("after")),
                                  _row_entry(first.get("before")),
                                  bits=_bits(first, most=0o755)))  # as the sandbox saw them
    return changes, cannot, conflicts, _sources(changes, offered, blobs)


def _row_entry(row: Any) -> Entry | None:
    return from_row(row) if row else None


def _unreadable(path: str, records: list[dict[str, Any]]) -> str | None:
    """Why one path's records cannot be followed at all."""
    if problem(path):
        return str(problem(path))
    if any(r.get("unknown_before") or r.get("unknown_after") for r in records):
        return "changed by a shell command in a way that was not fully recorded"
    try:
        for record in records:
            _row_entry(record.get("before"))
            _row_entry(record.get("after"))
    except (TypeError, ValueError) as exc:
        return f"unreadable journal record ({exc})"
    return None


def _gap(records: list[dict[str, Any]]) -> str | None:
    """Why one path's records do not form a chain: something outside the session (you, at
    your editor while the model was thinking) changed it between two of the session's
    writes. Going back to the first state would silently undo that change too."""
    for earlier, later in itertools.pairwise(records):
        if not same(_row_entry(earlier.get("after")), _row_entry(later.get("before"))):
            return ("conflict: changed outside the session between two of its writes (before "
                    f"the write at {later.get('ts')}); left as it is, so that change is kept")
    return None


def _unrestorable(records: list[dict[str, Any]], blobs: BlobStore,
                  offered: dict[str, list[str]]) -> str | None:
    """Why one path cannot go back to its first recorded state: its content is neither kept
    nor (by the records) held by another path now."""
    first = records[0]
    before, after = _row_entry(first.get("before")), _row_entry(records[-1].get("after"))
    digest = _lacking(before, blobs, offered)
    if digest:
        source = "a shell command" if first.get("source") == "command" else "a tool"
        return (f"changed by {source}; its earlier content (sha256 {digest[:12]}) was not "
                "kept, so it cannot be restored")
    if after is None and before is None:
        return "nothing to restore"
    return None


def same(expected: Entry | None, current: Entry | None) -> bool:
    """Whether `current` is the state `expected` (None: absent)."""
    return current is None if expected is None else expected.same(current)


def recorded_paths(files: Any) -> list[str]:
    """The paths of a journal record's `files` (whatever else it holds)."""
    if not isinstance(files, list):
        return []
    return [str(f["path"]) for f in files if isinstance(f, dict) and "path" in f]
