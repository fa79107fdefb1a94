"""Writing changes into the person's tree, and taking them back, one file at a time.

`execute` is the one place that writes, in two steps. `triage` reads the host's current state
of each path (hostfs: no link followed, a FIFO or device never opened) and finds a change
ready only when that state is exactly its *before* (the base recorded at copy time, or what an
apply wrote); a path already in its *after* state is left alone; anything else is a conflict,
reported and never merged. `carry_out` then keeps the content of every file it is about to
remove or overwrite in the blob store, and writes: removals first (files and links, then
directories deepest first), then new directories (shallowest first), then files and links,
each written atomically.

`apply_changes` runs a changeset's pending changes, except those to what git on the host runs
or reads as config (hooks, included configs: gitrun.py) or would make a repository look-alike
(executor/gitsafety/applycheck.py), which it refuses whatever was approved; `undo` runs
the inverse of the last apply of a session (copy mode) or of a bind session's recorded writes
(undoplan.py reads which from the journal), after asking (`confirm`) and never destroying
the last copy of anything: what it removes or overwrites must be kept first, and a path is put
back from whichever file holds its earlier hash (`mv a b`). Both append to the session's
journal and to the audit log: who approved, which files, hashes before and after. Their writes
and those two records run with ending signals held (executor/signals.py): a SIGTERM or hang-up
half way waits until what was written is on record, so `undo` can take it back.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import secrets
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from executor import signals
from executor.audit import AuditLog
from executor.errors import WorkspaceError
from executor.gitsafety.applycheck import lookalikes
from executor.state import config_home, state_home
from executor.workspace import hostfs
from executor.workspace.changes import Change, Changeset, utc_now
from executor.workspace.gitrun import GitRun, git_run
from executor.workspace.manifest import Entry
from executor.workspace.paths import problem, sort_key
from executor.workspace.render import reader
from executor.workspace.resolve import after_state, host_state, leaves_root, resolve
from executor.workspace.risk import flags
from executor.workspace.store import (
    BlobStore,
    append_line,
    ensure_session_dir,
    read_lines,
    session_dir,
)
from executor.workspace.undoplan import UndoPlan as UndoPlan  # (the names undo's callers use)
from executor.workspace.undoplan import plan_undo as plan_undo
from executor.workspace.undoplan import recorded_paths, same

MAX_KEEP = 256 * 1024 * 1024
"""Bytes of a file's current content kept (for undo) before it is overwritten or removed."""


@dataclass
class Outcome:
    """What `execute` did (or, from `triage`, would do)."""

    done: list[Change] = field(default_factory=list)
    """Changes written, each with the state found before (== its before) and after."""
    already: list[str] = field(default_factory=list)
    """Paths that were already in their after state."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) left alone."""
    missing: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) left alone for want of content: what the change would write is not kept
    anywhere, or (`must_keep`) what it would remove or overwrite could not be kept first."""
    cannot: list[tuple[str, str]] = field(default_factory=list)
    """(undo) (path, why it cannot be restored): the plan's, then `missing`."""
    bits: dict[str, int] = field(default_factory=dict)
    """The permission bits each file replaced or removed had (an undo that puts it back uses
    them)."""
    ready: list[Change] = field(default_factory=list)
    """(`triage`) Changes found in their before state, to be made."""
    current: dict[str, Entry | None] = field(default_factory=dict)
    """(`triage`) The host's state of each ready path when it was looked at."""

    @property
    def touched(self) -> list[str]:
        """Paths now in their after state (written or found so)."""
        return [c.path for c in self.done] + self.already


# ---------------------------------------------------------------------------- the writer


def execute(root: Path, changes: Iterable[Change], blobs: BlobStore,
            refuse: dict[str, str] | None = None, *, must_keep: bool = False) -> Outcome:
    """Apply `changes` to the tree at `root` where it still is in their before state;
    `refuse`: paths never written, each with the reason reported; `must_keep`: a file is
    removed or overwritten only once its content is in `blobs`."""
    return carry_out(root, triage(root, changes, blobs, refuse), blobs, must_keep=must_keep)


