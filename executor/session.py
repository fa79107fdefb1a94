"""Sessions: one NDJSON file a conversation, `<project state dir>/sessions/<name>.ndjson`.

The project state dir is per user and outside the project tree (executor/state.py), so neither
the repository nor the sandbox can read, plant or edit a session. Values read back are still
validated: a header field that does not have its expected shape is dropped with a warning.

Format version 1, one JSON object a line (plain text: less, grep and jq read it):

    {"type": "header", "version": 1, "id": ..., "name": ..., "model": ..., "provider": ...,
     "root": ..., "image": ..., "image_digest": ..., "mount_mode": ..., "container": ...,
     "started_at": "2026-11-29T23:05:01.123Z"}
    {"type": "message", "ts": "...Z", "role": "user", "content": "..."}
    {"type": "message", "ts": "...Z", "role": "assistant", "tool_calls": [{"id", "name",
     "arguments"}]}
    {"type": "message", "ts": "...Z", "role": "tool", "content": "...", "tool_call_id", "name"}
    {"type": "event", "ts": "...Z", "event": "header_update", "data": {"container": ...}}
    {"type": "summary", "ts": "...Z", "tally": {"turns": ..., "status": ..., ...}}

Message lines carry the `Message` fields (defaults left out). Events record what is not a
message: `header_update` changes the effective header (the first line is never rewritten),
`torn_line_dropped` notes a repair; others (e.g. `resumed`) are free-form. A `summary` record
(after each `run_end`, and every 256 KiB) holds what a listing shows, so listing reads the
header and the tail only (executor/session_index.py). Readers skip record types they do not
know, so later versions can add some.

Crash safety: each record is one `write` of a whole line, fsynced as executor/durable.py says
(by default on a background thread right after the write), so a killed process loses at most
the line it was writing. On load a torn (unparseable) last line is skipped
with a `TornLineWarning`; any other bad line raises `SessionCorruptError` with its line number.
The next append cuts the torn fragment off (noting it in a `torn_line_dropped` event) so the file
stays valid. One writer per session is assumed; appends take an exclusive `flock` regardless.
"""

from __future__ import annotations

