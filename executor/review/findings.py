"""Findings: their schema, the `submit_review` tool that receives them, and reading them out
of an answer written as text (a JSON object, or lines like `- src/app.py:12 high: title`)."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor.messages import ToolResult
from executor.models.parsing import json_objects
from executor.text import UNSAFE_RE
from executor.tools.base import RiskLevel, Tool, ToolContext

Severity = Literal["low", "medium", "high"]
SEVERITIES: tuple[Severity, ...] = ("low", "medium", "high")


MAX_TITLE, MAX_TEXT, MAX_FINDINGS = 200, 1200, 50
"""Bounds in the schema the server is given: a small model at temperature 0 repeated one
sentence in its summary until its reply was cut off, invalid, every time it was asked."""


class Finding(BaseModel):
    """One problem the review found."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1)
    """Path relative to the project root."""
    line: int | None = Field(default=None, ge=1)
    """1-based line, when the finding is about one."""
    severity: Severity
    title: str = Field(min_length=1, max_length=MAX_TITLE)
    """One line."""
    body: str = Field(default="", max_length=MAX_TEXT)
    """What is wrong and what to do about it."""


NO_LOCATION = "the model named no file inside the project for it"
"""A located finding's `location_note` when the path it gave was refused."""


class ReviewFinding(Finding):
    """A finding as the report holds it: `file` a normalised path inside the root, or None
    (the model gave none there: a URL, an absolute path, `../`…), `title` one line."""

    file: str | None = None  # type: ignore[assignment]
    """Path relative to the project root; None when the model's was not one (`location_note`)."""
    location_note: str | None = None
    """Why the finding has no file, when it has none."""

    @property
    def where(self) -> str:
        """`file:line` for one-line displays, or that there is no location."""
        return f"{self.file}:{self.line or '-'}" if self.file else "(no location)"


SUBMITTED_RESULT = "Review recorded ({count} findings). Now reply with a one-sentence final answer."


class SubmitReviewArgs(BaseModel):
    """The arguments of `submit_review`."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(max_length=MAX_TEXT,
                         description="One paragraph: what the code or change does, how it is.")
    findings: list[Finding] = Field(max_length=MAX_FINDINGS,
                                    description="Problems seen in the code; [] for none.")


class SubmitReview(Tool):
    """Where the model hands in its review: host-side, it only records the arguments."""

    name = "submit_review"
    description = ("Hand in the review: a summary and the findings (file, line, severity "
                   "high/medium/low, title, body). Call it once, when you are done looking.")
    Args = SubmitReviewArgs
    risk = RiskLevel.LOW
    read_only_safe = True
    approval = False

    def __init__(self) -> None:
        self.submitted: SubmitReviewArgs | None = None

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        """Keep the latest submission (a corrected one replaces the first)."""
        self.submitted = args
        return ToolResult(ok=True, output=SUBMITTED_RESULT.format(count=len(args.findings)))


_LOOSE_SEVERITY = {"critical": "high", "error": "high", "major": "high", "warning": "medium",
                   "minor": "low", "info": "low", "nit": "low", "note": "low"}
_LINE_FINDING = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])\s+(?:\*\*|`)?(?P<file>[\w./@+-]+?\.[\w]+)(?::(?P<line>\d+))?"
    r"(?:\*\*|`)?\s*[:,\-\u2013\u2014]?\s*\(?\*{0,2}(?P<sev>high|medium|low)\*{0,2}\)?\s*[:\-\u2013\u2014]\s*"
    r"(?P<rest>.+)$", re.IGNORECASE)
_SEVERITY_FIRST = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])\s+\*{0,2}\[?(?P<sev>high|medium|low)\]?\*{0,2}\s*[:\-\u2013\u2014]?\s*`?"
    r"(?P<file>[\w./@+-]+?\.[\w]+)(?::(?P<line>\d+))?`?\s*[:\-\u2013\u2014]\s*(?P<rest>.+)$",
    re.IGNORECASE)


def clean_path(path: str) -> str:
    """A finding's path as the model meant it (it may write `/workspace/...` or `./...`)."""
    return path.strip().strip("`").removeprefix("/workspace/").removeprefix("./")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def place(path: str, root: str) -> str | None:
    """`path` as a normalised path relative to `root` and inside it, or None: a URL, an
    absolute path elsewhere, a `../` out, a backslash or a control character is no place a
    report may point a code-scanning UI or a reader to."""
    path = clean_path(path)
    top = root.rstrip("/") + "/"
    if path.startswith(top):
        path = path[len(top):]
    if (not path or path.startswith("/") or "\\" in path or _SCHEME.match(path)
            or UNSAFE_RE.search(path) or any(c in path for c in "\t\n")):
        return None
    normal = posixpath.normpath(path)
    return None if normal in (".", "..") or normal.startswith("../") else normal


