"""The two workspace modes as sandboxes wrapped around the backend's (the Runner picks one).

`CopyWorkspace` keeps the base of the copy in the state dir before the first tool call runs
(so a killed controller can still tell what changed), and at the end collects the changes
(changes.py). `JournaledSandbox` (bind mode) keeps what write_file and edit_file are about to
overwrite — read through the toolbox, never by opening project paths on the host — and
records every write and every file a shell command changed, so `undo` can take a session
back as far as what was kept allows.

Both satisfy the `Sandbox` protocol and pass everything else through.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from executor import toolmeta
from executor.errors import WorkspaceError
from executor.messages import ToolResult
from executor.protocols import OutputCallback, Sandbox, SandboxInfo
from executor.workspace.changes import (
    Base,
    Changeset,
    collect,
    load_base,
    save_base,
    save_changes,
    utc_now,
)
from executor.workspace.manifest import Entry, Manifest, check, normal
from executor.workspace.store import BlobStore, append_line, ensure_session_dir

if TYPE_CHECKING:
    from executor.toolmeta import ChangeRecord, SnapshotMeta

BASELINE_TIMEOUT = 120.0
"""Seconds the toolbox may take to keep a copy's baseline (a stat-only walk)."""
SNAPSHOT_MAX = 16 * 1024 * 1024
"""Bytes of a file's content kept before a write_file or edit_file overwrites it (its hash is
kept whatever its size; bigger content cannot be restored by `undo`)."""


class CopyBackend(Sandbox, Protocol):
    """A sandbox that can load a copy of the root and say what it copied."""

    def copy_manifest(self) -> Manifest | None:
        """What this start copied in (waiting for it); None: an existing copy was re-attached."""
        ...

    @property
    def copy_notes(self) -> list[str]:
        """What the copy left out, and why."""
        ...


class _Delegate:
    """Passes the `Sandbox` protocol through to `inner`."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start the backend."""
        self.inner.start()

    def stop(self) -> None:
        """Stop the backend."""
        self.inner.stop()

    def is_alive(self) -> bool:
        """Whether the backend is up."""
        return self.inner.is_alive()

    @property
    def info(self) -> SandboxInfo:
        """The backend's identity."""
        return self.inner.info

    @property
    def reattached(self) -> bool:
        """Whether the backend re-attached an existing container."""
        return bool(getattr(self.inner, "reattached", False))

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """What a write would change, from the backend."""
        return self.inner.preview(tool, args)

    def detach(self) -> None:
        """Leave the backend's container for a later --resume (when it can)."""
        detach = getattr(self.inner, "detach", None)
        if callable(detach):
            detach()
        else:
            self.inner.stop()


class CopyWorkspace(_Delegate):
    """A copy session: the base is kept before any tool runs; changes are collected at the end."""

    def __init__(self, inner: CopyBackend, *, root: Path, session: str,
                 put_back: set[str] | None = None) -> None:
        super().__init__(inner)
        self.backend = inner
        self.root, self.session = root, session
        self.put_back = set(put_back or ())
        """Paths of pending changes put back into a new copy (their base is the old one)."""
        self.base: Base | None = None
        self.copied: Manifest | None = None
        """What this container's copy held when the toolbox kept its baseline (None: none
        was kept, as in a re-attached container: every file is hashed at the end)."""

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run a tool on the copy (once the copy and its base are in place)."""
        self.ensure_base()
        return self.inner.call(tool, args, timeout=timeout, on_output=on_output)

    def ensure_base(self) -> Base:
        """The base of this session's copy, kept in the state dir."""
        if self.base is not None:
            return self.base
        directory = ensure_session_dir(self.root, self.session)
        old = load_base(directory)
        taken, first = utc_now(), None
        with ThreadPoolExecutor(1, thread_name_prefix="save-base") as pool:
            early = self._sent()
            if early is not None:  # all of it read: the base is written while it arrives
                first = self._base(early, old, taken)
                saving = pool.submit(save_base, directory, first)
            copied = self.backend.copy_manifest()
            if first is not None:
                saving.result()
        if copied is None:
            if old is None:
                raise WorkspaceError(f"session {self.session} has a copy but no record of "
                                     "what it was made from", fix="start a new session")
            self.base = old
            return old
        base = self._base(copied, old, taken)
        if base != first:  # none written yet, or the .git part added a note
            save_base(directory, base)
        self.base = base
        kept = self.inner.call("baseline", {}, timeout=BASELINE_TIMEOUT)
        if kept.ok and toolmeta.baseline_kept(kept.meta):
            self.copied = copied
        return self.base

    def _sent(self) -> Manifest | None:
        sent = getattr(self.backend, "copy_sent", None)
        return sent() if callable(sent) else None

    def _base(self, copied: Manifest, old: Base | None, taken: str) -> Base:
        return Base(_merged(copied, old, self.put_back), taken, list(self.backend.copy_notes))

    def current(self) -> Changeset:
        """The copy's changes so far, not kept (the REPL's /diff while the session goes on)."""
        base = self.ensure_base()
        changeset = collect(self.inner.call, self.root, self.session, base,
                            BlobStore.for_root(self.root), self.copied)
        changeset.notes = base.notes + changeset.notes
        return changeset

    def finish(self) -> Changeset:
        """Collect and keep the copy's changes (the container must still run)."""
        changeset = self.current()
        save_changes(ensure_session_dir(self.root, self.session), changeset)
        return changeset


