"""The data that flows between the layers: messages, tool calls, tool results, model replies.

The conversation is kept in one provider-neutral shape (OpenAI-like roles, arguments
as a dict). Providers convert to and from their wire format; the session store writes
these models as JSON lines.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]


def new_call_id() -> str:
    """A fresh id for a tool call the provider did not name."""
    return "call_" + uuid.uuid4().hex[:12]


class ToolCall(BaseModel):
    """One tool invocation requested by the model."""

    id: str = Field(default_factory=new_call_id)
    """Provider's id for the call (generated when the provider gives none)."""
    name: str
    """Tool name as the model wrote it (may name an unknown tool)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments as parsed JSON; validated against the tool's model later."""


class Message(BaseModel):
    """One conversation message."""

    role: Role
    content: str = ""
    """Text content ('' when an assistant message only calls tools)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For role 'tool': the id of the call this result answers."""
    name: str | None = None
    """For role 'tool': the tool's name."""
    thinking: str = ""
    """For role 'assistant': the model's reasoning before this reply, kept apart from the
    answer (never part of `content`); untrusted text."""

    @classmethod
    def system(cls, content: str) -> Message:
        """A system message."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        """A user message."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
        """An assistant message, optionally calling tools."""
        return cls(role="assistant", content=content, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, call: ToolCall, content: str) -> Message:
        """The result of `call`, as the model will see it."""
        return cls(role="tool", content=content, tool_call_id=call.id, name=call.name)


class ToolSpec(BaseModel):
    """What the model is told about one tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    core: list[str] | None = None
    """The arguments the json protocols offer, all required and in this order (None: all)."""


class ToolResult(BaseModel):
    """The outcome of one tool call: a failure here is data for the model, not an exception."""

    ok: bool
    output: str
    """Text the model sees (the error text when not ok)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Facts for the audit log and UI: the toolbox's meta records (read: executor/toolmeta.py)."""

    @classmethod
    def error(cls, message: str, **meta: Any) -> ToolResult:
        """A failed result with `message` shown to the model."""
        return cls(ok=False, output=message, meta=meta)


CutReason = Literal["length", "repetition"]
"""Why a reply stopped before the model ended it: the per-reply token cap, or a stop because
it kept repeating itself."""


class Usage(BaseModel):
    """Token counts a provider reported for one request."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ModelReply(BaseModel):
    """One assistant turn, already parsed according to the tool protocol."""

    message: Message
    """The assistant message: final text in `content`, or `tool_calls`."""
    usage: Usage = Field(default_factory=Usage)
    problem: str | None = None
    """Why the reply is neither a valid tool call nor a usable answer (the model is told)."""
    context_length: int | None = None
    """The model's context window, when the provider reports it."""
    raw: str = ""
    """The reply text exactly as the model produced it (for --trace and audits)."""
    cut: CutReason | None = None
    """Why the reply stopped before the model ended it: the per-reply token cap, or a stop
    because it kept repeating itself (None: it ended on its own)."""


def function_schema(spec: ToolSpec) -> dict[str, Any]:
    """The `{"type": "function", ...}` shape both Ollama and OpenAI expect in `tools`."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }
