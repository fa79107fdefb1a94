"""A tool reply's `meta`, read in one place: the toolbox's records as typed values.

The records are declared once, on the toolbox's side (executor/toolbox/records.py and
wire.py); this is the only host module that names their keys, so mypy checks every consumer
(audit, coach, run report, telemetry, the terminal, workspaces). A meta comes from the toolbox,
which a command the model ran may have fooled, or from an event or log record: each accessor
checks the shape it hands on, and entries it passes through (changes, chunks) are the toolbox's
own, to be read as such. The control signals (remount, unstoppable, ...) are not here: the
reply's `signals` are parsed where the sandbox reacts to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict, cast

if TYPE_CHECKING:  # the records, named for the host's modules too (they import them from here)
    from executor.toolbox.records import (
        CommandMeta,
        EditMeta,
        HostMeta,
        ManifestMeta,
        ManifestSince,
    )
    from executor.toolbox.records import SearchMeta as SearchMeta
    from executor.toolbox.records import SnapshotMeta as SnapshotMeta
    from executor.toolbox.wire import ChangeRecord as ChangeRecord
    from executor.toolbox.wire import Chunk as Chunk
    from executor.toolbox.wire import ManifestEntry as ManifestEntry
    from executor.toolbox.wire import PreviewFacts as PreviewFacts

Meta = Mapping[str, Any]
"""A reply's meta as it arrived (ToolResult.meta, or an event's "meta")."""

def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# -- any reply ------------------------------------------------------------------------------


def duration_ms(meta: Meta) -> float | None:
    """How long the call took, in ms (None when not said, or not a number)."""
    return _number(meta.get("duration_ms"))


def interrupted(meta: Meta) -> bool:
    """Whether the run ended (Ctrl-C, a signal) before the call finished: it has no result."""
    return bool(meta.get("interrupted"))


def toolbox_restarted(meta: Meta) -> bool:
    """Whether the toolbox was restarted before it answered (the call may have run)."""
    return bool(meta.get("toolbox_restarted"))


# -- run_shell_command ------------------------------------------------------------------------


def ran_command(meta: Meta) -> bool:
    """Whether this is a command's reply (it has an exit code, None when it was killed)."""
    return "exit_code" in meta


def exit_code(meta: Meta) -> int | None:
    """The command's exit code (None: killed, not a command, or not an integer)."""
    return _int(cast("CommandMeta", meta).get("exit_code"))


def timed_out(meta: Meta) -> bool | None:
    """Whether the command timed out (None when the reply does not say)."""
    value = cast("CommandMeta", meta).get("timed_out")
    return value if isinstance(value, bool) else None


def changes(meta: Meta) -> list[ChangeRecord]:
    """The files the command changed: the entries that are objects with a path."""
    return _entries(meta.get("changes"))


def outside_changes(meta: Meta) -> list[ChangeRecord]:
    """Files changed outside tool calls since the previous command (same shape)."""
    return _entries(meta.get("outside_changes"))


def any_changes(meta: Meta) -> bool:
    """Whether the reply says that files changed (listed or not)."""
    return bool(meta.get("changes"))


def changes_complete(meta: Meta) -> bool:
    """Whether `changes` lists every file the command changed, each with its path."""
    listed = meta.get("changes")
    return (isinstance(listed, list) and len(_entries(listed)) == len(listed)
            and not meta.get("changes_incomplete"))


def setid_cleared(meta: Meta) -> bool:
    """Whether the toolbox removed set-id bits a command had set."""
    return bool(meta.get("setid_cleared"))


def _entries(value: object) -> list[ChangeRecord]:
    if not isinstance(value, list):
        return []
    return [cast("ChangeRecord", entry) for entry in value
            if isinstance(entry, Mapping) and entry.get("path")]


# -- write_file, edit_file --------------------------------------------------------------------


def sha256_after(meta: Meta) -> str | None:
    """The hash of what a write left (None: it wrote nothing, or it is not a write)."""
    return _str(meta.get("sha256_after")) or None


def created(meta: Meta) -> bool:
    """Whether the write made a new file."""
    return bool(meta.get("created"))


def written_path(meta: Meta) -> str | None:
    """The real path a write reached, when the host learned it after a restart."""
    return _str(cast("HostMeta", meta).get("path")) or None


def written_bytes(meta: Meta) -> int | None:
    """How many bytes the write left in the file."""
    return _int(meta.get("bytes"))


def file_shown(meta: Meta) -> bool:
    """Whether a failed edit showed the file as it is now."""
    return bool(cast("EditMeta", meta).get("file_shown"))