def triage(root: Path, changes: Iterable[Change], blobs: BlobStore,
           refuse: dict[str, str] | None = None, held: Iterable[str] = ()) -> Outcome:
    """What `execute` would do, against the tree as it is now; nothing is written or kept.
    A file's content counts as there when `blobs` has it, when a ready change finds it on the
    host (it is kept before anything is written), or when it is in `held`."""
    outcome = Outcome()
    for change in sorted(changes, key=lambda c: sort_key(c.path)):
        verdict, current = _check(root, change)
        if refuse and change.path in refuse and verdict != "already":
            verdict = refuse[change.path]
        if verdict == "ready":
            outcome.ready.append(change)
            outcome.current[change.path] = current
        elif verdict == "already":
            outcome.already.append(change.path)
        else:
            outcome.conflicts.append((change.path, verdict))
    for never in (_gitdir_lookalikes, _reserved):
        for change, why in never(root, outcome.ready):
            _drop(outcome, change, outcome.conflicts, why)
    there = set(held) | {e.sha256 for e in outcome.current.values()
                         if e is not None and e.kind == "file" and e.sha256}
    _drop_missing(outcome, lambda digest: digest in there or blobs.has(digest))
    return outcome


def carry_out(root: Path, outcome: Outcome, blobs: BlobStore, *, must_keep: bool = False
              ) -> Outcome:
    """Make the ready changes of a `triage`: first keep (in `blobs`) every file they remove
    or overwrite, then write, phase by phase."""
    for change in list(outcome.ready):
        why = _keep_current(root, change.path, outcome.current.get(change.path), blobs)
        if why == CHANGED:
            _drop(outcome, change, outcome.conflicts, why)
        elif why and must_keep:
            _drop(outcome, change, outcome.missing,
                  f"left as it is: its current content could not be kept first ({why})")
    _drop_missing(outcome, blobs.has)
    failed = {path for path, _ in outcome.conflicts + outcome.missing}
    for action, phase in _phases(outcome.ready):
        for change in phase:
            if _blocked(change, failed):
                continue
            try:
                _act(root, action, change, blobs, outcome)
            except (OSError, WorkspaceError) as exc:
                failed.add(change.path)
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                outcome.conflicts.append((change.path, f"could not be written: {why}"))
    outcome.done = [c for c in outcome.ready if c.path not in failed]
    return outcome


def _drop(outcome: Outcome, change: Change, into: list[tuple[str, str]], why: str) -> None:
    outcome.ready.remove(change)
    outcome.current.pop(change.path, None)
    into.append((change.path, why))


def _drop_missing(outcome: Outcome, there: Callable[[str], bool]) -> None:
    """Move the ready changes that would write a file whose content is not `there`."""
    for change in list(outcome.ready):
        after = change.after
        if after is not None and after.kind == "file" and not there(after.sha256 or ""):
            _drop(outcome, change, outcome.missing,
                  f"the content it needs (sha256 {str(after.sha256)[:12]}) is not kept anywhere "
                  "(nothing to write)")


def _gitdir_lookalikes(root: Path, ready: list[Change]) -> list[tuple[Change, str]]:
    """The changes that would leave a directory git takes for a repository, writing what git
    on the host would run there (gitsafety: `lookalikes`): refused as conflicts."""
    by_path = {change.path: change for change in ready}
    refused = lookalikes(by_path, lambda path: _kind_after(root, path, ready))
    return [(by_path[path], why) for path, why in refused.items()]


@dataclass(frozen=True)
class _Reserved:
    """Where one of our own directories lies in the tree, now or once the changes are in."""

    what: str
    place: Path
    inside: set[str]
    """Where it is (relative to the root; '' is the root itself)."""
    steps: set[str]
    """The paths the way to it goes through."""

    def why(self, change: Change) -> str | None:
        """Why `change` may not be made, or None."""
        path = change.path
        if any(not p or path == p or path.startswith(p + "/") for p in self.inside):
            return f"inside {self.what} {self.place}: never applied (it steers your later runs)"
        if path in self.steps and "symlink" in (_kind(change.before), _kind(change.after)):
            return f"a link on the way to {self.what} {self.place}: never applied"
        return None


def reserved_places(root: Path, planned: dict[str, Entry | None]) -> list[_Reserved]:
    """The person's sandbox-agent config dir and state dir, where they lie in the tree at
    `root` now or once `planned` (path -> state after) is in: followed through links (in the
    tree, in the changes and outside), so a look-alike path that leads there counts too."""
    found = []
    for what, place in (("your sandbox-agent config dir", config_home()),
                        ("the sandbox-agent state dir", state_home())):
        inside, steps = set(), set()
        for lookup in (host_state(root), after_state(root, planned)):
            walk = resolve(root, [], str(place), lookup)
            steps.update(walk.steps)
            where = walk.inside(root)
            if where is not None:
                inside.add(where)
        if inside or steps:
            found.append(_Reserved(what, place, inside, steps))
    return found


