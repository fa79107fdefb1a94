"""Code review as a library: the diff to review, the prompt, structured findings, the report.

    with Runner.build(root, read_only=True, tools=[tool := SubmitReview()], ...) as runner:
        report = run_review(runner, ReviewRequest(root=root, diff_base="origin/main"), tool)

or simply `review(root, diff_base=..., **runner_options)`. The CLI (`sandbox-agent review`) only
renders the `ReviewReport` (`executor.review.formats`: markdown, JSON, SARIF, GitHub).

Findings come, in order of preference, from
1. the `submit_review` tool: its arguments are a `Finding` list, so the json and constrained
   tool protocols force schema-valid findings and native tool calling validates them;
2. a JSON object with `findings` in the final answer;
3. lines like `- src/app.py:12 high: title` in the final answer.
Everything in a finding was written by the model: print it inert (executor/text.py).

The diff is taken with git on the host, hardened against a repository's own configuration
(no fsmonitor, no external diff or textconv programs, no hooks), and capped: what was cut is
reported (`DiffScope`). Untracked files are reviewed as new files unless asked otherwise.

A diff longer than half the room the model's window leaves beside the system prompt and the
tools is reviewed in parts (`split_diff`: whole files packed together, a bigger file by hunks,
a bigger hunk by lines), one request each in the same conversation, the findings of all parts
merged: nothing of the diff is dropped to fit, and no request is longer than the window.

The rooms: `findings` (the schema, the `submit_review` tool, reading findings out of text),
`report` (`ReviewRequest`, `DiffScope`, `ReviewReport`), `shadow` (git on the host through a
git dir of our own), `diff` (collecting and splitting the diff), `run` (`run_review`,
`review`), `formats` (the report rendered). This face re-exports the public names of all but
`formats`, which only the CLI and report writers need.
"""


from executor.review.diff import (
    MIN_PART_TOKENS,
    PART_NOTE,
    collect_diff,
    split_diff,
)
from executor.review.findings import (
    MAX_FINDINGS,
    MAX_TEXT,
    MAX_TITLE,
    NO_LOCATION,
    SEVERITIES,
    SUBMITTED_RESULT,
    Finding,
    ReviewFinding,
    Severity,
    SubmitReview,
    SubmitReviewArgs,
    clean_path,
    one_line,
    parse_answer,
    place,
    placed,
)
from executor.review.report import (
    MAX_DIFF_CHARS,
    MAX_UNTRACKED_BYTES,
    SCHEMA_VERSION,
    DiffScope,
    ReviewReport,
    ReviewRequest,
    ToolCallSummary,
)
from executor.review.run import (
    REVIEW_PROMPT,
    SUBMIT_AGAIN,
    no_changes,
    part_limit,
    review,
    review_prompt,
    run_review,
)
from executor.review.shadow import config_values_of, git_diff

__all__ = [
    "MAX_DIFF_CHARS", "MAX_FINDINGS", "MAX_TEXT", "MAX_TITLE", "MAX_UNTRACKED_BYTES",
    "MIN_PART_TOKENS", "NO_LOCATION", "PART_NOTE", "REVIEW_PROMPT", "SCHEMA_VERSION",
    "SEVERITIES", "SUBMITTED_RESULT", "SUBMIT_AGAIN", "DiffScope", "Finding", "ReviewFinding",
    "ReviewReport", "ReviewRequest", "Severity", "SubmitReview", "SubmitReviewArgs",
    "ToolCallSummary", "clean_path", "collect_diff", "config_values_of", "git_diff",
    "no_changes", "one_line", "parse_answer", "part_limit", "place", "placed", "review",
    "review_prompt", "run_review", "split_diff",
]
