"""Reading an audit log back: `verify` (the chain holds, or where it breaks first), the
records of a directory or an exported file, `--since`, and export as JSON lines or CSV.

Nothing here needs pydantic, so `sandbox-agent audit verify` starts fast. The format:
executor/audit.py and docs/AUDIT.md.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TextIO

from executor.audit_chain import ZERO_HASH, canonical, day_files, record_hash
from executor.audit_chain import Head as _Head
from executor.errors import AuditError, AuditIntegrityError, ConfigError
from executor.state import open_private
from executor.text import inert_line

# ---------------------------------------------------------------------------- verify

ProblemKind = Literal["broken", "edited", "removed", "inserted", "reordered"]


@dataclass(frozen=True)
class AuditProblem:
    """The first place where the chain does not hold."""

    kind: ProblemKind
    file: str
    """Day file name."""
    line: int
    """1-based line in that file."""
    seq: int | None
    """The record's sequence number, when it could be read."""
    detail: str

    def __str__(self) -> str:
        seq = f", seq {self.seq}" if self.seq is not None else ""
        return f"{self.kind} record at {self.file} line {self.line}{seq}: {self.detail}"


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`: ok, empty, or the first problem."""

    path: str
    files: tuple[str, ...]
    records: int
    """Records checked and found intact (before the problem, if any)."""
    head_seq: int
    """Sequence number of the last intact record (0 when none)."""
    head_hash: str
    """Hash of the last intact record: keep it elsewhere to detect a truncated tail later."""
    problem: AuditProblem | None = None

    @property
    def ok(self) -> bool:
        """No problem found (an empty log is ok)."""
        return self.problem is None

    @property
    def empty(self) -> bool:
        """No records at all (missing directory, no day files, or empty files)."""
        return self.records == 0 and self.problem is None

    def raise_for_problem(self) -> None:
        """Raise `AuditIntegrityError` naming the first problem, if there is one."""
        if self.problem is not None:
            raise AuditIntegrityError(
                f"audit log {self.path} failed verification: {self.problem}",
                fix="compare with a backup or export; records after this point are not trusted",
            )


@dataclass(frozen=True)
class _Entry:
    """One line of the log as verify sees it."""

    file: str
    line: int
    first_in_file: bool
    seq: int | None = None
    prev: str | None = None
    hash: str | None = None
    error: tuple[ProblemKind, str] | None = None


def verify(path: Path) -> VerifyReport:
    """Check every record of an audit directory (or of one exported .jsonl file)."""
    files = _files_of(path)
    entries = [entry for file in files for entry in _entries(file)]
    expected, good = _Head(0, ZERO_HASH), 0
    for index, entry in enumerate(entries):
        problem = entry_problem(entries, index, expected)
        if problem:
            return _report(path, files, good, expected, problem)
        expected, good = _Head(entry.seq or 0, entry.hash or ""), good + 1
    return _report(path, files, good, expected, None)


def _report(
    path: Path, files: Sequence[Path], good: int, head: _Head, problem: AuditProblem | None
) -> VerifyReport:
    return VerifyReport(
        path=str(path), files=tuple(f.name for f in files), records=good,
        head_seq=head.seq, head_hash=head.hash, problem=problem,
    )


def _files_of(path: Path) -> list[Path]:
    """One exported file, or the day files of a directory (a link is not followed)."""
    return [path] if path.is_file() and not path.is_symlink() else day_files(path)


def _read(path: Path) -> bytes:
    """A log file's bytes; a link, FIFO or device raises OSError instead of being followed."""
    with os.fdopen(open_private(path, os.O_RDONLY, owner=False), "rb") as f:
        return f.read()


def _entries(path: Path) -> Iterator[_Entry]:
    try:
        data = _read(path)
    except OSError as exc:
        yield _Entry(path.name, 1, True, error=("broken", f"cannot be read: {exc.strerror or exc}"))
        return
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last record
    for number, raw in enumerate(lines, start=1):
        yield _check_line(path.name, number, raw)


def _check_line(file: str, number: int, raw: bytes) -> _Entry:
    """Parse one line and check it against its own hash."""
    try:
        record = json.loads(raw)
    except ValueError:
        return _Entry(file, number, number == 1, error=("broken", "not valid JSON (torn/edited)"))
    seq = record.get("seq") if isinstance(record, dict) else None
    if type(seq) is not int or not isinstance(record.get("prev"), str):
        return _Entry(file, number, number == 1, error=("broken", "not an audit record"))
    entry = _Entry(file, number, number == 1, seq=seq, prev=record["prev"], hash=record.get("hash"))
    if record.get("hash") != record_hash(record):
        return _with_error(entry, "edited", "hash mismatch: the record was changed after writing")
    if canonical(record) != raw:
        return _with_error(entry, "edited", "line is not in canonical form (re-written)")
    return entry


def _with_error(entry: _Entry, kind: ProblemKind, detail: str) -> _Entry:
    return _Entry(
        file=entry.file, line=entry.line, first_in_file=entry.first_in_file, seq=entry.seq,
        prev=entry.prev, hash=entry.hash, error=(kind, detail),
    )


def entry_problem(entries: Sequence[_Entry], index: int, expected: _Head) -> AuditProblem | None:
    """What is wrong with `entries[index]` given the head before it (None if it links on)."""
    entry = entries[index]
    if entry.error:
        return _problem(entry, *entry.error)
    want = expected.seq + 1
    assert entry.seq is not None
    if entry.seq == want and entry.prev == expected.hash:
        return None
    if entry.seq > want:
        return _gap(entries, index, want)
    if entry.seq < want:
        return _backwards(entries, index)
    before = entries[index - 1] if index else None
    where = f"{before.file} line {before.line}" if before else "the start"
    return _problem(
        entry, "edited",
        f"prev does not match the hash of seq {expected.seq} ({where}): that record was "
        "replaced or forged",
    )


def _gap(entries: Sequence[_Entry], index: int, want: int) -> AuditProblem:
    """The record skips ahead: the missing ones are later (reordered) or gone (removed)."""
    entry = entries[index]
    assert entry.seq is not None
    later = next(
        (e for e in entries[index + 1 :] if e.seq is not None and want <= e.seq < entry.seq), None
    )
    if later:
        return _problem(
            entry, "reordered",
            f"seq {entry.seq} comes before seq {later.seq} ({later.file} line {later.line})",
        )
    missing = f"seq {want}" if want == entry.seq - 1 else f"seq {want}..{entry.seq - 1}"
    if index == 0:
        return _problem(entry, "removed", f"{missing} missing at the start of the log")
    before = entries[index - 1]
    if entry.first_in_file:
        return _problem(
            entry, "removed",
            f"{missing} missing between {before.file} and {entry.file} (a day file, or the end "
            f"of {before.file}, was removed)",
        )
    return _problem(entry, "removed", f"{missing} missing before this line")


def _backwards(entries: Sequence[_Entry], index: int) -> AuditProblem:
    """The record repeats or goes back: an inserted copy, a forged record, or a move."""
    entry = entries[index]
    twin = next((e for e in entries[:index] if e.seq == entry.seq), None)
    if twin is None:
        return _problem(entry, "reordered", f"seq {entry.seq} appears after a later record")
    if twin.hash == entry.hash:
        return _problem(
            entry, "inserted", f"a copy of the record at {twin.file} line {twin.line}"
        )
    return _problem(
        entry, "inserted",
        f"seq {entry.seq} is also used at {twin.file} line {twin.line} (one of them was inserted)",
    )


def _problem(entry: _Entry, kind: ProblemKind, detail: str) -> AuditProblem:
    return AuditProblem(kind=kind, file=entry.file, line=entry.line, seq=entry.seq, detail=detail)


# ---------------------------------------------------------------------------- reading


def read_records(
    path: Path, *, session: str | None = None, since: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """Records of an audit directory (or file) in order; unreadable lines are skipped."""
    for file in _files_of(path):
        try:
            data = _read(file)
        except OSError as exc:
            raise AuditError(f"cannot read {file}: {exc.strerror or exc}") from exc
        for raw in data.splitlines():
            record = _load(raw)
            if record is not None and _selected(record, session, since):
                yield record


def _load(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _selected(record: Mapping[str, Any], session: str | None, since: datetime | None) -> bool:
    if session is not None and record.get("session") != session:
        return False
    if since is None:
        return True
    try:
        return datetime.fromisoformat(str(record.get("ts"))) >= since
    except ValueError:
        return False


_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO-8601 time (naive means UTC) or a duration ago like `30m`, `1h`, `2d`, `1w`."""
    match = _DURATION.match(text)
    if match:
        delta = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        return (now or datetime.now(UTC)) - delta
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--since {text!r} is neither an ISO-8601 time nor a duration",
            fix="use e.g. --since 2024-05-01T12:00 or --since 1h (s, m, h, d, w)",
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# ---------------------------------------------------------------------------- export

ExportFormat = Literal["jsonl", "csv"]

CSV_COLUMNS = (
    "seq", "ts", "kind", "session", "run", "tool", "call_id", "decision", "approved_by",
    "rule", "reason", "ok", "exit_code", "timed_out", "duration_ms", "output_bytes", "bytes",
    "path", "sha256_before", "sha256_after", "lines_changed", "status", "turns", "message",
    "prev", "hash",
)
"""CSV columns; every other field goes, as canonical JSON, into a final `details` column."""
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def export_records(records: Iterable[Mapping[str, Any]], fmt: ExportFormat, out: TextIO, *,
                   terminal: bool = False) -> int:
    """Write `records` as JSON lines (canonical, byte-identical to the log) or CSV.

    `terminal`: for a person at a terminal, each CSV value made inert on one line
    (executor/text.py), so no string the model chose (a tool name, a path) moves the cursor,
    sets the title or forges a row; otherwise the data itself. JSON lines are ASCII, every
    control character escaped, so they are inert either way.
    """
    if fmt == "jsonl":
        return _export_jsonl(records, out)
    if fmt == "csv":
        return _export_csv(records, out, terminal)
    raise ConfigError(f"unknown export format {fmt!r}", fix="use --format jsonl or csv")


def _export_jsonl(records: Iterable[Mapping[str, Any]], out: TextIO) -> int:
    count = 0
    for record in records:
        out.write(canonical(record).decode("ascii") + "\n")
        count += 1
    return count


def _export_csv(records: Iterable[Mapping[str, Any]], out: TextIO, terminal: bool) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, "details"])
    count = 0
    for record in records:
        details = {k: v for k, v in record.items() if k not in CSV_COLUMNS}
        cells = [csv_cell(record.get(column)) for column in CSV_COLUMNS]
        if terminal:
            cells = [inert_line(cell) for cell in cells]
        writer.writerow([*cells, canonical(details).decode("ascii") if details else ""])
        count += 1
    return count


def csv_cell(value: Any) -> str:
    """A CSV cell: JSON for non-strings, and text a spreadsheet would run as a formula defused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    # Tool arguments come from the model: never let them become spreadsheet formulas.
    return "'" + value if value.startswith(_FORMULA_START) else value
