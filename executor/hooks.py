"""The hook bus: the agent reports what it does as typed events; any number of subscribers listen.

Each event is a pydantic model told apart by its `kind` (a `Literal`), as requests and
responses are in SWE-ReX: `ToolCallEvent(kind="tool_call", ...)`. `Event` is their union
(discriminated by `kind`); `event.data` is the payload as a dict, for consumers that treat every
event alike (the JSON stream, a child session's relay). A payload that does not fit its model
fails where it is emitted, not in a subscriber.

A subscriber that raises is logged and never breaks the run, unless it subscribed as
`critical` (the audit log with --audit-required): then its error stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

EventKind = Literal[
    "run_start", "token", "model_request", "tool_call", "tool_output", "tool_result", "retry",
    "complete", "error", "warning", "progress", "notice", "sandbox_start", "instructions",
    "thinking", "skills", "child_event", "connection",
]


class BaseEvent(BaseModel):
    """What every event has: its kind and when it was emitted."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    at: float = Field(default_factory=time.time)
    """Unix time the event was emitted."""

    @property
    def data(self) -> dict[str, Any]:
        """The payload: every field but `kind` and `at` (values as they are, not dumped)."""
        return {name: getattr(self, name) for name in type(self).model_fields
                if name not in ("kind", "at")}


class RunStartEvent(BaseEvent):
    """A run started: where, with what model, sandbox (when it runs already) and policy."""

    kind: Literal["run_start"] = "run_start"
    root: str
    provider: str
    model: str
    image: str
    image_digest: str | None = None
    container_id: str | None = None
    """None while the sandbox waits for its first tool call (then `sandbox_start` says)."""
    sandbox_adopted: dict[str, str] | None = None
    """The container was made ahead and adopted (warm.py; `sandbox_start`'s `adopted`)."""
    mount_mode: str
    runtime: str | None = None
    engine: str | None = None
    workspace: str = "bind"
    policy_source: str = ""
    argv: list[str] = Field(default_factory=list)
    instructions: dict[str, Any] | None = None
    """Source and SHA-256 of the project instructions (AGENTS.md), when there are some."""
    skills: list[dict[str, Any]] = Field(default_factory=list)
    parent_session: str | None = None
    """The session that delegated to this one."""
    user: str | None = None
    host: str | None = None
    session: str | None = None
    tools: list[str] = Field(default_factory=list)


class SandboxStartEvent(BaseEvent):
    """The container started (or was re-attached) when it was first needed."""

    kind: Literal["sandbox_start"] = "sandbox_start"
    container_id: str
    container_name: str = ""
    image: str
    image_digest: str
    mount_mode: str
    network: str = "none"
    user: str = ""
    workspace: str = "bind"
    runtime: str = ""
    engine: str = ""
    reattached: bool = False
    adopted: dict[str, str] | None = None
    """A container made ahead and adopted (warm.py): `made_at`, `made_by_run`, `made_by_session`."""
    duration_ms: float | None = None


class TokenEvent(BaseEvent):
    """A piece of the model's reply as it streams."""

    kind: Literal["token"] = "token"
    text: str


class ThinkingEvent(BaseEvent):
    """A piece of the model's reasoning (thinking mode) as it streams."""

    kind: Literal["thinking"] = "thinking"
    text: str


class ModelRequestEvent(BaseEvent):
    """One model request answered: sizes, duration, tokens, the raw reply and the prompt."""

    kind: Literal["model_request"] = "model_request"
    model: str
    messages: int = 0
    prompt_bytes: int = 0
    tools: list[str] = Field(default_factory=list)
    duration_ms: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reply: str = ""
    prompt: list[Any] = Field(default_factory=list)
    """The messages sent (the audit keeps them only with --audit-prompts)."""


class ToolCallEvent(BaseEvent):
    """A tool call and the decision on it, announced before it runs."""

    kind: Literal["tool_call"] = "tool_call"
    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    decision: Literal["allow", "deny", "reject"]
    """allow / deny (policy or person) / reject (unknown tool, invalid arguments)."""
    rule: str
    approved_by: str | None = None
    reason: str | None = None


class ToolOutputEvent(BaseEvent):
    """A running command's output as it comes (untrusted text)."""

    kind: Literal["tool_output"] = "tool_output"
    call_id: str
    tool: str
    stream: Literal["stdout", "stderr"]
    text: str


