"""Listing session files cheaply: the header line, and the tail after the last `summary` record.

A listing row (turns, status, last message) depends on the whole conversation, and a session
can hold megabytes of tool output the model and the sandbox chose. So the writer keeps a
`Tally` of what it appends and writes it as a `summary` record at the end of each run (and
after every CHECKPOINT_BYTES appended), in the same write as the record before it:

    {"type": "summary", "ts": "...Z", "tally": {"turns": 3, "status": "ok", ...}}

To list a file we read its first line (at most HEAD_CAP bytes) and its end backwards until a
summary record, then fold only the records after it. Readers skip record types they do not
know (executor/session.py), so the format version stays 1. A file with no summary in its last
TAIL_CAP bytes (written before summaries, or still running) is folded whole only when it is at
most FULL_CAP bytes; a bigger one is listed as unreadable with that reason: never a whole
hostile file parsed just to list it. Files are opened as every state file is (no link, a
regular file we own: executor/state.py).

Only the standard library is imported here: `sandbox-agent sessions` lists without pydantic.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from executor.state import SESSION_SUFFIX, open_private, regular_files, sessions_dir

FORMAT_VERSION = 1
"""Version written in every header; files from a newer version are refused."""
PREVIEW_CHARS = 72
"""Length of the last-message preview in listings."""
COMPACTED_NOTE = "Summary of the session so far (the earlier messages were compacted): "
CONTEXT_CLEARED = "context_cleared"
"""Event of the REPL's /clear: the conversation before it is not sent again (nor resumed)."""
CONTEXT_COMPACTED = "context_compacted"
"""Event of the REPL's /compact: the conversation before it is its `summary`."""
HEAD_CAP = 1 << 20
"""The most bytes read for a header line."""
TAIL_CAP = 4 << 20
"""The most bytes read backwards from the end looking for a summary record."""
FULL_CAP = 16 << 20
"""The largest file without a summary near its end that is still folded whole."""
CHECKPOINT_BYTES = 256 << 10
"""The writer adds a summary record once this much was appended since the last one."""
SUMMARY_PREFIX = b'{"type": "summary", '
"""How a summary line starts (json.dumps' separators): a raw newline only ends a record."""
_CHUNK = 64 << 10
_WORD = re.compile(r"\S+")
_SUMMARY_FIELDS = ("name", "started_at", "turns", "status", "model", "provider",
                   "last_message", "path", "parent_session")
"""The fields of a listing row, in `SessionSummary`'s order (executor/protocols.py)."""


class Unreadable(Exception):
    """A session file that cannot be listed; the reason is the message."""


def preview(content: Any, tool_calls: Any) -> str:
    """A message as one short line: its words, or its tool calls when it has no text."""
    text = content if isinstance(content, str) else ""
    if _WORD.search(text) is None and tool_calls:
        text = _calls_text(tool_calls)
    words, length = [], -1
    for match in _WORD.finditer(text):  # stop once the preview is full: outputs can be huge
        words.append(match.group())
        length += len(words[-1]) + 1
        if length > PREVIEW_CHARS:
            break
    line = " ".join(words)
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def _calls_text(calls: list[Any]) -> str:
    """`→ name({"arguments": ...}), ...`, or as much of its start as a preview shows: the
    writer previews every message it appends, and a write_file's arguments can be long."""
    pieces, size = ["→ "], 0
    encoder = json.JSONEncoder()  # json.dumps' own settings, a piece at a time
    for number, call in enumerate(calls):
        parts = [", " * (number > 0), f"{call.get('name')}(",
                 *encoder.iterencode(call.get("arguments", {})), ")"]
        for part in parts:
            pieces.append(part)
            size += len(part)
            if size > 2 * PREVIEW_CHARS and len(" ".join("".join(pieces).split())) > PREVIEW_CHARS:
                return "".join(pieces)  # the preview is a prefix of this one's
    return "".join(pieces)


