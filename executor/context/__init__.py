"""The context window: counting tokens, choosing the budget, and fitting the conversation in it.

Trimming is a pure function `list[Message] -> list[Message]` (like pydantic-ai's history
processors): it never mutates its input; unchanged messages are shared, changed ones are copies.

Sliding window (`trim`): the conversation is cut into *units* — one message, or an assistant
message that calls tools together with all of its results — so a call and its result are kept or
dropped together. System messages and the latest user message are pinned. Unpinned units are
kept newest first while they fit under `target_ratio * budget`; everything older is dropped and
replaced by ONE system note ``[N earlier messages omitted to fit the context window]`` at the place
of the first dropped message (a system note, not a user one, so strict templates keep their
user/assistant alternation). The newest unit, or one holding a message larger than the whole
target, is truncated to fit rather than dropped. When the pinned messages alone do not fit, the
biggest of them are truncated. Truncation keeps the head and the tail of a text around a visible
``[... truncated N tokens to fit the context window ...]`` marker.

Summarize (`summarize_trim`): the same plan, but the dropped messages go to a summarizer and its
answer replaces them as one system message; if the summarizer fails, plain `trim` is used.

In the agent loop (tool specs share the window, so they come off the budget):

    counter = TokenCounter()                    # one per run: it caches counts and calibration
    budget = resolve_budget(settings.max_tokens, model.context_length())
    history = pair_tool_results(store.load())   # on resume: no call left without a result
    fitted = trim(history, budget - counter.count_tools(tools), counter)
    reply = model.chat(fitted, tools)
    if reply.usage.prompt_tokens:
        estimate = counter.count_messages(fitted) + counter.count_tools(tools)
        counter.calibrate(estimate, reply.usage.prompt_tokens)

The rooms: `tokens` (`TokenCounter`, the budget), `truncation` (cutting texts and messages),
`trimming` (the plan, `trim`, `summarize_trim`), `repair` (`pair_tool_results`), `window`
(`ContextWindow`). This face re-exports their public names.
"""


from executor.context.repair import INTERRUPTED_RESULT, pair_tool_results
from executor.context.tokens import (
    CHARS_PER_TOKEN,
    DEFAULT_BUDGET,
    DEFAULT_ENCODING,
    MESSAGE_OVERHEAD,
    MIN_CALIBRATION_TOKENS,
    RATIO_RANGE,
    TARGET_RATIO,
    TOOL_CALL_OVERHEAD,
    UNCALIBRATED_RATIO,
    TokenCounter,
    Tokenizer,
    counter_for,
    resolve_budget,
)
from executor.context.trimming import (
    OMITTED_NOTE,
    SUMMARY_HEADER,
    SUMMARY_MAX_TOKENS,
    CachedSummarizer,
    Summarizer,
    omitted_note,
    summarize_trim,
    trim,
)
from executor.context.truncation import TRUNCATION_MARKER, truncate_message, truncate_text
from executor.context.window import RETRY_MARGIN, ContextWindow

__all__ = [
    "CHARS_PER_TOKEN", "DEFAULT_BUDGET", "DEFAULT_ENCODING", "INTERRUPTED_RESULT",
    "MESSAGE_OVERHEAD", "MIN_CALIBRATION_TOKENS", "OMITTED_NOTE", "RATIO_RANGE", "RETRY_MARGIN",
    "SUMMARY_HEADER", "SUMMARY_MAX_TOKENS", "TARGET_RATIO", "TOOL_CALL_OVERHEAD",
    "TRUNCATION_MARKER", "UNCALIBRATED_RATIO", "CachedSummarizer", "ContextWindow",
    "Summarizer", "TokenCounter", "Tokenizer", "counter_for", "omitted_note",
    "pair_tool_results", "resolve_budget", "summarize_trim", "trim", "truncate_message",
    "truncate_text",
]
