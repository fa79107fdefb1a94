"""A run as data: what `ask --json` prints and what `ask --json-stream` streams (docs/CLI_JSON.md).

`RunRecorder` subscribes to a run's hook bus and collects every tool call (its decision,
outcome, exit code and duration), the files the run changed, and the token counts and time
the model took; `report()` turns that into a `RunReport`, whatever way the run ended.
`stream_event` maps one hook event to one line of the event stream (or None for events that
are not part of it). Both are library API: `Runner` users get the same report the CLI prints.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from executor import toolmeta
from executor.errors import (
    EXIT_INTERRUPTED,
    CallsDeniedError,
    MaxTurnsExceeded,
    SandboxAgentError,
)
from executor.hooks import Event, HookBus

SCHEMA_VERSION = 1
"""Version of the `ask --json` object and of the `--json-stream` events (docs/CLI_JSON.md)."""
Status = Literal["ok", "incomplete", "truncated", "denied", "max_turns", "error", "interrupted"]
_WRITE_TOOLS = ("write_file", "edit_file")


class ToolCallReport(BaseModel):
    """One tool call the model asked for, and what became of it."""

    id: str
    tool: str
    arguments: dict[str, Any]
    decision: Literal["allow", "deny", "reject"]
    """allow: ran; deny: refused by policy or the person; reject: unknown tool, bad arguments."""
    denied: bool
    reason: str | None = None
    """Why it was denied or rejected."""
    rule: str = ""
    """The policy rule (or flag, or default) that decided."""
    approved_by: str | None = None
    ok: bool | None = None
    """Whether the tool succeeded (None: it never ran)."""
    exit_code: int | None = None
    """run_shell_command's exit status."""
    timed_out: bool = False
    duration_ms: float | None = None
    child_session: str | None = None
    """The delegated child session that made the call (None: this session's own)."""


class Change(BaseModel):
    """A file the run created, modified or deleted (in the project root)."""

    path: str
    change: str
    """created, modified, deleted, mode or type."""
    tool: str
    child_session: str | None = None
    """The delegated child session whose call made the change (None: this session's own)."""


class ConnectionReport(BaseModel):
    """One connection through the egress proxy (the audit's `connection` record, in short)."""

    host: str
    port: int
    decision: str
    """allowed, denied, or failed (allowed but not reached)."""
    address: str | None = None
    rule: str | None = None
    allowed_by: str | None = None
    address_rule: str | None = None
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    call_id: str | None = None