def one_line(text: str) -> str:
    """`text` with every run of white space (line breaks of any kind too) one space."""
    return " ".join(text.split())


def placed(finding: Finding, root: str) -> ReviewFinding:
    """The report's form of a finding the model wrote (see `ReviewFinding`)."""
    file = place(finding.file, root)
    return ReviewFinding(file=file, line=finding.line if file else None,
                         severity=finding.severity,
                         title=one_line(finding.title)[:MAX_TITLE] or "(no title)",
                         body=finding.body.strip(),
                         location_note=None if file else NO_LOCATION)


def _finding(raw: Any) -> Finding | None:
    """A Finding from a loosely shaped object, or None when it has no file or title."""
    if not isinstance(raw, dict):
        return None
    severity = str(raw.get("severity", "medium")).lower()
    severity = _LOOSE_SEVERITY.get(severity, severity)
    file, line = str(raw.get("file") or raw.get("path") or ""), raw.get("line")
    head, _, number = file.rpartition(":")
    if head and number.isdigit() and line is None:  # `a.py:12`, not `https://…`
        file, line = head, int(number)
    title = str(raw.get("title") or raw.get("message") or raw.get("body") or "").strip()
    try:
        return Finding(file=clean_path(file), line=line if isinstance(line, int) else None,
                       severity=severity if severity in SEVERITIES else "medium",
                       title=title.splitlines()[0][:MAX_TITLE] if title else "",
                       body=str(raw.get("body") or raw.get("suggestion") or "")[:MAX_TEXT])
    except ValidationError:
        return None


def _from_json(text: str) -> tuple[str, list[Finding]] | None:
    for start, end, value in json_objects(text):
        if isinstance(value, dict) and isinstance(value.get("findings"), list):
            findings = [f for f in map(_finding, value["findings"]) if f is not None]
            summary = str(value.get("summary") or "").strip()
            rest = (text[:start] + text[end:]).replace("```json", "").replace("```", "").strip()
            return summary or rest, findings
    return None


def _from_lines(text: str) -> tuple[str, list[Finding]]:
    """(the text without its finding lines, the findings those lines hold)."""
    findings, kept = [], []
    for line in text.splitlines():
        match = _LINE_FINDING.match(line) or _SEVERITY_FIRST.match(line)
        if not match:
            kept.append(line)
            continue
        rest = match["rest"].strip()
        title = re.split(r"(?<=[.!?])\s", rest, maxsplit=1)[0]
        findings.append(Finding(file=clean_path(match["file"]), severity=match["sev"].lower(),
                                line=int(match["line"]) if match["line"] else None,
                                title=title[:MAX_TITLE],
                                body=rest[len(title):].strip()[:MAX_TEXT]))
    return "\n".join(kept).strip(), findings


def parse_answer(text: str) -> tuple[str, list[Finding], Literal["json", "text", "none"]]:
    """(summary, findings, source) read from a final answer written as text."""
    found = _from_json(text)
    if found is not None:
        return found[0], found[1], "json"
    summary, findings = _from_lines(text)
    return (summary, findings, "text") if findings else (text.strip(), [], "none")
