"""`sandbox-agent audit verify | show | export`: check and read the audit trail."""


import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from executor.cli.common import RootOption, cli_errors, err_console, out_console, to_file
from executor.errors import AuditError, AuditIntegrityError, ConfigError
from executor.text import inert_line, markup_safe

app = typer.Typer(
    name="audit", help="Verify, show and export the audit log.", no_args_is_help=True
)


class ExportFormat(StrEnum):
    """Export formats."""

    JSONL = "jsonl"
    CSV = "csv"
    OCSF = "ocsf"


AuditDirOption = Annotated[
    Path | None,
    typer.Option(
        "--audit-dir",
        envvar="SANDBOX_AGENT_AUDIT_DIR",
        help="Audit directory (or one exported .jsonl file); default: the project's audit dir "
        "in the user state dir (see `sandbox-agent audit path`).",
    ),
]
SessionOption = Annotated[
    str | None, typer.Option("--session", "-s", help="Only records of this session.")
]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Only records since an ISO-8601 time or a duration (1h, 2d)."),
]


@app.command()
@cli_errors
def verify(
    root: RootOption = Path("."),
    audit_dir: AuditDirOption = None,
    require_records: Annotated[
        bool, typer.Option("--require-records", help="Fail when there are no records at all.")
    ] = False,
) -> None:
    """Check the hash chain; exit 51 naming the first edited, removed, inserted or moved record."""
    from executor import audit

    path = _audit_path(root, audit_dir)
    report = audit.verify(path)
    report.raise_for_problem()
    if report.empty:
        if require_records:
            raise AuditIntegrityError(f"no audit records in {path}", fix="was the log deleted?")
        err_console.print(f"[yellow]no audit records[/] in {markup_safe(str(path), line=True)}")
        return
    typer.echo(f"ok: {report.records} records in {len(report.files)} file(s), "
               f"seq 1..{report.head_seq}\nhead: {report.head_hash}")


@app.command()
@cli_errors
def show(
    root: RootOption = Path("."),
    audit_dir: AuditDirOption = None,
    session: SessionOption = None,
    since: SinceOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON record a line.")] = False,
) -> None:
    """List audit records as a table (or JSON lines)."""
    from executor import audit

    records = _records(root, audit_dir, session, since)
    if as_json:
        audit.export_records(records, "jsonl", sys.stdout)  # ASCII JSON: inert as it is
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("seq", "time (UTC)", "session", "kind", "what", show_lines=False)
    for record in records:  # what the model and the sandbox chose, shown inert
        table.add_row(*(Text(inert_line(cell)) for cell in _row(record)))
    if table.row_count == 0:
        err_console.print("no matching audit records")
        return
    out_console.print(table)


@app.command()
@cli_errors
def export(
    fmt: Annotated[ExportFormat, typer.Option(
        "--format", "-f", help="jsonl, csv, or ocsf (OCSF 1.8.0 events, one a line).")],
    root: RootOption = Path("."),
    audit_dir: AuditDirOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write (default or -: stdout).")
    ] = None,
    session: SessionOption = None,
    since: SinceOption = None,
) -> None:
    """Export audit records as JSON lines (byte-identical to the log), CSV, or OCSF events
    (docs/AUDIT.md); at a terminal every CSV value is shown inert, one record a line (into a
    pipe or --output: the data). JSON lines and OCSF are ASCII JSON, inert anywhere."""
    from executor import audit

    records = _records(root, audit_dir, session, since)
    output = to_file(output)
    terminal = output is None and sys.stdout.isatty()
    with _opened(output) as out:
        if fmt is ExportFormat.OCSF:
            from executor.audit_formats.ocsf import export_ocsf

            count = export_ocsf(records, out)
        else:
            count = audit.export_records(records, "csv" if fmt is ExportFormat.CSV else "jsonl",
                                         out, terminal=terminal)
    where = f" to {output}" if output else ""
    err_console.print(f"exported {count} record(s){inert_line(where)}", markup=False)


@app.command()
@cli_errors
def report(
    root: RootOption = Path("."),
    audit_dir: AuditDirOption = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="HTML file to write (default or -: stdout)."),
    ] = None,
    session: SessionOption = None,
    since: SinceOption = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="Only records before an ISO-8601 time or a duration ago."),
    ] = None,
) -> None:
    """Write one self-contained HTML page (no script, nothing loaded) of a session or a time
    range: the chain's verification, totals, denials, and a timeline with every call, who
    approved it, and the diff of every change the log holds."""
    from executor import audit
    from executor.audit_formats.report import write_report

    path = _audit_path(root, audit_dir)
    records = _records(root, audit_dir, session, since)
    if until:
        try:
            end = audit.format_ts(audit.parse_since(until))
        except ConfigError as exc:
            raise ConfigError(exc.message.replace("--since", "--until", 1), fix=exc.fix) from None
        records = (r for r in records if str(r.get("ts", "")) < end)
    scope = _scope(path, session, since, until)
    output = to_file(output)
    with _opened(output) as out:
        count = write_report(records, out, verification=audit.verify(path), scope=scope)
    where = f" to {output}" if output else ""
    err_console.print(f"reported {count} record(s){inert_line(where)}", markup=False)


def _scope(path: Path, session: str | None, since: str | None, until: str | None) -> str:
    parts = [f"log {path}"]
    parts += [f"{name} {value}" for name, value in
              (("session", session), ("since", since), ("until", until)) if value]
    return "; ".join(parts) + ("" if len(parts) > 1 else "; every record")


def _records(
    root: Path, audit_dir: Path | None, session: str | None, since: str | None
) -> Iterator[dict[str, Any]]:
    from executor import audit

    path = _audit_path(root, audit_dir)
    moment = audit.parse_since(since) if since else None
    return audit.read_records(path, session=session, since=moment)


