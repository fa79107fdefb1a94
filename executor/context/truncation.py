"""Truncation: a text or a message cut to a number of tokens, keeping the head and the tail
around a visible marker; several messages cut together, the biggest first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from executor.context.tokens import TokenCounter
from executor.messages import Message

TRUNCATION_MARKER = "[... truncated {n} tokens to fit the context window ...]"


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


def shrink(
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
