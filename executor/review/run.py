"""Running a review with a `Runner`: the prompt (one per part of a long diff), asking once
more when the model forgets `submit_review`, and the findings put in the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executor.agent import RunResult
from executor.context import TARGET_RATIO, ContextWindow, TokenCounter
from executor.errors import AgentError, SandboxAgentError
from executor.hooks import WarningEvent
from executor.messages import Message
from executor.review.diff import MIN_PART_TOKENS, PART_NOTE, collect_diff, split_diff
from executor.review.findings import Finding, SubmitReview, SubmitReviewArgs, parse_answer, placed
from executor.review.report import DiffScope, ReviewReport, ReviewRequest, ToolCallSummary
from executor.runner import Runner
from executor.runreport import error_report

REVIEW_PROMPT = (
    "Review the code of this project{scope}. Inspect the relevant files with the tools first. "
    "Only report problems you have seen in the code. Then call the submit_review tool once "
    "with a one-paragraph summary and your findings, each with the file (relative path), the "
    "line, the severity (high, medium or low), a short title and a concrete suggestion in the "
    "body. After that, reply with a one-sentence final answer."
)


SUBMIT_AGAIN = (
    "You answered without calling submit_review, so your review was not recorded. Call "
    "submit_review now: a one-paragraph summary and every problem you found in the code, each "
    "with its file, line, severity, title and suggested fix (an empty list only if there is "
    "no problem at all)."
)
"""Sent once when the model answers in prose with no findings a report can read: small models
(the embedded 1.5B) did so every time and their reviews came out empty."""


def part_limit(runner: Runner) -> tuple[int, TokenCounter] | None:
    """Tokens one part of a diff may take in `runner`'s window, and the counter it counts
    with: a third of what the window's target leaves beside the system prompt and the tools
    (the rest is for the files the model reads and its replies: with half, the embedded model's
    read of a 260-line file was cut, and it read the file again until the coach stopped it).
    None: no window."""
    agent = runner.agent
    window = agent.fitter if agent is not None else None
    if agent is None or not isinstance(window, ContextWindow):
        return None
    system = window.counter.count(Message.system(agent.system_prompt))
    free = int(window.room() * TARGET_RATIO) - system - window.counter.count_text(REVIEW_PROMPT)
    return max(MIN_PART_TOKENS, free // 3), window.counter


def review_prompt(diff: str | None, scope: DiffScope | None,
                  part: tuple[int, int] = (1, 1)) -> str:
    """The request sent to the model (for part `part[0]` of `part[1]` of the diff)."""
    if scope is None or diff is None:
        return REVIEW_PROMPT.format(scope="")
    prompt = REVIEW_PROMPT.format(scope=f", focusing on these changes since {scope.base}")
    if part[1] > 1:
        prompt += " " + PART_NOTE.format(part=part[0], parts=part[1])
    prompt += f"\n\n```diff\n{diff}```"
    if scope.truncated:
        cut = scope.partial + scope.omitted
        prompt += ("\n\nThe diff was too long to show whole. Not shown (read them with the "
                   f"tools if they matter): {', '.join(cut)}")
    return prompt


def _base_report(runner: Runner, request: ReviewRequest) -> ReviewReport:
    return ReviewReport(status="ok", root=str(request.root), diff_base=request.diff_base,
                        provider=runner.settings.provider, model=runner.model.name)


def no_changes(runner: Runner, request: ReviewRequest, scope: DiffScope) -> ReviewReport:
    """The report when there is nothing to review: no model, no container."""
    report = _base_report(runner, request)
    report.status, report.diff = "no_changes", scope
    report.summary = f"No changes since {request.diff_base}: nothing to review."
    return report


def run_review(runner: Runner, request: ReviewRequest, tool: SubmitReview) -> ReviewReport:
    """Review with `runner` (built read-only, with `tool` among its tools); never raises for
    a failed run: the report then has status error (and the error)."""
    diff, scope = collect_diff(request) if request.diff_base else (None, None)
    if scope is not None and not scope.files:
        return no_changes(runner, request, scope)
    report = _base_report(runner, request)
    report.diff = scope
    try:
        with runner:
            parts = _parts(runner, diff)
            if scope is not None:
                scope.parts = len(parts)
            if len(parts) > 1:
                result = _review_in_parts(runner, parts, scope, tool)
            else:
                result = runner.run(review_prompt(diff, scope))
                if tool.submitted is None and parse_answer(result.answer)[2] == "none":
                    result = _ask_to_submit(runner, result)
    except SandboxAgentError as exc:
        report.status, report.error = "error", error_report(exc)
        report.session = runner.session_name
        return report
    report.session, report.turns = runner.session_name, result.turns
    report.tool_calls = [ToolCallSummary(tool=r.call.name, arguments=r.call.arguments,
                                         ok=r.result.ok) for r in result.tool_calls]
    _read_findings(report, result.answer, tool)
    return report


def _parts(runner: Runner, diff: str | None) -> list[str | None]:
    """The diff in parts that fit the window (one part: the diff as it is)."""
    fit = part_limit(runner) if diff else None
    if diff is None or fit is None:
        return [diff]
    limit, counter = fit
    return list(split_diff(diff, limit, counter)) if counter.count_text(diff) > limit else [diff]


def _review_in_parts(runner: Runner, parts: list[str | None], scope: DiffScope | None,
                     tool: SubmitReview) -> RunResult:
    """One request per part; `tool.submitted` ends up holding every part's findings."""
    summaries: list[str] = []
    findings: list[Finding] = []
    sources: set[str] = set()
    done = RunResult("", 0, [])
    for number, part in enumerate(parts, 1):
        tool.submitted = None
        try:
            result = runner.run(review_prompt(part, scope, (number, len(parts))))
        except AgentError as exc:  # one part going nowhere must not lose the others
            _part_failed(runner, scope, f"part {number} of {len(parts)}: {exc.message}")
            result = _ask_to_submit(runner, RunResult("", 0, []))
        if tool.submitted is None and parse_answer(result.answer)[2] == "none":
            result = _ask_to_submit(runner, result)
        summary, found, source = _part_findings(result.answer, tool)
        summaries += [summary] if summary else []
        findings += [f for f in found if f not in findings]
        sources.add(source)
        done = RunResult(result.answer, done.turns + result.turns,
                         [*done.tool_calls, *result.tool_calls])
    tool.submitted = SubmitReviewArgs.model_construct(
        summary="\n\n".join(summaries), findings=findings)
    return done


