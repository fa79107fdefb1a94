"""A `ReviewReport` as Markdown, JSON, SARIF 2.1.0 and GitHub workflow annotations.

Everything a finding holds was written by the model. In SARIF and JSON it is data (escaped by
the JSON encoder); in GitHub annotations it is escaped by GitHub's own rules, so a finding
cannot end its annotation early or issue a workflow command of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from executor import __version__
from executor.review.findings import ReviewFinding, Severity, one_line
from executor.review.report import ReviewReport
from executor.text import inert_line

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS: dict[Severity, Literal["error", "warning", "note"]] = {
    "high": "error", "medium": "warning", "low": "note"}
_COMMANDS: dict[Severity, str] = {"high": "error", "medium": "warning", "low": "notice"}


# -- Markdown ------------------------------------------------------------------------------------


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def to_markdown(report: ReviewReport) -> str:
    """A report for people: summary, findings by severity, what was covered, the facts.

    Every string in it but our own words goes through `md_text` or `md_code`: one line, no
    Markdown or HTML of its own, so a model's title cannot add a line, a verdict or a comment.
    """
    scope = f" (changes since {md_code(report.diff_base)})" if report.diff_base else ""
    parts = [f"# Code review of {md_code(report.root)}{scope}"]
    facts = (f"_model {md_text(report.model)} ({md_text(report.provider)}), "
             f"session {md_text(report.session or 'none kept')}")
    if report.status == "error" and report.error is not None:
        return "\n\n".join([*parts, f"**Review failed:** {md_text(report.error.message)}",
                             facts + "_"])
    parts.append(md_text(report.summary, paragraph=True) or "(no summary)")
    if report.findings:
        parts.append("## Findings\n\n" + "\n".join(_markdown_finding(f) for f in _ordered(
            report.findings)))
    parts += _coverage(report)
    tools = ", ".join(md_text(t) for t in sorted({c.tool for c in report.tool_calls})) or "none"
    parts.append(f"---\n{facts}, {_plural(report.turns, 'turn')}, tools used: {tools}_")
    return "\n\n".join(parts)


# `_` between two letters or digits opens no emphasis (CommonMark): `read_file` stays legible.
_MD_INLINE = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")
_MD_BLOCK_START = re.compile(r"^(?:[#=+-]|\d+[.)])")


def md_text(text: str, *, paragraph: bool = False) -> str:
    """`text` as inert Markdown on one line: HTML's `<`, `>`, `&` as entities, Markdown's
    inline marks backslash-escaped, control characters shown escaped. `paragraph`: it starts
    a line, so what would open a heading, a list or a rule there is escaped too."""
    text = inert_line(one_line(text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_INLINE.sub(lambda m: "\\" + m.group(), text)
    return "\\" + text if paragraph and _MD_BLOCK_START.match(text) else text


def md_code(text: str) -> str:
    """`text` as a Markdown code span (nothing in it is read as Markdown or HTML)."""
    text = inert_line(one_line(text))
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _ordered(findings: list[ReviewFinding]) -> list[ReviewFinding]:
    order = {"high": 0, "medium": 1, "low": 2}
    return sorted(findings, key=lambda f: order[f.severity])


def _markdown_finding(finding: ReviewFinding) -> str:
    if finding.file is None:
        where = f"(no location: {finding.location_note or 'none given'})"
    else:
        where = md_code(f"{finding.file}:{finding.line}" if finding.line else finding.file)
    body = f" — {md_text(finding.body)}" if finding.body.strip() else ""
    return f"- **{finding.severity}** {where}: {md_text(finding.title)}{body}"


def _coverage(report: ReviewReport) -> list[str]:
    diff = report.diff
    if diff is None or not diff.truncated:
        return []
    cut = ", ".join(md_code(name) for name in diff.partial + diff.omitted)
    return [f"**The diff was cut** at {diff.included_chars} of {diff.total_chars} characters: "
            f"{len(diff.included)} of {len(diff.files)} files shown whole; cut: {cut}."]


# -- JSON ----------------------------------------------------------------------------------------


def to_json(report: ReviewReport) -> str:
    """The report as JSON (docs/REVIEW.md)."""
    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False)


# -- SARIF 2.1.0 ---------------------------------------------------------------------------------


class _Sarif(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class ArtifactLocation(_Sarif):
    """SARIF §3.4: a file, relative to the root named by `uriBaseId`."""

    uri: str
    uri_base_id: str = Field("%SRCROOT%", alias="uriBaseId")


class Region(_Sarif):
    """SARIF §3.30 (1-based lines)."""

    start_line: int = Field(alias="startLine", ge=1)


class PhysicalLocation(_Sarif):
    """SARIF §3.29."""

    artifact_location: ArtifactLocation = Field(alias="artifactLocation")
    region: Region | None = None


class Location(_Sarif):
    """SARIF §3.28."""

    physical_location: PhysicalLocation = Field(alias="physicalLocation")


class SarifMessage(_Sarif):
    """SARIF §3.11."""

    text: str


class Result(_Sarif):
    """SARIF §3.27: one finding."""

    rule_id: str = Field(alias="ruleId")
    level: Literal["error", "warning", "note"]
    message: SarifMessage
    locations: list[Location]
    properties: dict[str, Any] = Field(default_factory=dict)


class ReportingDescriptor(_Sarif):
    """SARIF §3.49: a rule."""

    id: str
    name: str
    short_description: SarifMessage = Field(alias="shortDescription")
    default_configuration: dict[str, str] = Field(alias="defaultConfiguration")


class ToolComponent(_Sarif):
    """SARIF §3.19: the tool's driver."""

    name: str
    version: str
    # No informationUri: the project has no home page of its own to point to (a package index
    # page of the same name belongs to another project).
    rules: list[ReportingDescriptor]


