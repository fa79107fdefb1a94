"""Repair for resumed sessions: every tool call directly followed by its result."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from executor.messages import Message

INTERRUPTED_RESULT = "[no result: the run ended before this tool call finished]"


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