def _merged(copied: Manifest, old: Base | None, put_back: set[str]) -> Manifest:
    """What was copied, except that a pending change put back keeps its original before."""
    merged = dict(copied)
    for path in put_back:
        before = old.manifest.get(path) if old is not None else None
        if before is None:
            merged.pop(path, None)
        else:
            merged[path] = before
    return merged


class JournaledSandbox(_Delegate):
    """A bind session whose writes are journaled, with before-content where it can be kept."""

    WRITES = frozenset({"write_file", "edit_file"})

    def __init__(self, inner: Sandbox, *, root: Path, session: str) -> None:
        super().__init__(inner)
        self.root, self.session = root, session
        self._journal: Path | None = None
        self._blobs = BlobStore.for_root(root)

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run a tool; journal what it wrote."""
        before = None
        if tool in self.WRITES and isinstance(args.get("path"), str):
            before = self._snapshot(args["path"])
        result = self.inner.call(tool, args, timeout=timeout, on_output=on_output)
        if result.ok:
            for record in self._records(tool, before, result):
                append_line(self._journal_path(), record)
        return result

    def _journal_path(self) -> Path:
        if self._journal is None:
            self._journal = ensure_session_dir(self.root, self.session) / "journal.ndjson"
        return self._journal

    def _snapshot(self, path: str) -> SnapshotMeta | None:
        """What a write of `path` would overwrite, as the toolbox sees it (content kept)."""
        result = self.inner.call("snapshot", {"path": path, "max_bytes": SNAPSHOT_MAX})
        if not result.ok:
            return None  # the write will fail the same way
        facts, data = toolmeta.snapshot(result.meta), toolmeta.snapshot_data(result.meta)
        if data is not None and facts.get("sha256"):
            try:
                content = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                content = None
            if content is not None and hashlib.sha256(content).hexdigest() == facts["sha256"]:
                self._blobs.put(content)
        return facts

    def _records(self, tool: str, before: SnapshotMeta | None, result: ToolResult
                 ) -> list[dict[str, Any]]:
        if tool in self.WRITES and before is not None:
            return [_tool_write(tool, before, result.meta)]
        return [_command_write(tool, c) for c in toolmeta.changes(result.meta)
                if isinstance(c["path"], str)]


def _tool_write(tool: str, before: SnapshotMeta, meta: Mapping[str, Any]) -> dict[str, Any]:
    existed = bool(before.get("exists"))
    old = None
    unknown = False
    if existed:
        old = _row("file", before.get("mode"), before.get("size"), before.get("sha256"), None)
        unknown = old is None or before.get("kind") != "file"
    mode = before.get("mode") if existed else 0o644
    new = _row("file", mode, toolmeta.written_bytes(meta), toolmeta.sha256_after(meta), None)
    return {"type": "write", "ts": utc_now(), "source": "tool", "tool": tool,
            "path": before.get("resolved"), "before": old, "after": new,
            "bits_before": _bits(mode) if existed else None,
            "unknown_before": unknown or None, "unknown_after": new is None or None}


def _command_write(tool: str, change: ChangeRecord) -> dict[str, Any]:
    kind, what = change.get("kind"), change.get("change")
    old = None if what == "created" else _row(kind, _octal(change.get("mode_before")),
                                              change.get("size_before"),
                                              change.get("sha256_before"),
                                              change.get("target") if what == "deleted" else None)
    new = None if what == "deleted" else _row(kind, _octal(change.get("mode_after")),
                                              change.get("size_after"),
                                              change.get("sha256_after"), change.get("target"))
    unknown_before = what != "created" and (old is None or what == "type" or (
        kind == "symlink" and what == "modified"))
    return {"type": "write", "ts": utc_now(), "source": "command", "tool": tool,
            "path": change["path"], "before": old, "after": new,
            "bits_before": _bits(_octal(change.get("mode_before"))) if old else None,
            "unknown_before": unknown_before or None,
            "unknown_after": (what != "deleted" and new is None) or None}


def _bits(mode: Any) -> str | None:
    """A file's permission bits as the journal keeps them ('0600'): an undo that puts the
    file back gives it these (never wider than its normal mode)."""
    return f"{mode & 0o777:04o}" if isinstance(mode, int) else None


def _octal(text: Any) -> int | None:
    try:
        return int(str(text), 8)
    except ValueError:
        return None


def _row(kind: Any, mode: Any, size: Any, digest: Any, target: Any) -> list[Any] | None:
    """An entry row when the fields make a valid one (else None: not restorable)."""
    if kind not in ("file", "dir", "symlink") or not isinstance(mode, int):
        return None
    try:
        entry = Entry(kind, normal(kind, mode), size if isinstance(size, int) and kind == "file"
                      else 0, digest if kind == "file" else None,
                      target if kind == "symlink" else None)
        check(entry.kind, entry.mode, entry.size, entry.sha256, entry.target)
    except ValueError:
        return None
    return entry.row()