class Usage(BaseModel):
    """What the run cost."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_requests: int = 0
    model_ms: float = 0.0
    """Time spent waiting for the model."""
    wall_ms: float = 0.0
    """Time from the start of the run to its end."""


class ErrorReport(BaseModel):
    """Why a run failed (status error, max_turns or interrupted)."""

    type: str
    message: str
    fix: str | None = None
    exit_code: int


class RunReport(BaseModel):
    """The `ask --json` object (schema version 1)."""

    type: Literal["result"] = "result"
    schema_version: int = SCHEMA_VERSION
    status: Status
    answer: str | None = None
    session: str | None = None
    root: str = ""
    provider: str = ""
    model: str = ""
    turns: int = 0
    """Model turns (replies) of this request."""
    tool_calls: list[ToolCallReport] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    connections: list[ConnectionReport] = Field(default_factory=list)
    """What the sandbox reached, or tried to, through the egress proxy."""
    usage: Usage = Field(default_factory=Usage)
    error: ErrorReport | None = None
    unfinished: str | None = None
    """With status incomplete: why the change the model set out to make is not made; with
    truncated: why the answer stopped before the model ended it."""

    @property
    def denied(self) -> list[ToolCallReport]:
        """The calls that were denied."""
        return [call for call in self.tool_calls if call.denied]


class RunRecorder:
    """Collects a run's tool calls, changes and usage from its hook events."""

    def __init__(self) -> None:
        self.calls: list[ToolCallReport] = []
        self._by_id: dict[tuple[str | None, str], ToolCallReport] = {}
        """The latest call of each (child session, id): servers reuse ids across turns, and a
        child's ids are its own."""
        self.changes: dict[str, Change] = {}
        self.connections: list[ConnectionReport] = []
        self.usage = Usage()
        self.started = time.monotonic()
        self.context: dict[str, Any] = {}

    def attach(self, hooks: HookBus) -> RunRecorder:
        """Listen to `hooks`; returns self."""
        hooks.subscribe(self.handle, "run_start", "model_request", "tool_call", "tool_result",
                        "connection", "child_event")
        return self

    def handle(self, event: Event) -> None:
        """Record one event."""
        getattr(self, f"_on_{event.kind}")(event.data)

    def _on_run_start(self, data: Mapping[str, Any]) -> None:
        self.context = {k: data.get(k) for k in ("session", "root", "provider", "model")}

    def _on_model_request(self, data: Mapping[str, Any]) -> None:
        u = self.usage
        u.model_requests += 1
        u.prompt_tokens += data.get("prompt_tokens") or 0
        u.completion_tokens += data.get("completion_tokens") or 0
        u.model_ms = round(u.model_ms + float(data.get("duration_ms") or 0), 1)

    def _on_child_event(self, data: Mapping[str, Any]) -> None:
        """A delegated child's tool call or result: recorded as this run's, naming the child."""
        kind, child = data.get("event"), str(data.get("session") or "child")
        if kind == "tool_call":
            self._on_tool_call(data.get("data") or {}, child=child)
        elif kind == "tool_result":
            self._on_tool_result(data.get("data") or {}, child=child)

    def _on_tool_call(self, data: Mapping[str, Any], child: str | None = None) -> None:
        decision = data.get("decision", "deny")
        call = ToolCallReport(
            id=str(data["call_id"]), tool=str(data["tool"]),
            arguments=dict(data.get("arguments") or {}), decision=decision,
            denied=decision == "deny", reason=(data.get("reason") or None)
            if decision != "allow" else None, rule=str(data.get("rule") or ""),
            approved_by=data.get("approved_by"), child_session=child,
        )
        self.calls.append(call)
        self._by_id[child, call.id] = call

    def _on_connection(self, data: Mapping[str, Any]) -> None:
        fields = ConnectionReport.model_fields
        self.connections.append(ConnectionReport(**{k: v for k, v in data.items() if k in fields}))

    def _on_tool_result(self, data: Mapping[str, Any], child: str | None = None) -> None:
        call = self._by_id.get((child, str(data["call_id"])))
        meta = data.get("meta") or {}
        if call is None:
            return
        if call.decision == "allow":
            call.ok = bool(data.get("ok"))
            call.exit_code = toolmeta.exit_code(meta)
            call.timed_out = bool(toolmeta.timed_out(meta))
            call.duration_ms = toolmeta.duration_ms(meta)
        self._record_changes(call, meta)

    def _record_changes(self, call: ToolCallReport, meta: Mapping[str, Any]) -> None:
        if call.tool in _WRITE_TOOLS and toolmeta.sha256_after(meta):
            path = toolmeta.written_path(meta) or call.arguments.get("path")
            self._change(str(path), "created" if toolmeta.created(meta) else "modified", call)
        for entry in toolmeta.changes(meta):
            self._change(str(entry["path"]), str(entry.get("change", "modified")), call)

    def _change(self, path: str, change: str, call: ToolCallReport) -> None:
        earlier = self.changes.get(path)
        if earlier is not None and earlier.change == "created":
            if change == "deleted":  # created and deleted by this run: no change at all
                del self.changes[path]
                return
            change = "created"  # created, then edited: still a new file
        elif earlier is not None and earlier.change == "deleted" and change == "created":
            change = "modified"  # deleted, then written anew: the file was there before
        self.changes[path] = Change(path=path, change=change, tool=call.tool,
                                    child_session=call.child_session)

    def report(self, *, answer: str | None = None, turns: int | None = None,
               error: BaseException | None = None, unfinished: str | None = None,
               truncated: str | None = None, **context: Any) -> RunReport:
        """The report of the run so far: a success with `answer` (incomplete when
        `unfinished` says why, else truncated when `truncated` does), or a failure with
        `error`."""
        self.usage.wall_ms = round((time.monotonic() - self.started) * 1000, 1)
        facts = {k: v for k, v in {**self.context, **context}.items() if v is not None}
        status: Status = status_of(error)
        if error is None and (unfinished or truncated):
            status = "incomplete" if unfinished else "truncated"
        return RunReport(
            status=status, answer=answer, unfinished=unfinished or truncated, **facts,
            turns=self.usage.model_requests if turns is None else turns,
            tool_calls=list(self.calls), changes=list(self.changes.values()),
            connections=list(self.connections),
            usage=self.usage.model_copy(), error=error_report(error),
        )