def _reserved(root: Path, ready: list[Change]) -> list[tuple[Change, str]]:
    """The changes that would write into the person's config or state dir (or redirect the
    way to one): refused, in copy mode as in an undo. A `policy.toml` planted there would be
    the person's own policy for every project."""
    places = reserved_places(root, {c.path: c.after for c in ready})
    refused = []
    for change in ready:
        why = next((w for p in places if (w := p.why(change))), None)
        if why:
            refused.append((change, why))
    return refused


def _kind(entry: Entry | None) -> str | None:
    return None if entry is None else entry.kind


def _kind_after(root: Path, path: str, ready: list[Change]) -> str | None:
    """What `path` would be once `ready` is applied: 'dir', 'file', 'symlink', 'other' or
    None (absent); unreadable on the host counts as present (refuse rather than guess)."""
    for change in ready:
        if change.path == path:
            return change.after.kind if change.after is not None else None
    if any(c.path.startswith(path + "/") and c.after is not None for c in ready):
        return "dir"
    try:
        current = hostfs.state(root, path)
    except OSError:
        return "other"
    return current.kind if current is not None else None


def _check(root: Path, change: Change) -> tuple[str, Entry | None]:
    """('ready', the host's state), ('already', …), or (why the change cannot be made, …)."""
    reason = problem(change.path)
    if reason:
        return reason, None
    try:
        current = hostfs.state(root, change.path)
    except OSError as exc:
        return f"cannot be read safely ({exc.strerror or exc})", None
    if same(change.after, current):
        return "already", current
    if not same(change.before, current):
        return _what_changed(change.before, current), current
    return "ready", current


def _what_changed(before: Entry | None, current: Entry | None) -> str:
    if before is None:
        return "conflict: created on the host since the copy"
    if current is None:
        return "conflict: deleted on the host since the copy"
    return "conflict: changed on the host since the copy"


CHANGED = "conflict: changed on the host while it was being written"


def _keep_current(root: Path, path: str, current: Entry | None, blobs: BlobStore
                  ) -> str | None:
    """Keep what is about to be overwritten or removed, so an undo can put it back; why it
    could not be kept, or None (kept, or nothing to keep: a link's target, a directory)."""
    if current is None or current.kind != "file" or current.sha256 is None:
        return None
    if blobs.has(current.sha256):
        return None
    if current.size > MAX_KEEP:
        return f"{current.size} bytes, more than the {MAX_KEEP // (1024 * 1024)} MiB kept"
    data = hostfs.read_file(root, path, MAX_KEEP)
    if data is None:
        return "it cannot be read safely"
    if hashlib.sha256(data).hexdigest() != current.sha256:
        return CHANGED
    try:
        blobs.put(data)
    except WorkspaceError as exc:
        return str(exc)
    return None


def _phases(ready: list[Change]) -> list[tuple[str, list[Change]]]:
    """Removals (files and links, then directories deepest first), new directories, writes.

    A file replaced by a link (or the reverse) is one atomic rename in the write phase.
    """
    kind = _kind
    remove = [c for c in ready if kind(c.before) in ("file", "symlink")
              and kind(c.after) in (None, "dir")]
    rmdir = [c for c in ready if kind(c.before) == "dir" and kind(c.after) != "dir"]
    mkdir = [c for c in ready if kind(c.after) == "dir" and kind(c.before) != "dir"]
    write = [c for c in ready if kind(c.after) in ("file", "symlink")]
    rmdir.sort(key=lambda c: sort_key(c.path), reverse=True)
    return [("remove", remove), ("rmdir", rmdir), ("mkdir", mkdir), ("write", write)]


def _blocked(change: Change, failed: set[str]) -> bool:
    """A change at or below a path that failed (its directory may not be there)."""
    return change.path in failed or any(change.path.startswith(p + "/") for p in failed)


def _act(root: Path, action: str, change: Change, blobs: BlobStore, outcome: Outcome) -> None:
    after = change.after
    bits = hostfs.file_bits(root, change.path) if _kind(change.before) == "file" else None
    if bits is not None:  # what an undo gives the file it puts back
        outcome.bits[change.path] = bits
    if action == "remove":
        hostfs.remove(root, change.path, "file")
    elif action == "rmdir":
        hostfs.remove(root, change.path, "dir")
    elif action == "mkdir":
        hostfs.make_dir(root, change.path)
    elif after is not None and after.kind == "symlink":
        hostfs.write_link(root, change.path, after.target or "")
    elif after is not None:
        hostfs.write_file(root, change.path, blobs.get(after.sha256 or ""), after.mode,
                          bits=change.bits)