import builtins
import copy
import json
import os
import re
import secrets
import stat
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor.durable import fsync_dir, write_all
from executor.errors import ConfigError, SessionCorruptError, SessionError, SessionNotFoundError
from executor.messages import Message
from executor.protocols import SessionSummary
from executor.session_file import Appender, line_of, utc_now
from executor.session_index import CHECKPOINT_BYTES, Tally, summary_row
from executor.session_index import COMPACTED_NOTE as COMPACTED_NOTE
from executor.session_index import CONTEXT_CLEARED as CONTEXT_CLEARED
from executor.session_index import CONTEXT_COMPACTED as CONTEXT_COMPACTED
from executor.session_index import FORMAT_VERSION as FORMAT_VERSION
from executor.state import SESSION_SUFFIX as SUFFIX
from executor.state import (
    ensure_project_dir,
    open_private,
    private_dir,
    read_private,
    real_root,
    regular_files,
    sessions_dir,
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_FIXED_HEADER_FIELDS = frozenset({"type", "version", "id", "name", "started_at"})
SANDBOX_ID = re.compile(r"[0-9a-f]{12}")
"""Shape of a sandbox id (the container is named sandbox-agent-<id>)."""
_CHECKED_FIELDS = {
    "sandbox_id": SANDBOX_ID,
    "container": re.compile(r"sandbox-agent-[0-9a-f]{12}"),
    "image_digest": re.compile(r"sha256:[0-9a-f]{64}"),
    "mount_mode": re.compile(r"ro|rw"),
    "workspace": re.compile(r"bind|copy"),
}
"""Header values the controller acts on, and the only shapes it accepts for them."""


class SessionWarning(UserWarning):
    """Something in a session file was skipped or ignored (the CLI prints it as one line)."""


class TornLineWarning(SessionWarning):
    """A session file's last line was cut off (the writer was killed) and is skipped."""


def generate_name() -> str:
    """A fresh session name: UTC time and a random suffix, e.g. `20261129-230501-ab12`."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class SessionHeader(BaseModel):
    """The first line of a session file."""

    model_config = ConfigDict(extra="allow")

    type: Literal["header"] = "header"
    version: int = FORMAT_VERSION
    """Format version of the file."""
    id: str = Field(default_factory=lambda: secrets.token_hex(16))
    """Unique id (names can be reused after `rm`)."""
    name: str
    """File name without `.ndjson`."""
    model: str = ""
    provider: str = ""
    root: str = ""
    """Absolute project root the session ran on."""
    image: str = ""
    """Sandbox image reference."""
    image_digest: str = ""
    """Image id/digest, so a resumed session can start the very same image."""
    mount_mode: str = ""
    """'ro' or 'rw'."""
    container: str = ""
    """Container name, re-attached on resume while it exists."""
    sandbox_id: str = ""
    """12 hex digits naming this session's container (`sandbox-agent-<id>`)."""
    workspace: str = ""
    """'bind' or 'copy' (docs/WORKSPACES.md); a resumed session keeps it."""
    started_at: str = Field(default_factory=utc_now)


@dataclass(frozen=True)
class Entry:
    """One message or event line read back, with its timestamp and line number."""

    line: int
    ts: str
    message: Message | None = None
    event: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionContents:
    """A whole session file read back."""

    header: SessionHeader
    """Effective header: the first line with every `header_update` applied."""
    entries: list[Entry]
    warnings: list[str]

    @property
    def messages(self) -> list[Message]:
        """The conversation, in order, from its last /clear or /compact on (a compacted part
        is its summary, one system message)."""
        start, head = 0, list[Message]()
        for number, entry in enumerate(self.entries):
            if entry.event == CONTEXT_CLEARED:
                start, head = number + 1, []
            elif entry.event == CONTEXT_COMPACTED:
                start = number + 1
                head = [Message.system(COMPACTED_NOTE + str(entry.data.get("summary", "")))]
        return head + [e.message for e in self.entries[start:] if e.message is not None]


# --- directories ---------------------------------------------------------------------------------


def _session_path(root: Path, name: str) -> Path:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid session name {name!r}",
            fix="use letters, digits, '.', '_' and '-' (up to 100, not starting with '.')",
        )
    return sessions_dir(root) / f"{name}{SUFFIX}"


def session_names(root: Path) -> list[str]:
    """Names of the sessions of `root`, sorted."""
    return sorted(p.name[: -len(SUFFIX)] for p in regular_files(sessions_dir(root), SUFFIX))


def _not_found(root: Path, name: str) -> SessionNotFoundError:
    names = session_names(root)
    fix = ("known sessions: " + ", ".join(names[-20:])) if names else "no sessions yet"
    return SessionNotFoundError(f"no session named {name!r} in {root}", fix=fix)


# --- writing -------------------------------------------------------------------------------------


def _message_record(message: Message) -> dict[str, Any]:
    body = message.model_dump(mode="json", exclude_defaults=True)
    return {"type": "message", "ts": utc_now(), **body}