@app.command("path")
@cli_errors
def path_(root: RootOption = Path("."), audit_dir: AuditDirOption = None) -> None:
    """Print where the audit log of --root is kept (it is never inside the project)."""
    typer.echo(str(_audit_path(root, audit_dir)))


def _audit_path(root: Path, audit_dir: Path | None) -> Path:
    from executor import audit

    if audit_dir is None and not root.is_dir():
        raise ConfigError(f"project root {root} does not exist", fix="pass an existing --root")
    return audit.audit_dir_for(root, audit_dir)


@contextmanager
def _opened(output: Path | None) -> Iterator[TextIO]:
    """stdout, or `output` created private (0600): an export is as sensitive as the log. A
    link at that name (a repository can ship one) is replaced, never written through."""
    from executor.state import replacing

    if output is None:
        yield sys.stdout
        return
    try:
        with replacing(output) as out:
            yield out
    except OSError as exc:
        raise AuditError(f"cannot write {output}: {exc.strerror or exc}",
                         fix="name a file to write (in a folder that exists), or leave out "
                             "--output for stdout") from None


def _row(record: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    ts = str(record.get("ts", ""))[:19].replace("T", " ")
    kind = str(record.get("kind", ""))
    return str(record.get("seq", "")), ts, str(record.get("session", "")), kind, summarize(record)


def summarize(record: Mapping[str, Any]) -> str:
    """One line saying what a record is about."""
    describe = _SUMMARIES.get(str(record.get("kind")), _generic)
    try:
        return describe(record)
    except (KeyError, TypeError, ValueError):
        return _generic(record)


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _run_start(r: Mapping[str, Any]) -> str:
    return (
        f"{r.get('provider')}/{r.get('model')} by {r.get('user')}@{r.get('host')}, "
        f"image {r.get('image')} ({r.get('mount_mode')}), policy {r.get('policy_source')}"
    )


def _model_request(r: Mapping[str, Any]) -> str:
    tokens = f"{r.get('prompt_tokens')}+{r.get('completion_tokens')} tokens"
    size = f"{r.get('messages')} messages, {r.get('prompt_bytes')} B"
    return f"{size}, {r.get('duration_ms')} ms, {tokens}"


def _tool_call(r: Mapping[str, Any]) -> str:
    who = r.get("approved_by") or r.get("rule")
    return f"{r.get('tool')} {_short(r.get('arguments', {}))} → {r.get('decision')} ({who})"


def _tool_result(r: Mapping[str, Any]) -> str:
    status = "ok" if r.get("ok") else "failed"
    exit_code = f", exit {r['exit_code']}" if r.get("exit_code") is not None else ""
    size = f"{r.get('duration_ms')} ms, {r.get('output_bytes')} B"
    return f"{r.get('tool')} {status}{exit_code}, {size}"


def _write(r: Mapping[str, Any]) -> str:
    before = str(r.get("sha256_before") or "new")[:12]
    after = str(r.get("sha256_after"))[:12]
    size = f"{r.get('bytes')} B, {r.get('lines_changed')} lines"
    return f"{r.get('path')} {before} → {after} ({size})"


def _connection(r: Mapping[str, Any]) -> str:
    where = f"{r.get('host')}:{r.get('port')}" + (f" ({r['address']})" if r.get("address") else "")
    if r.get("decision") == "allowed":
        why = f"by {r.get('rule')} ({r.get('allowed_by')}), {r.get('bytes_up')} B up / " \
              f"{r.get('bytes_down')} B down, {r.get('duration_ms')} ms"
    else:
        why = _short(r.get("reason", ""), 100)
    call = f" [call {r['call_id']}]" if r.get("call_id") else ""
    return f"{r.get('method')} {where} {r.get('decision')}: {why}{call}"


def _run_end(r: Mapping[str, Any]) -> str:
    from executor.audit_formats import run_ended

    return f"{run_ended(r)}, {r.get('duration_ms')} ms"


def _sandbox_start(r: Mapping[str, Any]) -> str:
    return (f"{r.get('container_name') or str(r.get('container_id'))[:12]} from {r.get('image')} "
            f"({r.get('mount_mode')}), {r.get('duration_ms')} ms")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _changed_files(r: Mapping[str, Any], done: str) -> str:
    """An apply's or undo's record: how many files, left alone, and who approved."""
    files, conflicts = _listed(r.get("files")), _listed(r.get("conflicts"))
    left = f", {len(conflicts)} left alone (changed since)" if conflicts else ""
    who = f", approved by {r['approved_by']}" if r.get("approved_by") else ""
    paths = ", ".join(str(f.get("path")) for f in files[:3] if isinstance(f, dict))
    more = ", …" if len(files) > 3 else ""
    return _short(f"{len(files)} file(s) {done}{left}{who}: {paths}{more}", 120)


def _generic(r: Mapping[str, Any]) -> str:
    from executor import audit

    rest = {k: v for k, v in r.items() if k not in audit.RESERVED}
    return _short(rest, 120)


_SUMMARIES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "run_start": _run_start,
    "model_request": _model_request,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "write": _write,
    "retry": lambda r: f"attempt {r.get('attempt')}: {r.get('reason')}",
    "error": lambda r: _short(r.get("message", ""), 120),
    "warning": lambda r: _short(r.get("message", ""), 120),
    "run_end": _run_end,
    "connection": _connection,
    "sandbox_start": _sandbox_start,
    "apply": lambda r: _changed_files(r, "applied"),
    "undo": lambda r: _changed_files(r, "undone"),
}
