"""A reply that runs away: stopped while it streams when it repeats itself
(`RepetitionGuard`), and made as usable as it honestly can be when it was cut
(`guarded_chat`, through `parsing.cut_reply`)."""

from __future__ import annotations

from collections.abc import Sequence

from executor.messages import Message, ModelReply, ToolSpec, Usage
from executor.models.openai import OpenAIModel
from executor.models.parsing import cut_reply, repeated_tail
from executor.protocols import TokenCallback

CHECK_EVERY = 8
"""Pieces (about tokens) between two looks for a repeated tail: the look scans up to a few
thousand characters, cheap but not free on every token."""


class Runaway(Exception):
    """Internal: the reply streamed so far ends in copies of itself; the stream is dropped.

    Raised from the token callback, so it leaves the HTTP stream (closing the connection,
    which makes llama.cpp stop generating) and reaches `EmbeddedModel.chat`."""

    def __init__(self, text: str, pieces: int) -> None:
        super().__init__("the reply kept repeating itself")
        self.text, self.pieces = text, pieces


class RepetitionGuard:
    """A token callback that relays each piece, then raises `Runaway` once the reply so far
    ends in the same text again and again (`parsing.repeated_tail`)."""

    def __init__(self, relay: TokenCallback | None = None, every: int = CHECK_EVERY) -> None:
        self.relay, self.every = relay, every
        self.pieces: list[str] = []

    def __call__(self, piece: str) -> None:
        if self.relay is not None:
            self.relay(piece)
        self.pieces.append(piece)
        if len(self.pieces) % self.every == 0:
            text = "".join(self.pieces)
            if repeated_tail(text) is not None:
                raise Runaway(text, len(self.pieces))


def guarded_chat(
    client: OpenAIModel,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    *,
    cap: int,
    on_token: TokenCallback | None = None,
    on_thinking: TokenCallback | None = None,
) -> ModelReply:
    """`client.chat`, stopped early when the reply repeats itself (while streaming) and marked
    `cut` when it stopped there or at the server's per-reply token `cap` (`n_predict`)."""
    try:
        reply = client.chat(messages, tools, on_token=RepetitionGuard(on_token),
                            on_thinking=on_thinking)
    except Runaway as stop:  # the stream is closed: llama.cpp stops generating
        return cut_reply(stop.text, client.tool_protocol, "repetition",
                         usage=Usage(completion_tokens=stop.pieces))
    produced = reply.usage.completion_tokens
    if reply.cut is not None or produced is None or produced < cap:  # cut: said by the server
        return reply
    return cut_reply(reply.raw, client.tool_protocol, "length", usage=reply.usage,
                     thinking=reply.message.thinking)
