"""What each reply's "meta" holds: the records, declared once, for the type checker.

The host reads them through executor/toolmeta.py, the one host module that names their keys.
The records written by more than one tool are in wire.py (ChangeRecord, WriteRecord,
PreviewFacts, SetidRecord, Chunk). The control signals (remount_needed, processes_unstopped,
protected_restored, git_quarantined) are the reply's `signals`, apart. Nothing here exists at
run time: the toolbox does not import typing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:
    from typing import TypedDict

    from .wire import ChangeRecord, Chunk, ManifestEntry, SetidRecord, WriteRecord

    class CommandMeta(TypedDict, total=False):
        """run_shell_command's meta (tools/shell.py, guards/checks.py)."""

        exit_code: int | None  # None: killed (timeout, overflow, disk budget)
        timed_out: bool
        signal: str | None
        stdout_bytes: int
        stderr_bytes: int
        truncated: bool
        output_limit_exceeded: bool
        killed_processes: int
        forks_refused: int
        oom_kills: int
        changes: list[ChangeRecord]
        changes_total: int
        changes_truncated: bool
        changes_incomplete: bool
        outside_changes: list[ChangeRecord]
        outside_changes_total: int
        outside_changes_truncated: bool
        setid_cleared: list[SetidRecord]
        fifos_removed: list[str]
        disk_growth: int
        disk_budget_exceeded: bool

    class EditMeta(WriteRecord, total=False):
        """edit_file's meta: a write's, plus what it left or showed."""

        still_there: dict[str, list[int]]  # a replaced name still in the file -> its lines
        file_shown: bool  # a failed edit showed the file as it is now

    class SearchMeta(TypedDict):
        """search_files' meta."""

        matches: int
        truncated: bool
        engine: str

    class ManifestMeta(TypedDict):
        """The manifest host operation's meta."""

        entries: list[ManifestEntry]
        skipped: list[list[str]]
        complete: bool

    class ManifestSince(ManifestMeta, total=False):
        """The manifest's meta when asked `since_baseline` and a baseline was kept."""

        same: list[str]

    class ReadFilesMeta(TypedDict):
        """The read_files host operation's meta."""

        files: list[Chunk]

    class SnapshotMeta(TypedDict, total=False):
        """The snapshot host operation's meta: the file a write would change, as it is now."""

        resolved: str
        exists: bool
        kind: str
        mode: int
        size: int
        sha256: str | None
        data: str  # base64, when not over max_bytes

    class HostMeta(TypedDict, total=False):
        """What the host adds to any reply's meta."""

        duration_ms: float  # the call's time, when the toolbox did not say
        toolbox_restarted: bool  # the toolbox was restarted before it answered
        path: str  # a write's real path, after a restart (FileWriteTool._after_restart)
        before_unknown: bool  # ... and whether the file's hash before it is unknown