class SarifTool(_Sarif):
    """SARIF §3.18."""

    driver: ToolComponent


class Notification(_Sarif):
    """SARIF §3.58: here, a finding with no location (code scanning refuses such a result)."""

    level: Literal["error", "warning", "note"]
    message: SarifMessage
    descriptor: dict[str, str]


class Invocation(_Sarif):
    """SARIF §3.20."""

    execution_successful: bool = Field(alias="executionSuccessful")
    tool_execution_notifications: list[Notification] = Field(
        default_factory=list, alias="toolExecutionNotifications")


class Run(_Sarif):
    """SARIF §3.14."""

    tool: SarifTool
    results: list[Result]
    invocations: list[Invocation] | None = None
    original_uri_base_ids: dict[str, dict[str, str]] = Field(alias="originalUriBaseIds")
    properties: dict[str, Any] = Field(default_factory=dict)


class SarifLog(_Sarif):
    """SARIF §3.13: the top-level object."""

    schema_uri: str = Field(SARIF_SCHEMA, alias="$schema")
    version: Literal["2.1.0"] = "2.1.0"
    runs: list[Run]


def _rule_id(severity: Severity) -> str:
    return f"sandbox-agent/review/{severity}"


def _rules() -> list[ReportingDescriptor]:
    return [ReportingDescriptor(
        id=_rule_id(s), name=f"Review{s.capitalize()}",
        short_description=SarifMessage(text=f"A {s}-severity problem found in code review"),
        default_configuration={"level": _LEVELS[s]}) for s in ("high", "medium", "low")]


def _message(finding: ReviewFinding) -> SarifMessage:
    body = finding.body.strip()
    return SarifMessage(text=finding.title + (f"\n\n{body}" if body else ""))


def _result(finding: ReviewFinding) -> Result:
    assert finding.file is not None
    region = Region(start_line=finding.line) if finding.line else None
    return Result(
        rule_id=_rule_id(finding.severity), level=_LEVELS[finding.severity],
        message=_message(finding),
        locations=[Location(physical_location=PhysicalLocation(
            artifact_location=ArtifactLocation(uri=quote(finding.file)), region=region))],
        properties={"severity": finding.severity, "title": finding.title},
    )


def _unplaced(findings: list[ReviewFinding]) -> list[Invocation] | None:
    """The findings without a location, as notifications of the one invocation (a result
    must have a location for code scanning, and no file outside the root may be one)."""
    notes = [Notification(level=_LEVELS[f.severity], message=_message(f),
                          descriptor={"id": _rule_id(f.severity)})
             for f in findings if f.file is None]
    return [Invocation(execution_successful=True, tool_execution_notifications=notes)] \
        if notes else None


def to_sarif_log(report: ReviewReport) -> SarifLog:
    """The report as a SARIF 2.1.0 log: one run, one result per finding with a location."""
    root = report.root.rstrip("/") + "/"
    driver = ToolComponent(name="sandbox-agent", version=__version__, rules=_rules())
    properties = {"status": report.status, "summary": report.summary, "model": report.model,
                  "diffBase": report.diff_base,
                  "diff": report.diff.model_dump(mode="json") if report.diff else None}
    run = Run(tool=SarifTool(driver=driver),
              results=[_result(f) for f in report.findings if f.file is not None],
              invocations=_unplaced(report.findings),
              original_uri_base_ids={"%SRCROOT%": {"uri": f"file://{quote(root)}"}},
              properties=properties)
    return SarifLog(runs=[run])


def to_sarif(report: ReviewReport) -> str:
    """SARIF 2.1.0 JSON text."""
    log = to_sarif_log(report).model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(log, indent=2, ensure_ascii=False)


# -- GitLab Code Quality -----------------------------------------------------------------------

_CODE_QUALITY: dict[Severity, str] = {"high": "critical", "medium": "major", "low": "minor"}


def to_code_quality(report: ReviewReport) -> str:
    """GitLab's Code Quality report (a JSON list, `artifacts:reports:codequality`): one issue
    per finding with a file; a finding without one is left out (the JSON report keeps it)."""
    issues = []
    for f in _ordered(report.findings):
        if f.file is None:
            continue
        key = "\0".join([f.severity, f.file, str(f.line or ""), f.title])
        issues.append({
            "description": f.title + (f" — {one_line(f.body)}" if f.body.strip() else ""),
            "check_name": _rule_id(f.severity),
            "fingerprint": hashlib.sha256(key.encode()).hexdigest(),
            "severity": _CODE_QUALITY[f.severity],
            "location": {"path": f.file, "lines": {"begin": f.line or 1}},
        })
    return json.dumps(issues, indent=2, ensure_ascii=False)


# -- GitHub workflow commands --------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (%, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: also `:` and `,` escaped."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(report: ReviewReport) -> list[str]:
    """One `::error|warning|notice file=…,line=…,title=…::message` line per finding."""
    lines = []
    for f in _ordered(report.findings):
        props = [f"file={escape_property(f.file)}"] if f.file else []
        if f.file and f.line:
            props.append(f"line={f.line}")
        props.append(f"title={escape_property(f'{f.severity}: {f.title}')}")
        message = f.body.strip() or f.title
        lines.append(f"::{_COMMANDS[f.severity]} {','.join(props)}::{escape_data(message)}")
    return lines