def still_there(meta: Meta) -> dict[str, list[int]]:
    """Names an edit replaced that are still in the file, with their lines."""
    left = cast("EditMeta", meta).get("still_there")
    return left if isinstance(left, dict) else {}


def after_restart(meta: Meta, *, path: str, before: str | None, after: str,
                  before_unknown: bool) -> dict[str, Any]:
    """A write's meta when the toolbox was restarted but the file holds what it was to write:
    the hashes it keeps, so the audit still records the write."""
    host: HostMeta = {"path": path, "before_unknown": before_unknown}
    return {**meta, "path": host["path"], "sha256_before": before, "sha256_after": after,
            "before_unknown": host["before_unknown"]}


# -- preview ----------------------------------------------------------------------------------


def preview_facts(meta: Meta) -> PreviewFacts:
    """What a preview found (wrong types read as not known)."""
    return {"path": _str(meta.get("path")) or "", "resolved": _str(meta.get("resolved")),
            "symlink": bool(meta.get("symlink")), "exists": bool(meta.get("exists")),
            "binary": bool(meta.get("binary")), "sha256_before": _str(meta.get("sha256_before")),
            "sha256_after": _str(meta.get("sha256_after")),
            "error": None if not meta.get("error") else str(meta["error"])}


# -- search_files -----------------------------------------------------------------------------


def matches(meta: Meta) -> int | None:
    """How many lines a search matched."""
    return _int(cast("SearchMeta", meta).get("matches"))


# -- host operations --------------------------------------------------------------------------


def manifest_entries(meta: Meta) -> list[ManifestEntry] | None:
    """The rows of a manifest (None: it sent none), each to be checked by the reader."""
    rows = cast("ManifestMeta", meta).get("entries")
    return rows if isinstance(rows, list) else None


def manifest_same(meta: Meta) -> list[Any] | None:
    """The paths a manifest named as still as the baseline left them (None: it named none),
    each to be checked by the reader."""
    same = cast("ManifestSince", meta).get("same")
    return same if isinstance(same, list) else None


def baseline_kept(meta: Meta) -> bool:
    """Whether the toolbox kept a baseline of the copy (the `baseline` host operation)."""
    return meta.get("kept") is True


def manifest_complete(meta: Meta) -> bool:
    """Whether the manifest's walk listed everything."""
    return cast("ManifestMeta", meta).get("complete") is True


def chunks(meta: Meta) -> list[Chunk]:
    """The pieces read_files sent, each to be checked by the reader."""
    found = meta.get("files")
    return found if isinstance(found, list) else []


def snapshot(meta: Meta) -> SnapshotMeta:
    """A snapshot's facts without its content."""
    return cast("SnapshotMeta", {k: v for k, v in meta.items() if k != "data"})


def snapshot_data(meta: Meta) -> str | None:
    """A snapshot's content (base64), when it was small enough to send."""
    return _str(cast("SnapshotMeta", meta).get("data"))


# -- the audit log ----------------------------------------------------------------------------

CHANGE_LISTS = ("changes", "outside_changes")
"""The lists of changed files: the audit gives each entry a `write` record of its own."""
CHANGE_DETAILS = ("change", "size_before", "mode_before", "mode_after", "target", "unhashed")
"""The fields of a change entry its `write` audit record carries when they are set."""


class ResultFields(TypedDict, total=False):
    """The fields a `tool_result` audit record carries at its top level, as the toolbox sent
    them (a log's bytes do not depend on how the host reads them)."""

    exit_code: Any
    timed_out: Any
    duration_ms: Any
    bytes: Any
    sha256_before: Any
    sha256_after: Any
    lines_changed: Any


RESULT_FIELDS = tuple(ResultFields.__annotations__)


def for_audit(meta: Meta) -> tuple[ResultFields, dict[str, Any]]:
    """A reply's meta split as the audit records it: the top-level fields, and the rest less
    the change lists (`changes` and `outside_changes` read those)."""
    rest = {k: v for k, v in meta.items() if k not in CHANGE_LISTS}
    lifted = {k: rest.pop(k) for k in RESULT_FIELDS if k in rest}
    return cast("ResultFields", lifted), rest


def change_details(change: ChangeRecord) -> dict[str, Any]:
    """The fields of a change entry that its `write` audit record carries (`kind` as
    `file_kind`: "kind" names the record itself)."""
    entry = cast("Mapping[str, Any]", change)
    extra = {k: entry.get(k) for k in CHANGE_DETAILS if entry.get(k) is not None}
    if change.get("kind") is not None:
        extra["file_kind"] = change["kind"]
    return extra
