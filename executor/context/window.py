"""`ContextWindow`: the agent loop's view of the window, learning from reported usage and from
a server's refusal of a request as too long."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import is_
from typing import Any

from executor.choices import ToolProtocol
from executor.context.tokens import (
    MESSAGE_OVERHEAD,
    TARGET_RATIO,
    TOOL_CALL_OVERHEAD,
    TokenCounter,
    arguments_text,
)
from executor.context.trimming import Summarizer, summarize_trim, target_tokens, trim
from executor.errors import ContextOverflowError
from executor.messages import Message, ToolSpec
from executor.models.toolproto import tools_prompt, uses_json

RETRY_MARGIN = 0.1
"""Share of the window a request sent again after a refusal stays further below it."""
_PENDING_SAMPLES = 8
"""Calibration samples kept until a count is needed (the ratio is smoothed: older ones fade)."""


def _bytes_upper(message: Message) -> int:
    """Tokens `message` takes at most, uncalibrated: its UTF-8 bytes plus the overheads."""
    texts = [message.content, message.thinking, message.name or ""]
    texts += [text for call in message.tool_calls for text in (call.name, arguments_text(call))]
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    return size + MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD * len(message.tool_calls)


@dataclass
class ContextWindow:
    """Fits each request into the budget (the tools' share included) and learns from reported
    usage and from the server's refusal of a request as too long.

    Satisfies the agent's `ContextFitter`; `summarizer` switches to the summarize strategy.
    The tools take their room as the protocol sends them: their specs beside the messages
    (`native`), or the tools prompt the json protocols add to the system message (rules, one
    line per tool, worked examples: about 840 tokens with the built-in tools). The
    constrained protocol's reply schema becomes a grammar on the server: it takes no tokens.
    """

    budget: int
    """Tokens the prompt and the reply share."""
    counter: TokenCounter = field(default_factory=TokenCounter)
    tools: Sequence[ToolSpec] = ()
    """Specs offered beside the messages (they take room too)."""
    summarizer: Summarizer | None = None
    protocol: ToolProtocol = "native"
    """How the tools are sent: decides what of them takes room in the prompt."""

    _pending: list[tuple[list[Message], int]] = field(default_factory=list, repr=False, init=False)
    _last: tuple[list[Message], int] | None = field(default=None, repr=False, init=False)

    @cached_property
    def _tools_text(self) -> str:
        """What the tools add to the prompt, as text."""
        if uses_json(self.protocol):
            return ("\n\n" + tools_prompt(self.tools)) if self.tools else ""
        return "".join(spec.model_dump_json() for spec in self.tools)

    def overhead(self) -> int:
        """Calibrated tokens the tools take in every request."""
        return self.counter.count_text(self._tools_text)

    def room(self) -> int:
        """Budget left for the messages once the tools are in."""
        self._calibrate()
        return max(256, self.budget - self.overhead())

    def surely_fits(self, messages: Sequence[Message]) -> bool:
        """Whether `messages` (and the tools) surely fit, known without tokenizing.

        A token is at least one byte for every tokenizer in use (byte-level BPE, and
        SentencePiece with byte fallback): the UTF-8 size bounds the true count. When
        `messages` extend the last prompt sent, the provider's own count of that prompt plus
        the size of what was added is the bound. So a short conversation goes out as it is
        without loading tiktoken (about 0.2 s) on the way to the first answer.
        """
        bound = self._extended_bound(messages)
        if bound is None:
            bound = sum(_bytes_upper(m) for m in messages)
            bound += len(self._tools_text.encode())
        return bound <= target_tokens(self.budget, TARGET_RATIO)

    def _extended_bound(self, messages: Sequence[Message]) -> int | None:
        if self._last is None:
            return None
        sent, reported = self._last
        if len(messages) < len(sent):
            return None
        # shared messages, the agent loop's case, are told at C speed; others compared
        if not all(map(is_, sent, messages)) and any(
                a is not b and a != b for a, b in zip(sent, messages, strict=False)):
            return None
        return reported + sum(_bytes_upper(m) for m in messages[len(sent):])

    def fit(self, messages: Sequence[Message]) -> list[Message]:
        """A trimmed copy of `messages` (never mutated)."""
        if self.surely_fits(messages):
            return list(messages)
        if self.summarizer is not None:
            return summarize_trim(messages, self.room(), self.counter, self.summarizer)
        return trim(messages, self.room(), self.counter)

    def observe(self, sent: Sequence[Message], usage: Any) -> None:
        """Calibrate with the prompt tokens the provider reported for `sent`.

        Counted when a count is next needed: a conversation that always `surely_fits` never
        loads the tokenizer. The last few samples are kept.
        """
        reported = getattr(usage, "prompt_tokens", None)
        if reported:
            self._last = (list(sent), reported)
            self._pending = [*self._pending[-(_PENDING_SAMPLES - 1):], self._last]

    def overflowed(self, sent: Sequence[Message], error: ContextOverflowError) -> None:
        """The server refused `sent` as too long: learn from it so the next `fit` is smaller.

        Its count of the prompt recalibrates the counter (at full weight: it is the exact
        figure for this very prompt) and its window, less `RETRY_MARGIN`, caps the budget
        (one ratio for all text is an average: prose and code differ); a server that gave
        neither gets a budget a quarter smaller.
        """
        self._calibrate()
        self._last, self._pending = None, []
        if error.prompt_tokens:
            estimate = self.counter.count_messages(sent) + self.overhead()
            self.counter.samples = 0  # the first sample replaces the ratio: take it whole
            self.counter.calibrate(estimate, error.prompt_tokens)
        if error.context_size:
            self.budget = int(min(self.budget, error.context_size) * (1 - RETRY_MARGIN))
        if not (error.prompt_tokens and error.context_size):
            self.budget = max(256, self.budget * 3 // 4)

    def _calibrate(self) -> None:
        pending, self._pending = self._pending, []
        for sent, reported in pending:
            estimate = self.counter.count_messages(sent) + self.overhead()
            self.counter.calibrate(estimate, reported)
