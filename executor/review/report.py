"""The review report (schema version 2, docs/REVIEW.md): what was asked, what part of the
diff the review saw, and what it found."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from executor.review.findings import SEVERITIES, ReviewFinding, Severity
from executor.runreport import ErrorReport

SCHEMA_VERSION = 2
"""Version of the review report (docs/REVIEW.md)."""


MAX_DIFF_CHARS = 60_000
"""Diff characters put in the prompt; the rest is named, and the model may read it with tools."""
MAX_UNTRACKED_BYTES = 200_000
"""An untracked file larger than this is listed, not inlined."""


class DiffScope(BaseModel):
    """What part of the changes the review saw in its prompt."""

    base: str
    files: list[str] = Field(default_factory=list)
    """Every changed file (untracked ones included when asked for)."""
    untracked: list[str] = Field(default_factory=list)
    """Files git does not track yet, reviewed as new files."""
    included: list[str] = Field(default_factory=list)
    """Files whose whole diff is in the prompt."""
    partial: list[str] = Field(default_factory=list)
    """Files whose diff was cut."""
    omitted: list[str] = Field(default_factory=list)
    """Files whose diff did not fit at all (named in the prompt, readable with the tools)."""
    total_chars: int = 0
    included_chars: int = 0
    parts: int = 1
    """Requests the diff was reviewed in (more than one when it did not fit the window)."""
    failed_parts: list[str] = Field(default_factory=list)
    """Parts whose review ended without findings, and why (`part 2 of 3: ...`)."""

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return bool(self.partial or self.omitted)


class ReviewRequest(BaseModel):
    """What to review."""

    root: Path
    diff_base: str | None = None
    """Review only the changes since this git ref (None: the whole project)."""
    untracked: bool = True
    """With a diff base: also review files git does not track yet."""
    max_diff_chars: int = MAX_DIFF_CHARS


class ToolCallSummary(BaseModel):
    """A tool call the review made."""

    tool: str
    arguments: dict[str, Any]
    ok: bool


class ReviewReport(BaseModel):
    """The review report (schema version 2, docs/REVIEW.md)."""

    schema_version: int = SCHEMA_VERSION
    status: Literal["ok", "no_changes", "error"]
    root: str
    diff_base: str | None = None
    provider: str = ""
    model: str = ""
    session: str | None = None
    turns: int = 0
    summary: str = ""
    findings: list[ReviewFinding] = Field(default_factory=list)
    findings_source: Literal["tool", "json", "text", "none"] = "none"
    """Where the findings were read from (see `executor.review`'s docstring)."""
    diff: DiffScope | None = None
    tool_calls: list[ToolCallSummary] = Field(default_factory=list)
    error: ErrorReport | None = None

    def at_or_above(self, severity: Severity) -> list[ReviewFinding]:
        """The findings of `severity` or worse."""
        floor = SEVERITIES.index(severity)
        return [f for f in self.findings if SEVERITIES.index(f.severity) >= floor]
