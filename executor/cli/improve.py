"""`sandbox-agent improve`: a read-only review, then a fix session on its findings in a copy
workspace. It ends with a pending changeset for `diff` / `apply`: the tree is never touched."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.cli.common import cli_errors, err_console, out_console, real_console
from executor.cli.flags import IMPROVE, RunFlags, run_flags
from executor.cli.options import UntrackedOpt
from executor.cli.run import prepare, session_line, show_changes, start
from executor.errors import ConfigError, SandboxAgentError
from executor.signals import cleaned_up_whole
from executor.text import inert_line, markup_safe

if TYPE_CHECKING:
    from executor.review import ReviewReport, ReviewRequest
    from executor.runner import Runner

FIX_PROMPT = (
    "A code review of this project found the problems listed below. Fix each one with a small, "
    "exact change, check your work (run the project's tests if it has any), and change nothing "
    "else. Then answer with one line per finding: fixed, or why not.\n\nReview summary: "
    "{summary}\n\nFindings:\n{findings}"
)


@run_flags(IMPROVE)
@cli_errors
def improve(
    diff_base: Annotated[
        str | None,
        typer.Option("--diff-base", help="Review (and fix) only the changes since this git ref.",
                     show_default=False),
    ] = None,
    untracked: UntrackedOpt = True,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Approve the fix session's writes and commands up "
                     "front (they happen in the copy; nothing is applied). Needed without a "
                     "terminal."),
    ] = False,
    *,
    flags: RunFlags,
) -> None:
    """Review the project (--root) read-only, then fix the findings in a copy of it.

    The fix session works on a copy workspace (docs/WORKSPACES.md): your tree is untouched, and
    the changes wait for `sandbox-agent diff` and `sandbox-agent apply`. Without a terminal
    the fix session's writes need --yes; improve never applies anything by itself.
    """
    from executor.review import ReviewRequest

    at_terminal = bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)
    if not (yes or at_terminal):
        raise ConfigError("without a terminal, improve needs --yes for the fix session's writes "
                          "(they go to a copy of the project; nothing is applied)",
                          fix="add --yes, then read `sandbox-agent diff` and run "
                          "`sandbox-agent apply`")
    common = flags.options()
    report, review = _review(flags, common, ReviewRequest(root=flags.root, diff_base=diff_base,
                                                          untracked=untracked))
    if not report.findings:
        err_console.print(f"[dim]nothing to improve: {markup_safe(report.summary, line=True)}[/]")
        return
    _show_findings(report)
    # The fix is a later phase of the same run: what the review read at its start (settings,
    # policy, skills, AGENTS.md) is handed over as values, never read again.
    fix = {k: v for k, v in common.items() if k != "policy_file"} | {
        "workspace": "copy", "yes": yes, "settings": review.settings, "basis": review.basis}
    _fix(flags, fix, report, at_terminal=at_terminal)


def _review(flags: RunFlags, common: dict[str, Any], request: ReviewRequest
            ) -> tuple[ReviewReport, Runner]:
    """The read-only review (as `sandbox-agent review` runs it), and its runner; raises when
    it failed."""
    from executor.review import SubmitReview, run_review

    tool = SubmitReview()
    options = common | {"read_only": True, "tools": [tool], "skills_for": "review"}
    runner, view = prepare(flags, options, interactive=False)
    runner.hooks.subscribe(lambda event: session_line(runner), "run_start")
    view.thinking()
    report = run_review(runner, request, tool)
    view.close()
    if report.status == "error" and report.error is not None:
        error = SandboxAgentError(f"the review failed: {report.error.message}",
                                  fix=report.error.fix)
        error.exit_code = report.error.exit_code
        raise error
    return report, runner


def _show_findings(report: ReviewReport) -> None:
    err_console.print(f"review: {len(report.findings)} finding(s) to fix", markup=False)
    for f in report.findings:
        err_console.print(f"  {f.severity} {inert_line(f.where)} "
                          f"{inert_line(f.title)}", markup=False, highlight=False)


def fix_prompt(report: ReviewReport) -> str:
    """The fix session's request: the review's summary and every finding."""
    findings = "\n".join(
        f"{n}. [{f.severity}] {f.where} {f.title}" + (f"\n   {f.body}" if f.body
                                                                     else "")
        for n, f in enumerate(report.findings, 1))
    return FIX_PROMPT.format(summary=report.summary or "(none)", findings=findings)


def _fix(flags: RunFlags, options: dict[str, Any], report: ReviewReport, *,
         at_terminal: bool) -> None:
    """The fix session in a copy workspace; its changes stay pending (shown, never applied)."""
    from executor.ui import show_answer

    runner, view = prepare(flags, options, interactive=at_terminal)
    try:
        with cleaned_up_whole(runner):
            start(runner, view)
            view.begin()
            result = runner.run(fix_prompt(report))
    finally:
        view.close()
        show_changes(runner)
    show_answer(result.answer, real_console(out_console))
    err_console.print(f"[dim]done · {markup_safe(view.summary())}[/]")
