"""A deterministic in-process model for tests: it replays a script and records every call."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from executor.config import ToolProtocol
from executor.errors import ModelError
from executor.messages import Message, ModelReply, ToolSpec
from executor.models.parsing import parse_reply
from executor.protocols import TokenCallback

ScriptItem = ModelReply | Message | str


class ScriptExhaustedError(ModelError):
    """The ScriptedModel was asked for more replies than its script holds."""


@dataclass(frozen=True)
class ScriptedCall:
    """One `chat` call as the ScriptedModel received it."""

    messages: list[Message]
    tools: list[ToolSpec]


class ScriptedModel:
    """Replies from a script, in order: ModelReply as is, Message wrapped, str parsed."""

    def __init__(
        self,
        script: Iterable[ScriptItem],
        *,
        name: str = "scripted",
        tool_protocol: ToolProtocol = "json",
        context_length: int | None = None,
    ) -> None:
        self.name = name
        self.tool_protocol: ToolProtocol = tool_protocol
        self.script = list(script)
        self.calls: list[ScriptedCall] = []
        self.closed = False
        self._context_length = context_length

    def __repr__(self) -> str:
        return f"ScriptedModel({self.name!r}, {len(self.calls)}/{len(self.script)} replies used)"

    @property
    def remaining(self) -> int:
        """Replies not yet given."""
        return len(self.script) - len(self.calls)

    def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_token: TokenCallback | None = None,
        on_thinking: TokenCallback | None = None,
    ) -> ModelReply:
        """Record the call and return the next scripted reply (streamed whole to on_token)."""
        self.calls.append(ScriptedCall([m.model_copy(deep=True) for m in messages], list(tools)))
        if len(self.calls) > len(self.script):
            raise ScriptExhaustedError(self._exhausted(messages))
        reply = self._reply(self.script[len(self.calls) - 1])
        if on_thinking is not None and reply.message.thinking:
            on_thinking(reply.message.thinking)
        if on_token is not None and reply.raw:
            on_token(reply.raw)
        return reply

    def context_length(self) -> int | None:
        """The context length given at construction."""
        return self._context_length

    def close(self) -> None:
        """Mark the model closed (tests may assert it)."""
        self.closed = True

    def _reply(self, item: ScriptItem) -> ModelReply:
        if isinstance(item, ModelReply):
            return item.model_copy(deep=True)
        if isinstance(item, Message):
            return ModelReply(message=item.model_copy(deep=True), raw=item.content)
        return parse_reply(item, self.tool_protocol, context_length=self._context_length)

    def _exhausted(self, messages: Sequence[Message]) -> str:
        last = messages[-1].content if messages else ""
        return (
            f"ScriptedModel {self.name!r}: call #{len(self.calls)} but the script has only "
            f"{len(self.script)} replies; the last message was {last[:200]!r}"
        )