def status_of(error: BaseException | None) -> Status:
    """ok, denied (--fail-on-denied), max_turns, interrupted or error."""
    if error is None:
        return "ok"
    if isinstance(error, CallsDeniedError):
        return "denied"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    return "max_turns" if isinstance(error, MaxTurnsExceeded) else "error"


def error_report(error: BaseException | None) -> ErrorReport | None:
    """The error part of a report."""
    if error is None:
        return None
    if isinstance(error, KeyboardInterrupt):
        return ErrorReport(type="KeyboardInterrupt", message="interrupted",
                           exit_code=EXIT_INTERRUPTED)
    if isinstance(error, SandboxAgentError):
        return ErrorReport(type=type(error).__name__, message=error.message, fix=error.fix,
                           exit_code=error.exit_code)
    return ErrorReport(type=type(error).__name__, message=str(error), exit_code=1)


_STREAMED = {
    "run_start": ("start", ("session", "root", "provider", "model", "mount_mode", "tools",
                            "skills")),
    "model_request": ("model_reply", ("duration_ms", "prompt_tokens", "completion_tokens",
                                      "reply")),
    "tool_call": ("tool_call", ("call_id", "tool", "arguments", "decision", "rule", "reason",
                                "approved_by")),
    "tool_result": ("tool_result", ("call_id", "tool", "ok", "output", "meta")),
    "retry": ("retry", ("attempt", "delay", "reason")),
    "warning": ("warning", ("message",)),
    "notice": ("notice", ("message",)),
    "instructions": ("instructions", ("source", "bytes", "truncated")),
    "connection": ("connection", ("host", "port", "decision", "address", "rule", "allowed_by",
                                  "address_rule", "reason", "bytes_up", "bytes_down", "call_id")),
}
"""Hook events that appear in the stream: their `type` there and the fields they keep."""


_CHILD_STREAMED = ("tool_call", "tool_result")
"""A delegated child's events that appear in the stream, with `child_session` naming it."""


def stream_event(event: Event) -> dict[str, Any] | None:
    """One `--json-stream` line for `event`, or None when it is not streamed."""
    if event.kind == "child_event":
        return _child_line(event.data)
    spec = _STREAMED.get(event.kind)
    if spec is None:
        return None
    kind, fields = spec
    line: dict[str, Any] = {"type": kind}
    if kind == "start":
        line["schema_version"] = SCHEMA_VERSION
    line.update({k: event.data.get(k) for k in fields if k in event.data})
    return line


def _child_line(data: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = data.get("event")
    if kind not in _CHILD_STREAMED:
        return None
    payload, fields = data.get("data") or {}, _STREAMED[str(kind)][1]
    line: dict[str, Any] = {"type": kind, "child_session": data.get("session")}
    line.update({k: payload.get(k) for k in fields if k in payload})
    return line
