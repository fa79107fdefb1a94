"""`sandbox-agent review`: a read-only, non-interactive review for CI; the CLI only renders.

The review itself (diff, prompt, findings, report) is library code: executor/review.py; the
formats are executor/review/formats.py. Exit codes: 0 when the review ran (also with no
changes to review), 33 with findings at or above `--fail-on`, the error's code when it failed
(the report, with status error, is written all the same).
"""

from __future__ import annotations

import os
import secrets
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from executor.cli.actions import under_actions, workflow_command
from executor.cli.common import cli_errors, echo_result, err_console, to_file
from executor.cli.flags import REVIEW, RunFlags, run_flags
from executor.cli.options import UntrackedOpt
from executor.cli.run import prepare, session_line
from executor.errors import ConfigError, FindingsError, SandboxAgentError
from executor.text import inert_line, markup_safe

if TYPE_CHECKING:  # imported where used: `--help` loads neither pydantic nor httpx
    from executor.review import ReviewReport, Severity


class ReportFormat(StrEnum):
    """Formats of the review report."""

    markdown = "markdown"
    json = "json"
    sarif = "sarif"
    github = "github"
    codequality = "codequality"


class FailOn(StrEnum):
    """Severities `--fail-on` takes."""

    low = "low"
    medium = "medium"
    high = "high"


@run_flags(REVIEW)
@cli_errors
def review(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the report here (default or -: stdout); "
                     "a link at that name is replaced, never followed.",
                     dir_okay=False, show_default=False),
    ] = None,
    fmt: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", help="Report format: markdown, json (docs/REVIEW.md), "
                     "sarif (SARIF 2.1.0), github (workflow annotations) or codequality "
                     "(GitLab Code Quality)."),
    ] = ReportFormat.markdown,
    diff_base: Annotated[
        str | None,
        typer.Option("--diff-base", help="Review only the changes since this git ref; none: "
                     "an empty report, exit 0.", show_default=False),
    ] = None,
    untracked: UntrackedOpt = True,
    fail_on: Annotated[
        FailOn | None,
        typer.Option("--fail-on", help="Exit 33 when a finding has this severity or worse.",
                     show_default=False),
    ] = None,
    *,
    flags: RunFlags,
) -> None:
    """Review the project (--root) read-only and non-interactively (for CI): a report with
    structured findings.

    The container sees the project read-only and no write or shell tool is offered. Under
    GitHub Actions (GITHUB_ACTIONS=true) the findings are also printed as annotations.
    """
    from executor.review import ReviewRequest, SubmitReview, run_review

    output = to_file(output)
    _check_output(output)
    tool = SubmitReview()
    options = flags.options() | {"read_only": True, "tools": [tool], "skills_for": "review"}
    runner, view = prepare(flags, options, interactive=False)
    runner.hooks.subscribe(lambda event: session_line(runner), "run_start")
    view.thinking()
    report = run_review(runner, ReviewRequest(root=flags.root, diff_base=diff_base,
                                              untracked=untracked), tool)
    view.close()
    _publish(report, fmt, output)
    _exit(report, fail_on)


def _publish(report: ReviewReport, fmt: ReportFormat, output: Path | None) -> None:
    """The report in its format (to --output or stdout), and annotations under Actions."""
    from executor.review.formats import github_annotations

    text = _render(report, fmt)
    annotate = fmt is not ReportFormat.github and os.environ.get("GITHUB_ACTIONS") == "true"
    if output is not None:
        _write(output, text)
    elif fmt is ReportFormat.github and under_actions():  # the annotations are meant for it
        *annotations, summary = text.split("\n")
        for line in annotations:
            workflow_command(line)
        echo_result(summary)
    else:
        _print_untrusted(text, json_text=fmt in (ReportFormat.json, ReportFormat.sarif,
                                                 ReportFormat.codequality))
    if annotate:
        for line in github_annotations(report):
            # On stdout only when the report is not there (a JSON file must stay JSON).
            workflow_command(line, stderr=output is None)
    _note_coverage(report)


def _render(report: ReviewReport, fmt: ReportFormat) -> str:
    from executor.review import one_line
    from executor.review.formats import (
        github_annotations,
        to_code_quality,
        to_json,
        to_markdown,
        to_sarif,
    )

    if fmt is ReportFormat.json:
        return to_json(report)
    if fmt is ReportFormat.codequality:
        return to_code_quality(report)
    if fmt is ReportFormat.sarif:
        return to_sarif(report)
    if fmt is ReportFormat.github:
        lines = github_annotations(report)
        summary = one_line(report.summary)[:500]
        return "\n".join([*lines, f"review: {len(report.findings)} finding(s). {summary}"])
    return to_markdown(report)


def _print_untrusted(text: str, *, json_text: bool) -> None:
    """The report on stdout; under Actions fenced so none of its lines runs as a command."""
    if not under_actions():
        echo_result(text, json_text=json_text)
        return
    token = secrets.token_hex(16)  # the model cannot guess it to end the fence early
    workflow_command(f"::stop-commands::{token}")  # stdout is guarded too (cli/actions.py)
    echo_result(text, json_text=json_text)
    workflow_command(f"::{token}::")


def _write(output: Path, text: str) -> None:
    from executor.state import replacing

    try:  # a link the repository ships at that name is replaced, never followed
        with replacing(output, 0o666) as out:  # the umask's mode, as a plain write
            out.write(text + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {output}: {exc.strerror}") from exc
    err_console.print(f"[dim]report written to {markup_safe(str(output), line=True)}[/]")


def _note_coverage(report: ReviewReport) -> None:
    """One line on stderr when the model did not see the whole diff."""
    diff = report.diff
    if diff is not None and diff.truncated:
        cut = ", ".join(diff.partial + diff.omitted)
        err_console.print(f"[yellow]warning:[/] the diff was cut at {diff.included_chars} of "
                          f"{diff.total_chars} characters; not shown whole: "
                          f"{markup_safe(cut, line=True)}")


def _exit(report: ReviewReport, fail_on: FailOn | None) -> None:
    """The error's code for a failed review; 33 for findings at or above --fail-on."""
    if report.status == "error" and report.error is not None:
        error = SandboxAgentError(report.error.message, fix=report.error.fix)
        error.exit_code = report.error.exit_code
        raise error
    if report.status == "no_changes":
        err_console.print(f"[dim]{markup_safe(report.summary, line=True)}[/]")
        return
    severity: Severity | None = fail_on.value if fail_on else None
    worst = report.at_or_above(severity) if severity else []
    if worst:
        names = ", ".join(inert_line(f.where) for f in worst[:5])
        raise FindingsError(f"{len(worst)} finding(s) at or above {severity}: {names}",
                            fix=f"fix them, or raise --fail-on above {severity}")


def _check_output(output: Path | None) -> None:
    """Fail before the review runs, not after, when the report cannot be written there."""
    from executor.state import check_replaceable

    if output is None:
        return
    if not output.parent.is_dir():
        raise ConfigError(
            f"cannot write the report to {output}: {output.parent} is not a directory",
            fix="create the directory first, or pass another --output",
        )
    try:  # a FIFO there would hang the job; a directory cannot take the report
        check_replaceable(output)
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {output}: {exc.strerror}",
                          fix="remove it, or pass another --output") from None