@dataclass
class Tally:
    """What a listing shows of a session, folded record by record (header fields included).

    `turns` and `last` count from the last /clear or /compact; `status` follows the runs:
    `running` from a user message to its `run_end`. Files without any `run_end` (older
    versions) are ok when they end on an answer.
    """

    turns: int = 0
    last: str = ""
    ended: bool = False
    status: str = "empty"
    messages: bool = False
    done: bool = False
    model: str = ""
    provider: str = ""
    parent_session: str = ""

    def apply(self, record: dict[str, Any]) -> None:
        """Fold one record (message, event or header) in; other types are skipped."""
        kind = record.get("type")
        if kind == "message":
            self._message(record)
        elif kind == "event":
            self._event(str(record["event"]), dict(record.get("data") or {}))
        elif kind == "header":
            self._header_fields(record)
        elif kind == "summary":
            self.__dict__.update(Tally.of(record).__dict__)

    def _message(self, record: dict[str, Any]) -> None:
        role, calls = record.get("role"), record.get("tool_calls") or []
        self.messages = True
        self.done = role == "assistant" and not calls
        self.turns += role == "assistant"
        self.last = preview(record.get("content", ""), calls)
        if role == "user":
            self.status = "running"

    def _event(self, event: str, data: dict[str, Any]) -> None:
        if event == "run_end":
            self.ended, self.status = True, str(data.get("status") or "?")
        elif event == CONTEXT_CLEARED:
            self.turns, self.last = 0, ""
        elif event == CONTEXT_COMPACTED:
            self.turns, self.last = 0, preview(COMPACTED_NOTE + str(data.get("summary", "")), [])
        elif event == "header_update":
            self._header_fields(data)

    def _header_fields(self, values: dict[str, Any]) -> None:
        for name in ("model", "provider", "parent_session"):
            if isinstance(values.get(name), str):
                setattr(self, name, values[name])

    @property
    def run_status(self) -> str:
        """How the last request ended: its `run_end` status, `unfinished` or `empty`."""
        if not self.ended:
            return "ok" if self.done else ("unfinished" if self.messages else "empty")
        return "unfinished" if self.status == "running" else self.status

    def line(self, ts: str) -> bytes:
        """This tally as a summary record's line."""
        return (json.dumps({"type": "summary", "ts": ts, "tally": asdict(self)},
                           ensure_ascii=False) + "\n").encode()

    @classmethod
    def of(cls, record: dict[str, Any]) -> Tally:
        """The tally a summary record holds (a field of the wrong type keeps its default)."""
        values = record.get("tally")
        if not isinstance(values, dict):
            raise ValueError("a summary record without its tally")
        tally = cls()
        for spec in fields(cls):
            value = values.get(spec.name)
            if type(value) is type(getattr(tally, spec.name)):
                setattr(tally, spec.name, value)
        return tally


@dataclass
class _File:
    """An open session file being listed."""

    path: Path
    fd: int
    size: int
    notes: list[str] = field(default_factory=list)


def summary_row(path: Path) -> dict[str, Any]:
    """One listing row (`SessionSummary`'s fields) for a session file, read cheaply; an
    unreadable file is listed with the reason."""
    name = path.name[: -len(SESSION_SUFFIX)]
    try:
        header, tally = _read(path)
    except Unreadable as exc:
        return _unreadable_row(path, name, str(exc))
    row = {"name": name, "started_at": header["started_at"], "turns": tally.turns,
           "status": tally.run_status, "model": tally.model, "provider": tally.provider,
           "last_message": tally.last, "path": str(path),
           "parent_session": tally.parent_session or None}
    return {key: row[key] for key in _SUMMARY_FIELDS}


def _unreadable_row(path: Path, name: str, reason: str) -> dict[str, Any]:
    try:
        seconds = path.lstat().st_mtime
    except OSError:
        seconds = 0.0
    mtime = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
    return {"name": name, "started_at": mtime.replace("+00:00", "Z"), "turns": 0,
            "status": "unreadable", "model": "?", "provider": "?",
            "last_message": f"(unreadable: {reason})", "path": str(path), "parent_session": None}


