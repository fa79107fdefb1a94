"""Trimming as pure functions: which messages a conversation keeps to fit its target (the
plan), and `trim` / `summarize_trim` that carry it out."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from executor.context.tokens import TARGET_RATIO, TokenCounter
from executor.context.truncation import shrink, truncate_message
from executor.messages import Message

log = logging.getLogger(__name__)


SUMMARY_MAX_TOKENS = 1024
"""Largest share of the budget a summary may take (it is also capped at a quarter of it)."""


OMITTED_NOTE = "[{n} earlier messages omitted to fit the context window]"
SUMMARY_HEADER = "[Summary of {n} earlier messages, omitted to fit the context window]\n"


Summarizer = Callable[[list[Message]], str]


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
    shrunk, ok = shrink([messages[i] for i in indexes], limit, counter)
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


def target_tokens(budget: int, target_ratio: float) -> int:
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
    target = target_tokens(budget, target_ratio)
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
    target = target_tokens(budget, target_ratio)
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