# ---------------------------------------------------------------------------- reviewing


def for_review(root: Path, changes: list[Change], content: Callable[[str], bytes | None]
               ) -> list[Change]:
    """`changes` as a person should see them before they are applied, against the tree as it
    is now: flags worked out again (a link judged by where it leads once the changes are in,
    following the links on the way; a path into our own config or state dir marked as never
    applied), and each file's current permission bits (a mode change shown as it will be)."""
    planned = {c.path: c.after for c in changes}
    lookup = after_state(root, planned)
    places = reserved_places(root, planned)

    def leaves(path: str, target: str) -> bool:
        return leaves_root(root, path, target, lookup)

    shown = []
    for change in changes:
        found = flags(change.path, change.before, change.after, content, leaves=leaves)
        found += [why for place in places if (why := place.why(change))]
        shown.append(replace(change, flags=list(dict.fromkeys(found + change.flags)),
                             host_bits=hostfs.file_bits(root, change.path)))
    return shown


# ---------------------------------------------------------------------------- applying


def applied_paths(root: Path, changeset: Changeset) -> dict[str, str]:
    """Paths of `changeset` an apply wrote (and no undo took back) -> the apply's id."""
    applied: dict[str, str] = {}
    for record in read_lines(session_dir(root, changeset.session) / "journal.ndjson"):
        if record.get("type") == "apply" and record.get("changeset") == changeset.id:
            for path in recorded_paths(record.get("files")):
                applied[path] = str(record.get("id"))
            for path in record.get("already") or []:
                applied[str(path)] = str(record.get("id"))
        elif record.get("type") == "undo":
            for path in recorded_paths(record.get("files")):
                applied.pop(path, None)
    return applied


def pending(root: Path, changeset: Changeset) -> list[Change]:
    """The changes of `changeset` no apply has written yet."""
    done = applied_paths(root, changeset)
    return [c for c in changeset.changes if c.path not in done]


def apply_changes(root: Path, changeset: Changeset, *, approved_by: str,
                  audit: AuditLog | None = None, git: GitRun | None = None) -> Outcome:
    """Write the pending changes of `changeset` into the tree; journal and audit it. What git
    on the host runs or reads as config (`git`, else worked out now) is never written."""
    blobs = BlobStore.for_root(root)
    todo = pending(root, changeset)
    refuse = (git or git_run(root)).refusals(todo, reader(blobs))
    with signals.held():  # a signal waits until every write is journaled and audited
        outcome = execute(root, todo, blobs, refuse)
        outcome.conflicts += outcome.missing
        outcome.missing = []
        record = {"type": "apply", "id": secrets.token_hex(8), "ts": utc_now(),
                  "session": changeset.session, "changeset": changeset.id,
                  "approved_by": approved_by, "user": _user(), "host": socket.gethostname(),
                  "files": [_file_record(c, outcome) for c in outcome.done],
                  "already": outcome.already,
                  "conflicts": [{"path": p, "reason": r} for p, r in outcome.conflicts]}
        _journal(root, changeset.session, record)
        if audit is not None:
            audit.record("apply", **_audit_fields(record, outcome))
    return outcome


def _journal(root: Path, session: str, record: dict[str, Any]) -> None:
    append_line(ensure_session_dir(root, session) / "journal.ndjson", record)


