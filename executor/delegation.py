"""Delegation: the `delegate` tool hands a sub-task to a child session (docs/DELEGATION.md).

A child is an ordinary session — its own container, session file and audit records — linked to
its parent (`parent_session`). It is read-only unless the call asks for writes and the parent
could write itself; its writes then need the same approval the parent's would (the person at
the terminal, `--yes` or a policy rule). The child's final answer is the tool's result.
The call itself is high-risk: it asks for approval unless the person waived that with
`--no-confirm-delegation` (a policy `deny` still wins).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from executor.choices import ToolProtocol
from executor.hooks import EventKind
from executor.messages import Message, ModelReply, ToolResult, ToolSpec
from executor.protocols import Model, TokenCallback
from executor.tools.base import RiskLevel, Tool, ToolContext

DELEGATE_TOOL = "delegate"
DEFAULT_MAX_DELEGATIONS = 3
"""Child sessions one session may start."""
DEFAULT_DELEGATION_DEPTH = 1
"""How deep delegation goes: 1 means children cannot delegate further."""
RELAYED: tuple[EventKind, ...] = ("tool_call", "tool_result", "warning", "notice",
                                  "sandbox_start")
"""A child's events the parent's subscribers see (as `child_event`)."""


class DelegateArgs(BaseModel):
    """The arguments of `delegate`."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="The sub-task, complete and self-contained: "
                      "the helper sees nothing of this conversation.")
    write: bool = Field(False, description="Whether the helper may change files (it is "
                        "read-only otherwise).")


Spawn = Callable[[DelegateArgs], ToolResult]


class Delegate(Tool):
    """Hands a sub-task to a child session; host-side, it only calls `spawn`."""

    name = DELEGATE_TOOL
    description = ("Hand a self-contained sub-task to a helper agent working in its own sandbox "
                   "on the same project; its final answer comes back as the result. The helper "
                   "is read-only unless write is true.")
    Args = DelegateArgs
    risk = RiskLevel.HIGH
    read_only_safe = True  # a read-only parent may start read-only children
    approval = True

    def __init__(self) -> None:
        self.spawn: Spawn | None = None
        """Set by the Runner that offers the tool."""

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        """Run the child session and return its answer."""
        if self.spawn is None:
            return ToolResult.error("delegate is not available in this session")
        return self.spawn(args)

    def describe(self, args: BaseModel) -> str:
        """What the person approves: the whole task and whether the child may write."""
        assert isinstance(args, DelegateArgs)
        mode = "may write (each write approved as yours)" if args.write else "read-only"
        return f"delegate a sub-task to a child session ({mode}):\n{args.task}"


class BorrowedModel:
    """The parent's model lent to a child session: the child's `close` leaves it open."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self.name = model.name
        self.tool_protocol: ToolProtocol = model.tool_protocol

    def chat(self, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
             on_token: TokenCallback | None = None,
             on_thinking: TokenCallback | None = None) -> ModelReply:
        """The parent model's reply."""
        return self._model.chat(messages, tools, on_token=on_token, on_thinking=on_thinking)

    def context_length(self) -> int | None:
        """The parent model's context window."""
        return self._model.context_length()

    def close(self) -> None:
        """Nothing: the parent closes its model."""