def _part_failed(runner: Runner, scope: DiffScope | None, why: str) -> None:
    """Say (on stderr and in the report) that a part's review ended early."""
    runner.hooks.emit(WarningEvent(message=f"the review of {why}"))
    if scope is not None:
        scope.failed_parts.append(why)


def _part_findings(answer: str, tool: SubmitReview) -> tuple[str, list[Finding], str]:
    """(summary, findings, source) of one part's review."""
    if tool.submitted is not None:
        return tool.submitted.summary.strip(), list(tool.submitted.findings), "tool"
    return parse_answer(answer)


def _ask_to_submit(runner: Runner, first: RunResult) -> RunResult:
    """Ask once more for the findings (SUBMIT_AGAIN); the first answer stands if that fails."""
    try:
        again = runner.run(SUBMIT_AGAIN)
    except SandboxAgentError as exc:
        runner.hooks.emit(WarningEvent(
            message=f"asking the model again for its findings failed: {exc.message}"))
        return first
    return RunResult(again.answer or first.answer, first.turns + again.turns,
                     [*first.tool_calls, *again.tool_calls])


def _read_findings(report: ReviewReport, answer: str, tool: SubmitReview) -> None:
    if tool.submitted is not None:
        findings = tool.submitted.findings
        report.summary = tool.submitted.summary.strip() or answer.strip()
        report.findings_source = "tool"
    else:
        report.summary, findings, report.findings_source = parse_answer(answer)
    report.findings = [placed(f, report.root) for f in findings]


def review(root: str | Path, *, diff_base: str | None = None, untracked: bool = True,
           **options: Any) -> ReviewReport:
    """Review `root` read-only; `options` are those of `Runner.build`."""
    tool = SubmitReview()
    extra = list(options.pop("tools", []))
    options.setdefault("skills_for", "review")
    runner = Runner.build(root, read_only=True, tools=[*extra, tool], **options)
    request = ReviewRequest(root=runner.options.root, diff_base=diff_base, untracked=untracked)
    return run_review(runner, request, tool)