class ToolResultEvent(BaseEvent):
    """What a tool call gave back."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    tool: str
    ok: bool
    output: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)


class ConnectionEvent(BaseEvent):
    """One connection the sandbox asked the egress proxy for, allowed or not, once it ended."""

    kind: Literal["connection"] = "connection"
    host: str
    port: int
    method: str
    """CONNECT (TLS passed through) or the HTTP method of a plain request."""
    decision: Literal["allowed", "denied", "failed"]
    """failed: allowed, but the upstream could not be reached."""
    address: str | None = None
    """The address the proxy resolved and checked (and connected to, when allowed)."""
    rule: str | None = None
    """The rule that allowed it, as written."""
    allowed_by: str | None = None
    """Where that rule came from: --allow-host, config, preset NAME, approved at the terminal."""
    address_rule: str | None = None
    """The range (or `localhost:PORT`) rule that let it reach a non-public address."""
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    duration_ms: int = 0
    call_id: str | None = None
    """The tool call that was running (None: between calls, e.g. a background process)."""


class RetryEvent(BaseEvent):
    """A model request failed and is tried again after `delay` seconds."""

    kind: Literal["retry"] = "retry"
    attempt: int
    reason: str
    delay: float | None = None
    url: str | None = None


class CompleteEvent(BaseEvent):
    """A run ended (any status: ok, incomplete, max_turns, error, interrupted)."""

    kind: Literal["complete"] = "complete"
    status: str = "ok"
    answer: str | None = None
    turns: int | None = None
    """Model turns (None: the run failed before its loop counted them)."""
    duration_ms: float | None = None


class ErrorEvent(BaseEvent):
    """An error that ended or disturbed the run."""

    kind: Literal["error"] = "error"
    message: str
    error_type: str | None = None
    exit_code: int | None = None


class WarningEvent(BaseEvent):
    """Something the person should know went wrong or was changed."""

    kind: Literal["warning"] = "warning"
    message: str


class NoticeEvent(BaseEvent):
    """Something worth a line that is not a problem."""

    kind: Literal["notice"] = "notice"
    message: str


class ProgressEvent(BaseEvent):
    """A slow start (the embedded model loading): a phase and, where known, how far."""

    kind: Literal["progress"] = "progress"
    message: str
    fraction: float | None = None
    phase: str = ""


class InstructionsEvent(BaseEvent):
    """The project instructions (AGENTS.md) given to the model."""

    kind: Literal["instructions"] = "instructions"
    source: str
    bytes: int
    truncated: bool = False
    sha256: str = ""
    text: str = ""


class SkillsEvent(BaseEvent):
    """The prompt skills in the system prompt."""

    kind: Literal["skills"] = "skills"
    skills: list[dict[str, Any]]


class ChildEvent(BaseEvent):
    """An event of a delegated child session, relayed."""

    kind: Literal["child_event"] = "child_event"
    session: str
    event: str
    payload: dict[str, Any] = Field(default_factory=dict)
    """The child event's own payload (its `data`)."""

    @property
    def data(self) -> dict[str, Any]:
        """`session`, `event` and the child event's payload under `data`."""
        return {"session": self.session, "event": self.event, "data": self.payload}


Event = Annotated[
    RunStartEvent | SandboxStartEvent | TokenEvent | ThinkingEvent | ModelRequestEvent
    | ToolCallEvent | ToolOutputEvent | ToolResultEvent | RetryEvent | CompleteEvent
    | ErrorEvent | WarningEvent | NoticeEvent | ProgressEvent | InstructionsEvent | SkillsEvent
    | ChildEvent | ConnectionEvent,
    Field(discriminator="kind"),
]
"""Any event, told apart by `kind`."""

Subscriber = Callable[[Event], object]
"""Called with each event it subscribed to; what it returns is ignored."""


class HookBus:
    """Fan-out of events to subscribers, each optionally filtered by kind."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[frozenset[str] | None, Subscriber, bool]] = []

    def subscribe(self, fn: Subscriber, *kinds: EventKind, critical: bool = False) -> Subscriber:
        """Call `fn` for events of `kinds` (all when none given); `critical` errors propagate."""
        self._subscribers.append((frozenset(kinds) or None, fn, critical))
        return fn

    def unsubscribe(self, fn: Subscriber) -> None:
        """Stop calling `fn`."""
        self._subscribers = [entry for entry in self._subscribers if entry[1] is not fn]

    def emit(self, event: Event) -> Event:
        """Deliver `event` to every interested subscriber; returns it."""
        for kinds, fn, critical in list(self._subscribers):
            if kinds is None or event.kind in kinds:
                try:
                    fn(event)
                except Exception:
                    if critical:
                        raise
                    log.exception("hook subscriber %r failed on %s", fn, event.kind)
        return event