def _event_record(event: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event", "ts": utc_now(), "event": event, "data": data}


def _create_file(path: Path, header: SessionHeader) -> None:
    """Write the header of a new session file; refuse an existing one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError as exc:
        raise ConfigError(
            f"session {header.name!r} already exists",
            fix="resume it with --resume, or choose another --session name",
        ) from exc
    try:
        write_all(fd, line_of(header.model_dump(mode="json")))
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


# --- reading -------------------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    try:
        return read_private(path)
    except FileNotFoundError as exc:
        raise SessionNotFoundError(f"session file {path} does not exist") from exc
    except OSError as exc:
        raise SessionError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _corrupt(path: Path, number: int, reason: str) -> SessionCorruptError:
    return SessionCorruptError(
        f"{path}: line {number}: {reason}",
        fix=f"repair or delete line {number} (e.g. sed -i '{number}d' {path})",
    )


def _parse_lines(path: Path, data: bytes, notes: list[str]) -> list[tuple[int, Any]]:
    """(line number, object) for each non-blank line; a torn last line becomes a note."""
    lines = data.split(b"\n")  # only \n ends a record: U+2028 may sit raw inside strings
    last = max((n for n, raw in enumerate(lines, 1) if raw.strip()), default=0)
    records = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append((number, json.loads(raw)))
        except ValueError as exc:
            if number != last:
                raise _corrupt(path, number, f"not valid JSON ({exc})") from exc
            notes.append(f"{path}: line {number} was cut off (the writer was killed); skipped it")
    return records


def _header(path: Path, records: list[tuple[int, Any]]) -> SessionHeader:
    if not records or records[0][0] != 1 or not _is(records[0][1], "header"):
        raise SessionCorruptError(
            f"{path} has no session header on line 1 (cut off while being created?)",
            fix=f"delete it: rm {path}",
        )
    try:
        header = SessionHeader.model_validate(records[0][1])
    except ValidationError as exc:
        raise _corrupt(path, 1, f"invalid header ({exc.errors()[0]['msg']})") from exc
    if header.version > FORMAT_VERSION:
        raise SessionError(
            f"{path} has format version {header.version}; this version reads {FORMAT_VERSION}",
            fix="upgrade sandbox-agent",
        )
    return header


def _is(record: Any, kind: str) -> bool:
    return isinstance(record, dict) and record.get("type") == kind


def _entry(path: Path, number: int, record: Any) -> Entry | None:
    """The entry of one record; None for a type this version does not know."""
    if not isinstance(record, dict):
        raise _corrupt(path, number, "not a JSON object")
    kind, ts = record.get("type"), str(record.get("ts", ""))
    try:
        if kind == "message":
            return Entry(number, ts, message=Message.model_validate(record))
        if kind == "event":
            data = record.get("data")
            return Entry(number, ts, event=str(record["event"]), data=dict(data or {}))
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        raise _corrupt(path, number, f"invalid {kind} record ({exc})") from exc
    if kind == "header":
        raise _corrupt(path, number, "a second header")
    return None


def _apply_updates(header: SessionHeader, entries: list[Entry]) -> SessionHeader:
    for entry in entries:
        if entry.event == "header_update":
            changes = {k: v for k, v in entry.data.items() if k not in _FIXED_HEADER_FIELDS}
            header = header.model_copy(update=changes)
    return header


def _checked(path: Path, header: SessionHeader, notes: list[str]) -> SessionHeader:
    """The header with every value the controller acts on in its expected shape, or dropped."""
    dropped = {}
    for name, shape in _CHECKED_FIELDS.items():
        value = getattr(header, name)
        if value and not (isinstance(value, str) and shape.fullmatch(value)):
            dropped[name] = ""
            notes.append(f"{path}: ignored header field {name} (not a valid value)")
    return header.model_copy(update=dropped) if dropped else header


def read_session(path: Path) -> SessionContents:
    """Read a session file; a torn last line is skipped with a `TornLineWarning`."""
    return _read_session(path)[0]


def _read_session(path: Path) -> tuple[SessionContents, Tally]:
    """The contents, and the tally a listing would show of them (what a writer goes on from)."""
    notes: list[str] = []
    records = _parse_lines(path, _read_bytes(path), notes)
    header = _header(path, records)
    entries = [e for n, r in records[1:] if (e := _entry(path, n, r)) is not None]
    header = _checked(path, _apply_updates(header, entries), notes)
    for note in notes:
        kind = TornLineWarning if "was cut off" in note else SessionWarning
        warnings.warn(note, kind, stacklevel=3)
    tally = Tally()
    for _, record in records:
        tally.apply(record)
    return SessionContents(header, entries, notes), tally


def _read_header(path: Path) -> SessionHeader:
    """The first line only (cheap): to check a session before using it."""
    try:
        with os.fdopen(open_private(path, os.O_RDONLY), "rb") as stream:
            first = stream.readline(1 << 20)
    except OSError as exc:
        raise SessionError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        records = [(1, json.loads(first))]
    except ValueError:
        records = []
    return _header(path, records)


# --- listing -------------------------------------------------------------------------------------


def run_status(entries: list[Entry]) -> str:
    """How the last request of a session ended (its `run_end` event), or `unfinished`.

    Files written before `run_end` was recorded count as ok when they end on an answer.
    """
    if not any(e.event == "run_end" for e in entries):
        messages = [e.message for e in entries if e.message is not None]
        last = messages[-1] if messages else None
        done = last is not None and last.role == "assistant" and not last.tool_calls
        return "ok" if done else ("unfinished" if messages else "empty")
    status = "empty"
    for entry in entries:
        if entry.message is not None and entry.message.role == "user":
            status = "running"  # until its run_end (the agent's notes to the model count too)
        elif entry.event == "run_end":
            status = str(entry.data.get("status") or "?")
    return "unfinished" if status == "running" else status


def abandoned_calls(contents: SessionContents) -> list[dict[str, str]] | None:
    """When the session's last run died without recording its end: the tool calls it left
    without a result (maybe none); None when it ended as runs do."""
    if run_status(contents.entries) != "unfinished":
        return None
    messages = contents.messages
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    return [{"tool": call.name, "call_id": call.id} for m in messages if m.role == "assistant"
            for call in m.tool_calls if call.id not in answered]


def summarize_session(path: Path) -> SessionSummary:
    """One listing row for a session file (its header and the tail after its last summary
    record: executor/session_index.py); an unreadable file is listed with the reason."""
    return SessionSummary(**summary_row(path))


def child_sessions(root: Path, parent: str) -> list[str]:
    """The sessions of `root` whose header names `parent` as their parent (delegation)."""
    rows = (summarize_session(p) for p in sorted(regular_files(sessions_dir(root), SUFFIX)))
    return [row.name for row in rows if row.parent_session == parent]


def list_sessions(root: Path) -> list[SessionSummary]:
    """Every session of `root`, newest first (by start time)."""
    rows = [summarize_session(p) for p in sorted(regular_files(sessions_dir(root), SUFFIX))]
    return sorted(rows, key=lambda row: (row.started_at, row.name), reverse=True)


def remove_session(root: Path, name: str) -> Path:
    """Delete the session `name` of `root`; the path it had."""
    path = _session_path(root, name)
    try:
        path.unlink()
    except FileNotFoundError:
        raise _not_found(root, name) from None
    except OSError as exc:
        raise SessionError(f"cannot remove {path}: {exc.strerror}") from exc
    return path


# --- the store -----------------------------------------------------------------------------------


class NdjsonSessionStore:
    """One session's NDJSON file (satisfies `SessionStore`); `list` covers its whole root."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = real_root(root)
        """Project root the session belongs to."""
        self.name = name
        """Session name."""
        self.path = _session_path(self.root, name)
        """The session file."""
        self.warnings: builtins.list[str] = []
        """What the last `load`/`read` skipped (torn last line), for the CLI to show."""
        self._header: SessionHeader | None = None
        self._appender = Appender(self.path)
        self._tally: Tally | None = None
        """What a listing shows, as of our last append (None until created or read)."""
        self._unsummarized = 0
        """Bytes appended since the last summary record."""
        self._lock = threading.Lock()  # the tally follows the order of the appends

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        name: str | None = None,
        model: str = "",
        provider: str = "",
        image: str = "",
        image_digest: str = "",
        mount_mode: str = "",
        container: str = "",
    ) -> Self:
        """Start a new session (a generated name when none is given); refuse an existing name."""
        root = real_root(root)
        private_dir(ensure_project_dir(root) / "sessions")
        for _ in range(5):  # generated names collide only within one second
            store = cls(root, generate_name() if name is None else name)
            header = SessionHeader(
                name=store.name,
                model=model,
                provider=provider,
                root=str(root),
                image=image,
                image_digest=image_digest,
                mount_mode=mount_mode,
                container=container,
                sandbox_id=secrets.token_hex(6),
            )
            try:
                _create_file(store.path, header)
            except ConfigError:
                if name is not None:
                    raise
                continue
            store._header = header
            store._tally = tally = Tally()
            tally.apply(header.model_dump(mode="json"))
            return store
        raise SessionError("could not pick a free session name", fix="pass --session NAME")

    @classmethod
    def open(cls, root: Path, name: str) -> Self:
        """An existing session; `SessionNotFoundError` (listing the known names) otherwise."""
        store = cls(real_root(root), name)
        if not _is_regular(store.path):
            raise _not_found(store.root, name)
        _read_header(store.path)  # fail now on a file cut off at creation; updates come later
        return store

    @classmethod
    def latest(cls, root: Path) -> Self:
        """The session of `root` written to most recently (what `--resume` continues); never
        a delegated child's (it was the parent's to run), unless named with --session."""
        root = real_root(root)
        by_age = sorted(
            (p.lstat().st_mtime_ns, p.name[: -len(SUFFIX)])
            for p in regular_files(sessions_dir(root), SUFFIX)
        )
        for _, name in reversed(by_age):
            try:
                store = cls.open(root, name)
                child = getattr(store.header, "parent_session", None)
            except SessionError:
                continue  # cut off at creation: fall back to an older one
            if not child:
                return store
        raise SessionNotFoundError(
            f"no sessions to resume in {root}", fix="start one with: sandbox-agent ask"
        )

    @property
    def header(self) -> SessionHeader:
        """The effective header (first line plus later `header_update` events)."""
        if self._header is None:
            self.read()
        assert self._header is not None
        return self._header

    def read(self) -> SessionContents:
        """The whole file: effective header, messages and events."""
        contents, tally = _read_session(self.path)
        with self._lock:
            self._tally, self._unsummarized = tally, 0
        if contents.header.root and contents.header.root != str(self.root):
            contents.warnings.append(f"{self.path}: recorded root {contents.header.root!r} is "
                                     f"not {self.root}; using {self.root}")
            contents = SessionContents(contents.header.model_copy(update={"root": str(self.root)}),
                                       contents.entries, contents.warnings)
        self.warnings = contents.warnings
        self._header = contents.header
        return contents

    def load(self) -> builtins.list[Message]:
        """All messages, in order; a torn last line is skipped with a warning."""
        return self.read().messages

    def append(self, message: Message) -> None:
        """Write one message durably (fsync) before returning."""
        self._write([_message_record(message)])

    def extend(self, messages: Iterable[Message]) -> None:
        """Write several messages with one write and one fsync (imports, tests)."""
        self._write([_message_record(m) for m in messages])

    def record_event(self, event: str, **data: Any) -> None:
        """Append an event line (e.g. `resumed`); load skips it, `show` prints it. A
        `run_end` is followed by a summary record, in the same write, for listings."""
        self._write([_event_record(event, data)], summarize=event == "run_end")

    def _write(self, records: builtins.list[dict[str, Any]], summarize: bool = False) -> None:
        """Append `records` (one write), and a summary record when one is due."""
        with self._lock:
            data = b"".join(line_of(record) for record in records)
            tally = copy.copy(self._tally)
            if tally is not None:  # None: opened and appended to without being read
                for record in records:
                    tally.apply(record)
            unsummarized = self._unsummarized + len(data)
            if tally is not None and (summarize or unsummarized >= CHECKPOINT_BYTES):
                data, unsummarized = data + tally.line(utc_now()), 0
            self._appender.append(data)
            self._tally, self._unsummarized = tally, unsummarized

    def close(self) -> None:
        """Close the session file if it is held open (a later append opens it again)."""
        self._appender.close()

    def update_header(self, **changes: str) -> SessionHeader:
        """Change header fields (container, image_digest, ...) by appending a `header_update`."""
        fixed = _FIXED_HEADER_FIELDS & changes.keys()
        if fixed:
            raise ConfigError(f"header fields {sorted(fixed)} cannot change")
        self.record_event("header_update", **changes)
        self._header = self.header.model_copy(update=changes)
        return self._header

    def remove(self) -> None:
        """Delete this session's file."""
        self.close()
        remove_session(self.root, self.name)

    def list(self) -> builtins.list[SessionSummary]:
        """Sessions of this store's root, newest first."""
        return list_sessions(self.root)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