def _file_record(change: Change, outcome: Outcome) -> dict[str, Any]:
    record = {"path": change.path, "before": change.before.row() if change.before else None,
              "after": change.after.row() if change.after else None}
    if change.path in outcome.bits:
        record["bits_before"] = f"{outcome.bits[change.path]:04o}"
    return record


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _audit_fields(record: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """Who approved, which files, hashes before and after (for the hash-chained log)."""
    fields: dict[str, Any] = {k: record[k] for k in ("approved_by", "user", "host") if k in record}
    fields.update(changeset=record.get("changeset"), journal_id=record["id"],
                  undoes=record.get("undoes"), already=outcome.already,
                  conflicts=record["conflicts"],
                  files=[_audit_file(c) for c in outcome.done])
    return {k: v for k, v in fields.items() if v is not None}


def _audit_file(change: Change) -> dict[str, Any]:
    before, after = change.before, change.after
    return {"path": change.path, "change": change.status,
            "kind_before": before.kind if before else None,
            "kind_after": after.kind if after else None,
            "sha256_before": before.sha256 if before else None,
            "sha256_after": after.sha256 if after else None,
            "mode_before": f"{before.mode:04o}" if before and before.kind == "file" else None,
            "mode_after": f"{after.mode:04o}" if after and after.kind == "file" else None,
            "target_after": after.target if after else None}


# ---------------------------------------------------------------------------- undoing


Confirm = Callable[[Outcome], bool]
"""Shown what an undo would do (`done` empty, `ready` what it would write, `conflicts` and
`cannot` what it would leave): True to go ahead."""


@overload
def undo(root: Path, plan: UndoPlan, *, audit: AuditLog | None = None,
         confirm: None = None) -> Outcome: ...


@overload
def undo(root: Path, plan: UndoPlan, *, audit: AuditLog | None = None,
         confirm: Confirm) -> Outcome | None: ...


def undo(root: Path, plan: UndoPlan, *, audit: AuditLog | None = None,
         confirm: Confirm | None = None) -> Outcome | None:
    """Take back what `plan` names where the tree still holds what was written. Nothing is
    removed or overwritten before its content is in the blob store (what cannot be kept is
    left as it is), so any path whose earlier content another path holds (`plan.sources`)
    can be put back from it. `confirm`, when given and there is anything to write, is asked
    first, before anything is kept or written: on False, nothing is done and None returned."""
    blobs = BlobStore.for_root(root)
    held = _held(root, plan.sources, blobs)
    outcome = triage(root, plan.changes, blobs, held=held)
    outcome.conflicts = [(p, r.replace("since the copy", "since it was written"))
                         for p, r in outcome.conflicts]
    preview = replace(outcome, conflicts=outcome.conflicts + plan.conflicts,
                      cannot=plan.cannot + outcome.missing)
    if confirm is not None and outcome.ready and not confirm(preview):
        return None
    for path, entry in held.values():
        _keep_current(root, path, entry, blobs)
    with signals.held():  # as in apply_changes: no write of an undo goes unrecorded
        carry_out(root, outcome, blobs, must_keep=True)
        outcome.conflicts += plan.conflicts
        outcome.cannot = plan.cannot + outcome.missing
        _record_undo(root, plan, outcome, audit)
    return outcome


def _held(root: Path, sources: dict[str, list[str]], blobs: BlobStore
          ) -> dict[str, tuple[str, Entry]]:
    """sha256 -> (a path holding that content on the host now, its state), for each content
    `sources` names that the blob store lacks (and that can be kept)."""
    held = {}
    for digest, paths in sources.items():
        for path in paths if not blobs.has(digest) else []:
            try:
                entry = hostfs.state(root, path)
            except OSError:
                continue  # a link on the way, a FIFO: never read
            if entry is not None and entry.sha256 == digest and entry.size <= MAX_KEEP:
                held[digest] = (path, entry)
                break
    return held


def _record_undo(root: Path, plan: UndoPlan, outcome: Outcome, audit: AuditLog | None
                 ) -> None:
    record = {"type": "undo", "id": secrets.token_hex(8), "ts": utc_now(),
              "session": plan.session, "undoes": plan.undoes, "user": _user(),
              "host": socket.gethostname(),
              "files": [_file_record(c, outcome) for c in outcome.done]
              + [{"path": p} for p in outcome.already],
              "conflicts": [{"path": p, "reason": r} for p, r in outcome.conflicts],
              "cannot": [{"path": p, "reason": r} for p, r in outcome.cannot]}
    _journal(root, plan.session, record)
    if audit is not None:
        audit.record("undo", **_audit_fields(record, outcome), cannot=record["cannot"])


SHOW_MAX = 16 * 1024 * 1024
"""Bytes of a file on the host read to show what an undo would do."""


def undo_content(root: Path, plan: UndoPlan, preview: Outcome) -> Callable[[str], bytes | None]:
    """Contents by sha256 for showing what an undo would do: the blob store's, else those of
    the files on the host that hold them now (read without following links, checked against
    the hash); None: not shown."""
    where = {digest: list(paths) for digest, paths in plan.sources.items()}
    for path, entry in preview.current.items():
        if entry is not None and entry.kind == "file" and entry.sha256:
            where.setdefault(entry.sha256, []).append(path)
    kept = reader(BlobStore.for_root(root))

    def read(digest: str) -> bytes | None:
        data = kept(digest)
        for path in where.get(digest, []) if data is None else []:
            found = hostfs.read_file(root, path, SHOW_MAX)
            if found is not None and hashlib.sha256(found).hexdigest() == digest:
                return found
        return data
    return read