def summary_rows(root: Path) -> list[dict[str, Any]]:
    """Every session row of `root`, newest first (by start time)."""
    rows = [summary_row(p) for p in sorted(regular_files(sessions_dir(root), SESSION_SUFFIX))]
    return sorted(rows, key=lambda row: (row["started_at"], row["name"]), reverse=True)


def _read(path: Path) -> tuple[dict[str, Any], Tally]:
    try:
        fd = open_private(path, os.O_RDONLY)
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        file = _File(path, fd, os.fstat(fd).st_size)
        header, header_end = _header(file)
        tally = Tally()
        tally.apply(header)
        for record in _records_after_summary(file, header_end):
            _fold(file, tally, record)
        return header, tally
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _header(file: _File) -> tuple[dict[str, Any], int]:
    """The header record (checked as session.py checks it) and where its line ends."""
    first = os.pread(file.fd, min(file.size, HEAD_CAP), 0).split(b"\n", 1)[0]
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("type") != "header":
        raise Unreadable(f"{file.path} has no session header on line 1 (cut off while being "
                         "created?)")
    for name in ("name", "started_at", "model", "provider"):
        if not isinstance(record.get(name, ""), str):
            raise Unreadable(f"{file.path}: line 1: invalid header ({name} is not a string)")
    version = record.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise Unreadable(f"{file.path} has format version {version}; this version reads "
                         f"{FORMAT_VERSION}")
    record.setdefault("started_at", "")
    return record, len(first) + 1


def _records_after_summary(file: _File, header_end: int) -> list[Any]:
    """The records after the last summary record (that one included), or after the header."""
    lines = _tail_lines(file, header_end)
    start = next((i for i in range(len(lines) - 1, -1, -1)
                  if lines[i].startswith(SUMMARY_PREFIX)), 0)
    last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    records = []
    for number, raw in enumerate(lines[start:], start):
        if not raw.strip():
            continue
        try:
            records.append(json.loads(raw))
        except ValueError as exc:
            if number != last:  # a torn last line is skipped, as loading skips it
                raise Unreadable(
                    f"{file.path}: a line near the end is not valid JSON ({exc})") from None
    return records


def _tail_lines(file: _File, header_end: int) -> list[bytes]:
    """Whole lines from the last summary record (or the header's end) to the end of file."""
    span = _CHUNK
    while True:  # the span doubles: each byte is read about twice at most
        start = max(header_end, file.size - span)
        lines = os.pread(file.fd, file.size - start, start).split(b"\n")
        if start == header_end or any(line.startswith(SUMMARY_PREFIX) for line in lines[1:]):
            return lines if start == header_end else lines[1:]  # [0] may be a line's end
        if span >= TAIL_CAP and file.size > FULL_CAP:
            raise Unreadable(f"no summary in its last {TAIL_CAP >> 20} MiB and larger than "
                             f"{FULL_CAP >> 20} MiB (`sandbox-agent sessions show` reads it)")
        span *= 2


def _fold(file: _File, tally: Tally, record: Any) -> None:
    if not isinstance(record, dict):
        raise Unreadable(f"{file.path}: a record near the end is not a JSON object")
    kind = record.get("type")
    try:
        if kind == "message":
            _check_message(record)
        elif kind == "header":
            raise ValueError("a second header")
        tally.apply(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise Unreadable(f"{file.path}: invalid {kind} record near the end ({exc})") from exc


def _check_message(record: dict[str, Any]) -> None:
    """The shape `Message` would refuse, in what a listing uses of it."""
    if record.get("role") not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"role {record.get('role')!r}")
    if not isinstance(record.get("content", ""), str):
        raise ValueError("content is not a string")
    calls = record.get("tool_calls", [])
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str)
            and isinstance(c.get("arguments", {}), dict) for c in calls):
        raise ValueError("tool_calls are not calls")
