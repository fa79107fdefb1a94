"""`audit report`: one self-contained, inert HTML page of what runs did.

The page is for a person reviewing an incident: the chain's verification status at the top,
totals, the denials, then a timeline per run (turns, tool calls with who approved them and by
which rule, results, and the diff of every change as far as the log holds it). It loads nothing
(no network, no script): a Content-Security-Policy meta allows only its own stylesheet, by hash.

Everything in the log was chosen by the model, the repository or the sandbox, so every string
is made inert (executor/text.py: control, bidi and invisible characters shown escaped) and then
HTML-escaped; the page is ASCII (other characters as references), so even `cat` of it is safe.

What a diff shows depends on what the records hold: an `edit_file` call keeps its old and new
text (a real diff), a `write_file` call keeps the content written (all lines added; what it
replaced is known only by its hash), a file a command changed is known only by its hashes and
sizes (said so on the page). Arguments longer than 16 KiB were cut by the writer, with a marker.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from executor import __version__
from executor.audit import VerifyReport
from executor.audit_formats import run_ended
from executor.text import inert, inert_line

REPORT_VERSION = "sandbox-agent-report/1"
"""The page's own version (in its `<meta name="generator">`); docs/AUDIT.md."""
PREVIEW_CHARS = 2000
"""Characters of a result preview shown (the rest folds away)."""
_MAX_PENDING = 10_000

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:1rem;color:#1b1b1b}
h1{font-size:1.5rem}h2{font-size:1.2rem;border-bottom:1px solid #ccc;margin-top:2rem}
.status{padding:.6rem 1rem;border-radius:4px;font-weight:600}
.ok{background:#e3f6e3;color:#145214}.bad{background:#fde2e2;color:#8a1010}
.empty{background:#eee}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.2rem .5rem;
text-align:left;vertical-align:top}
ol.timeline{list-style:none;padding:0}ol.timeline>li{border-left:3px solid #bbb;margin:.3rem 0;
padding:.2rem .6rem}
li.allow{border-color:#3a3}li.deny,li.reject{border-color:#c33;background:#fff4f4}
li.write{border-color:#36c}li.turn{border-color:#999;background:#f6f6f6}
li.problem{border-color:#c80;background:#fff8e6}
.meta{color:#666;font-size:.85em}code,pre{font:12px/1.4 ui-monospace,monospace}
pre{background:#f7f7f7;padding:.4rem;overflow-x:auto;white-space:pre-wrap;margin:.3rem 0}
.add{color:#0a5a0a;background:#e6ffec}.del{color:#8a1010;background:#ffebe9}
.hunk{color:#555}.badge{border-radius:3px;padding:0 .3rem;font-size:.85em;background:#ddd}
.badge.allow{background:#cfc}.badge.deny,.badge.reject{background:#fcc}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src 'none'; "
       "script-src 'none'; base-uri 'none'; form-action 'none'")
"""Nothing loads, nothing runs: only the page's own stylesheet applies."""


def esc(value: Any) -> str:
    """Any value as inert, escaped HTML text (one line)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return html.escape(inert_line(text), quote=True)


def esc_block(text: str) -> str:
    """Multi-line text as inert, escaped HTML (newlines kept, for a <pre>)."""
    return html.escape(inert(text), quote=True)


@dataclass
class Totals:
    """What the page counts."""

    records: int = 0
    sessions: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    model_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    denied: int = 0
    files: set[str] = field(default_factory=set)
    run_ms: int = 0
    first: str | None = None
    last: str | None = None

    def count(self, record: Mapping[str, Any]) -> None:
        """Add one record."""
        self.records += 1
        self.sessions.add(str(record.get("session")))
        self.runs.add(str(record.get("run")))
        ts = record.get("ts")
        if isinstance(ts, str):
            self.first = self.first or ts
            self.last = ts


class ReportBuilder:
    """Renders records in chain order into the page's sections."""

    def __init__(self) -> None:
        self.totals = Totals()
        self.timeline: list[str] = []
        self.denials: list[str] = []
        self._calls: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
        self._turns: dict[str, int] = {}
        self._run: str | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        """One record into the totals and the timeline."""
        self.totals.count(record)
        if record.get("run") != self._run:
            self._run_heading(record)
        render = _RENDERERS.get(str(record.get("kind")), ReportBuilder._other)
        self.timeline.append(render(self, record))

    # ---------------------------------------------------------------- per kind

    def _run_heading(self, record: Mapping[str, Any]) -> None:
        self._run = str(record.get("run"))
        if record.get("kind") != "run_start":  # a range that starts mid-run
            self.timeline.append(f"</ol><h2>session {esc(record.get('session'))}, run "
                                 f"{esc(record.get('run'))} (continued)</h2><ol class=timeline>")

    def _run_start(self, r: Mapping[str, Any]) -> str:
        self.timeline.append(
            f"</ol><h2>session {esc(r.get('session'))}, run {esc(r.get('run'))}</h2>"
            "<ol class=timeline>")
        facts = [("started by", f"{r.get('user')}@{r.get('host')}"), ("root", r.get("root")),
                 ("model", f"{r.get('provider')}/{r.get('model')}"), ("image", r.get("image")),
                 ("mount", r.get("mount_mode")), ("workspace", r.get("workspace")),
                 ("policy", r.get("policy_source")), ("argv", " ".join(map(str, r.get("argv")
                                                                           or [])))]
        return _item(r, "run_start", "run started", _facts(facts))

    def _sandbox_start(self, r: Mapping[str, Any]) -> str:
        facts = [("container", r.get("container_id")), ("image", r.get("image")),
                 ("digest", r.get("image_digest")), ("network", r.get("network")),
                 ("took", _ms(r.get("duration_ms")))]
        return _item(r, "sandbox_start", "sandbox re-attached" if r.get("reattached")
                     else "sandbox started", _facts(facts))

    def _model_request(self, r: Mapping[str, Any]) -> str:
        run = str(r.get("run"))
        self._turns[run] = self._turns.get(run, 0) + 1
        t = self.totals
        t.model_requests += 1
        t.prompt_tokens += _num(r.get("prompt_tokens"))
        t.completion_tokens += _num(r.get("completion_tokens"))
        what = (f"{esc(r.get('model'))}: {esc(r.get('messages'))} messages, "
                f"{esc(r.get('prompt_tokens'))} + {esc(r.get('completion_tokens'))} tokens, "
                f"{_ms(r.get('duration_ms'))}")
        return _item(r, "turn", f"turn {self._turns[run]}: model request", what)

    def _tool_call(self, r: Mapping[str, Any]) -> str:
        self.totals.calls += 1
        self._remember(r)
        decision = str(r.get("decision"))
        who = (f"approved by <b>{esc(r.get('approved_by') or '-')}</b>, rule"
               if decision == "allow" else "by rule")
        body = (f"<span class='badge {esc(decision)}'>{esc(decision)}</span> {who} "
                f"<code>{esc(r.get('rule'))}</code>")
        if r.get("reason"):
            body += f", reason: {esc(r.get('reason'))}"
        body += _arguments(r.get("arguments"))
        if decision != "allow":
            self.totals.denied += 1
            self.denials.append(
                f"<tr><td>{esc(r.get('seq'))}</td><td>{esc(r.get('ts'))}</td>"
                f"<td>{esc(r.get('session'))}</td><td>{esc(r.get('tool'))}</td>"
                f"<td>{esc(decision)}</td><td><code>{esc(r.get('rule'))}</code></td>"
                f"<td>{esc(r.get('reason') or '')}</td><td><code>"
                f"{esc(_short(r.get('arguments')))}</code></td></tr>")
        return _item(r, decision, f"call {esc(r.get('tool'))}", body)

    def _tool_result(self, r: Mapping[str, Any]) -> str:
        status = "ok" if r.get("ok") else "failed"
        facts = f"{status}"
        if r.get("exit_code") is not None:
            facts += f", exit code {esc(r.get('exit_code'))}"
        if r.get("timed_out"):
            facts += ", timed out"
        facts += f", {_ms(r.get('duration_ms'))}, {esc(r.get('output_bytes'))} bytes of output"
        preview = str(r.get("preview") or "")
        if preview:
            cut = " (cut by the log)" if r.get("preview_truncated") else ""
            facts += (f"<details><summary>output{cut}</summary><pre>"
                      f"{esc_block(preview[:PREVIEW_CHARS])}</pre></details>")
        return _item(r, "result", f"result of {esc(r.get('tool'))}", facts)

    def _write(self, r: Mapping[str, Any]) -> str:
        path = str(r.get("path"))
        self.totals.files.add(path)
        call = self._calls.get(str(r.get("call_id"))) or {}
        change = r.get("change") or ("created" if r.get("sha256_before") is None else
                                     "deleted" if r.get("sha256_after") is None else "modified")
        by = "outside any tool call" if r.get("source") == "outside" else esc(r.get("tool"))
        body = (f"<code>{esc(path)}</code> {esc(change)} by {by}<br><span class=meta>sha256 "
                f"{esc(r.get('sha256_before') or 'none')} &rarr; "
                f"{esc(r.get('sha256_after') or 'none')}</span>")
        return _item(r, "write", "file changed", body + _diff(call, r))

    def _apply(self, r: Mapping[str, Any]) -> str:
        listed = r.get("files")
        files: list[Any] = listed if isinstance(listed, list) else []
        rows = "".join(
            f"<tr><td>{esc(f.get('change'))}</td><td><code>{esc(f.get('path'))}</code></td>"
            f"<td class=meta>{esc(f.get('sha256_before') or 'none')} &rarr; "
            f"{esc(f.get('sha256_after') or 'none')}</td></tr>"
            for f in files if isinstance(f, Mapping))
        for f in files:
            if isinstance(f, Mapping):
                self.totals.files.add(str(f.get("path")))
        body = (f"approved by <b>{esc(r.get('approved_by'))}</b> ({esc(r.get('user'))}@"
                f"{esc(r.get('host'))}), changeset {esc(r.get('changeset'))}"
                f"<table>{rows}</table><span class=meta>file contents are not in the log, only "
                "their hashes</span>")
        return _item(r, "write", f"{esc(r.get('kind'))} of a copy session's changes", body)

    def _run_end(self, r: Mapping[str, Any]) -> str:
        self.totals.run_ms += _num(r.get("duration_ms"))
        body = f"{esc(run_ended(r))}, {_ms(r.get('duration_ms'))}"
        if r.get("answer_preview"):
            body += f"<pre>{esc_block(str(r.get('answer_preview'))[:PREVIEW_CHARS])}</pre>"
        return _item(r, "run_end", "run ended", body)

    def _run_abandoned(self, r: Mapping[str, Any]) -> str:
        calls = r.get("calls_without_result")
        listed = ", ".join(f"{esc(c.get('tool'))} ({esc(c.get('call_id'))})" for c in calls
                           if isinstance(c, Mapping)) if isinstance(calls, list) else ""
        return _item(r, "problem", "the previous run was abandoned",
                     "it died without recording its end; calls left without a result: "
                     f"{listed or 'none'}")

    def _problem(self, r: Mapping[str, Any]) -> str:
        extra = f" ({esc(r.get('error_type'))})" if r.get("error_type") else ""
        return _item(r, "problem", esc(r.get("kind")), esc(r.get("message")) + extra)

    def _retry(self, r: Mapping[str, Any]) -> str:
        return _item(r, "problem", "retry", f"attempt {esc(r.get('attempt'))}: "
                     f"{esc(r.get('reason'))}")

    def _other(self, r: Mapping[str, Any]) -> str:
        rest = {k: v for k, v in r.items() if k not in ("seq", "ts", "prev", "hash", "kind")}
        return _item(r, "other", esc(r.get("kind")), f"<code>{esc(_short(rest, 400))}</code>")

    def _remember(self, r: Mapping[str, Any]) -> None:
        self._calls[str(r.get("call_id"))] = {"tool": r.get("tool"),
                                              "arguments": r.get("arguments")}
        while len(self._calls) > _MAX_PENDING:
            self._calls.popitem(last=False)

    # ---------------------------------------------------------------- page

    def page(self, verification: VerifyReport, scope: str) -> str:
        """The whole page."""
        return "".join([
            "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
            f"<meta http-equiv=Content-Security-Policy content=\"{CSP}\">",
            "<meta name=referrer content=no-referrer>",
            f"<meta name=generator content=\"sandbox-agent {esc(__version__)} "
            f"{REPORT_VERSION}\">",
            f"<title>sandbox-agent audit report</title><style>{STYLE}</style></head><body>",
            "<h1>sandbox-agent audit report</h1>", _verification(verification),
            f"<p class=meta>{esc(scope)}</p>", self._totals(), self._denials(),
            "<h2>Timeline</h2><ol class=timeline>", *self.timeline, "</ol>",
            f"<p class=meta>{REPORT_VERSION}; times are UTC</p></body></html>\n",
        ])

    def _totals(self) -> str:
        t = self.totals
        wall = _span_ms(t.first, t.last)
        rows = [("records", t.records), ("sessions", len(t.sessions)), ("runs", len(t.runs)),
                ("model requests", t.model_requests),
                ("tokens", f"{t.prompt_tokens} in, {t.completion_tokens} out"),
                ("tool calls", f"{t.calls} ({t.denied} denied or rejected)"),
                ("files changed", len(t.files)),
                ("time", f"{_ms(t.run_ms)} in runs, {_ms(wall)} from first to last record"),
                ("from", t.first or "-"), ("to", t.last or "-")]
        return "<h2>Totals</h2>" + _facts(rows, ident="totals")

    def _denials(self) -> str:
        if not self.denials:
            return "<h2>Denials</h2><p>none</p>"
        head = ("<tr><th>seq</th><th>time</th><th>session</th><th>tool</th><th>decision</th>"
                "<th>rule</th><th>reason</th><th>arguments</th></tr>")
        return f"<h2>Denials</h2><table id=denials>{head}{''.join(self.denials)}</table>"


_RENDERERS = {
    "run_start": ReportBuilder._run_start, "sandbox_start": ReportBuilder._sandbox_start,
    "model_request": ReportBuilder._model_request, "tool_call": ReportBuilder._tool_call,
    "tool_result": ReportBuilder._tool_result, "write": ReportBuilder._write,
    "apply": ReportBuilder._apply, "undo": ReportBuilder._apply,
    "retry": ReportBuilder._retry, "warning": ReportBuilder._problem,
    "error": ReportBuilder._problem, "run_end": ReportBuilder._run_end,
    "run_abandoned": ReportBuilder._run_abandoned,
    "connection": ReportBuilder._other,
}
"""How each record kind is shown (executor.audit.RECORD_KINDS and PLANNED_KINDS)."""


def write_report(records: Iterable[Mapping[str, Any]], out: TextIO, *,
                 verification: VerifyReport, scope: str) -> int:
    """Render `records` into one page on `out` (ASCII); returns how many it shows."""
    builder = ReportBuilder()
    for record in records:
        builder.add(record)
    page = builder.page(verification, scope)
    out.write(page.encode("ascii", "xmlcharrefreplace").decode("ascii"))
    return builder.totals.records


# ---------------------------------------------------------------------- pieces


def _item(r: Mapping[str, Any], css: str, title: str, body: str) -> str:
    ts = str(r.get("ts", ""))[11:23]
    return (f"<li class='{esc(css)}' id='seq-{esc(r.get('seq'))}'><span class=meta>#"
            f"{esc(r.get('seq'))} {esc(ts)}</span> <b>{title}</b><br>{body}</li>")


def _facts(rows: Iterable[tuple[str, Any]], ident: str | None = None) -> str:
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows
                    if v is not None)
    return f"<table{f' id={ident}' if ident else ''}>{cells}</table>"


def _verification(report: VerifyReport) -> str:
    if report.problem is not None:
        return (f"<p class='status bad' id=verification>Chain verification FAILED: "
                f"{esc(str(report.problem))}. Records after seq {report.head_seq} are not "
                "trusted.</p>")
    if report.empty:
        return "<p class='status empty' id=verification>No audit records.</p>"
    return (f"<p class='status ok' id=verification>Chain verified: {report.records} records "
            f"in {len(report.files)} file(s), seq 1..{report.head_seq}, head "
            f"<code>{esc(report.head_hash)}</code>.</p>")


def _arguments(arguments: Any) -> str:
    if not isinstance(arguments, Mapping) or not arguments:
        return ""
    if set(arguments) == {"command"}:
        return f"<pre>$ {esc_block(str(arguments['command']))}</pre>"
    shown = {k: v for k, v in arguments.items() if k not in ("content", "old_text", "new_text")}
    return f"<br><code>{esc(_short(shown, 400))}</code>" if shown else ""


def _diff(call: Mapping[str, Any], r: Mapping[str, Any]) -> str:
    """The change as a diff, as far as the records hold it."""
    args = call.get("arguments") if isinstance(call.get("arguments"), Mapping) else {}
    assert isinstance(args, Mapping)
    tool = call.get("tool")
    if r.get("source") is None and tool == "edit_file" and isinstance(args.get("new_text"), str):
        old = args.get("old_text") if isinstance(args.get("old_text"), str) else ""
        return _diff_block(str(old), str(args["new_text"]),
                           "the edit (its old and new text, from the call)")
    if r.get("source") is None and tool == "write_file" and isinstance(args.get("content"), str):
        note = ("content written (from the call); what it replaced is known only by its hash"
                if r.get("sha256_before") else "new file (content from the call)")
        return _diff_block("", str(args["content"]), note)
    return ("<br><span class=meta>content not recorded: the log keeps this file's hashes and "
            "sizes only</span>")


def _diff_block(old: str, new: str, note: str) -> str:
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
    out = []
    for line in list(lines)[2:]:  # the ---/+++ header names no files here
        css = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        out.append(f"<span class='{css}'>{esc_block(line)}</span>" if css else esc_block(line))
    return f"<br><span class=meta>{note}</span><pre class=diff>{chr(10).join(out)}</pre>"


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(value: Any) -> int:
    return value if type(value) is int else 0


def _ms(value: Any) -> str:
    if type(value) is not int:
        return "-"
    return f"{value} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _span_ms(first: str | None, last: str | None) -> int | None:
    try:
        start, end = datetime.fromisoformat(str(first)), datetime.fromisoformat(str(last))
    except ValueError:
        return None
    return round((end - start).total_seconds() * 1000)
