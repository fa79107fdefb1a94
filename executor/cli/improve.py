"""`sandbox-agent improve`: a read-only review, then a fix session on its findings in a copy
workspace. It ends with a pending changeset for `diff` / `apply`: the tree is never touched."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.cli.common import RootOption, cli_errors, err_console, out_console, real_console
from executor.cli.options import (
    AuditRequiredOpt,
    CopyLimitOpt,
    ExcludeOpt,
    HostOpt,
    ImageOpt,
    MaxRetriesOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    ModelOpt,
    NoAuditOpt,
    NoInstructionsOpt,
    PolicyOpt,
    ProjectSkillsOpt,
    ProtocolOpt,
    ProviderOpt,
    RuntimeOpt,
    SkillOpt,
    SkillsExcludeOpt,
    SkillsIncludeOpt,
    SkillsOpt,
    StreamOpt,
    ThinkOpt,
    TimeoutOpt,
    TraceOpt,
    UntrackedOpt,
    prompt_options,
    skill_options,
)
from executor.cli.run import _prepare, _settings, _start, session_line, show_changes
from executor.errors import ConfigError, SandboxAgentError
from executor.signals import cleaned_up_whole
from executor.text import inert_line, markup_safe

if TYPE_CHECKING:
    from executor.review import ReviewReport
    from executor.runner import Runner

FIX_PROMPT = (
    "A code review of this project found the problems listed below. Fix each one with a small, "
    "exact change, check your work (run the project's tests if it has any), and change nothing "
    "else. Then answer with one line per finding: fixed, or why not.\n\nReview summary: "
    "{summary}\n\nFindings:\n{findings}"
)


@cli_errors
def improve(
    root: RootOption = Path("."),
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
    provider: ProviderOpt = None,
    model: ModelOpt = None,
    host: HostOpt = None,
    tool_protocol: ProtocolOpt = None,
    stream: StreamOpt = None,
    think: ThinkOpt = None,
    trace: TraceOpt = False,
    max_turns: MaxTurnsOpt = None,
    image: ImageOpt = None,
    runtime: RuntimeOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    max_tokens: MaxTokensOpt = None,
    policy: PolicyOpt = None,
    no_audit: NoAuditOpt = False,
    audit_required: AuditRequiredOpt = False,
    no_project_instructions: NoInstructionsOpt = False,
    skill: SkillOpt = None,
    skills: SkillsOpt = None,
    skills_include: SkillsIncludeOpt = None,
    skills_exclude: SkillsExcludeOpt = None,
    project_skills: ProjectSkillsOpt = None,
    exclude: ExcludeOpt = None,
    copy_limit: CopyLimitOpt = None,
) -> None:
    """Review the project (--root) read-only, then fix the findings in a copy of it.

    The fix session works on a copy workspace (docs/WORKSPACES.md): your tree is untouched, and
    the changes wait for `sandbox-agent diff` and `sandbox-agent apply`. Without a terminal
    the fix session's writes need --yes; improve never applies anything by itself.
    """
    root = root.resolve()
    at_terminal = bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)
    if not (yes or at_terminal):
        raise ConfigError("without a terminal, improve needs --yes for the fix session's writes "
                          "(they go to a copy of the project; nothing is applied)",
                          fix="add --yes, then read `sandbox-agent diff` and run "
                          "`sandbox-agent apply`")
    common = _settings(
        provider=provider, model=model, host=host, tool_protocol=tool_protocol, stream=stream,
        think=think, max_turns=max_turns, image=image, runtime=runtime, timeout=timeout,
        max_retries=max_retries,
        max_tokens=max_tokens, policy_file=policy, copy_exclude=exclude, copy_limit=copy_limit,
    ) | {"audit_required": audit_required} | prompt_options(root, None, no_project_instructions) \
        | skill_options(skill, skills, skills_include, skills_exclude, project_skills)
    report, review = _review(root, common, diff_base, untracked, stream=stream, trace=trace,
                             audit=not no_audit)
    if not report.findings:
        err_console.print(f"[dim]nothing to improve: {markup_safe(report.summary, line=True)}[/]")
        return
    _show_findings(report)
    # The fix is a later phase of the same run: what the review read at its start (settings,
    # policy, skills, AGENTS.md) is handed over as values, never read again.
    fix = {k: v for k, v in common.items() if k != "policy_file"} | {
        "workspace": "copy", "yes": yes, "settings": review.settings, "basis": review.basis}
    _fix(root, fix, report, stream=stream, trace=trace, audit=not no_audit,
         at_terminal=at_terminal)


def _review(root: Path, common: dict[str, Any], diff_base: str | None, untracked: bool, *,
            stream: bool | None, trace: bool, audit: bool) -> tuple[ReviewReport, Runner]:
    """The read-only review (as `sandbox-agent review` runs it), and its runner; raises when
    it failed."""
    from executor.review import ReviewRequest, SubmitReview, run_review

    tool = SubmitReview()
    options = common | {"read_only": True, "tools": [tool], "skills_for": "review"}
    runner, view = _prepare(root, options, stream=stream, trace=trace, audit=audit,
                            interactive=False)
    runner.hooks.subscribe(lambda event: session_line(runner), "run_start")
    view.thinking()
    report = run_review(runner, ReviewRequest(root=root, diff_base=diff_base,
                                              untracked=untracked), tool)
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


def _fix(root: Path, options: dict[str, Any], report: ReviewReport, *, stream: bool | None,
         trace: bool, audit: bool, at_terminal: bool) -> None:
    """The fix session in a copy workspace; its changes stay pending (shown, never applied)."""
    from executor.ui import show_answer

    runner, view = _prepare(root, options, stream=stream, trace=trace, audit=audit,
                            interactive=at_terminal)
    try:
        with cleaned_up_whole(runner):
            _start(runner, view)
            view.begin()
            result = runner.run(fix_prompt(report))
    finally:
        view.close()
        show_changes(runner)
    show_answer(result.answer, real_console(out_console))
    err_console.print(f"[dim]done · {markup_safe(view.summary())}[/]")
