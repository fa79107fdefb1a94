"""The agent loop: fit context → ask the model → run each tool call → repeat until an answer.

`run → step → query / execute`, as in mini-swe-agent. Everything the loop does is announced on
the hook bus; everything it learns is appended to the conversation (and the session store).
A failed, unknown, invalid or denied tool call is a result the model sees, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from operator import attrgetter, is_
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from executor import toolmeta
from executor.coach import Coach
from executor.context import INTERRUPTED_RESULT
from executor.errors import AgentError, ContextOverflowError, MaxTurnsExceeded, SandboxAgentError
from executor.hooks import (
    HookBus,
    ModelRequestEvent,
    NoticeEvent,
    ThinkingEvent,
    TokenEvent,
    ToolCallEvent,
    ToolOutputEvent,
    ToolResultEvent,
    WarningEvent,
)
from executor.messages import (
    CutReason,
    Message,
    ModelReply,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from executor.protocols import Model
from executor.tools.base import Tool, ToolContext, ToolRegistry, format_validation_error


@dataclass(frozen=True)
class Authorization:
    """Whether a tool call may run, and who or what decided."""

    allowed: bool
    rule: str
    """The policy rule (or flag, or default) that decided."""
    approved_by: str | None = None
    """'user', '--yes', 'policy:<rule>' ... when allowed."""
    reason: str = ""
    """Shown to the model when denied."""
    host_args: Mapping[str, Any] = field(default_factory=dict)
    """Added to the call as approved (the preview's guard); the model never sees them."""


Authorize = Callable[[Tool, BaseModel, ToolCall], Authorization]


class ContextFitter(Protocol):
    """Keeps the prompt inside the token budget and learns from reported usage."""

    def fit(self, messages: Sequence[Message]) -> list[Message]:
        """A trimmed copy of `messages` that fits the budget."""
        ...

    def observe(self, sent: Sequence[Message], usage: Usage) -> None:
        """Calibrate with the prompt token count the provider reported for `sent`."""
        ...

    def overflowed(self, sent: Sequence[Message], error: ContextOverflowError) -> None:
        """The server refused `sent` as longer than its window: fit smaller from now on."""
        ...


class MessageSink(Protocol):
    """Where each new message goes as soon as it exists (the session store)."""

    def append(self, message: Message) -> None: ...


@dataclass
class ToolCallRecord:
    """One executed (or refused) tool call, for the run result."""

    call: ToolCall
    result: ToolResult
    rule: str = ""
    approved_by: str | None = None


@dataclass
class RunResult:
    """What `Agent.run` returns."""

    answer: str
    turns: int
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    unfinished: str | None = None
    """Why the change the model set out to make is not made, when the calls say so: it tried
    to change files and every such call that ran failed (see `unfinished_reason`)."""
    cut: CutReason | None = None
    """Why the answer stopped before the model ended it (the length limit, or a stop because
    it kept repeating itself): what it wrote is kept, with a note (None: a whole answer)."""

    @property
    def truncated(self) -> str | None:
        """Why the answer is not whole, in a clause (None: it is)."""
        if self.cut is None:
            return None
        how = ("the model kept repeating itself and was stopped" if self.cut == "repetition"
               else "the model reached the per-reply token limit")
        return f"the answer was cut before the model finished it: {how}"


WRITE_TOOLS = frozenset({"write_file", "edit_file"})
"""Tools whose success changes a file."""
_CONTENT = attrgetter("content")


def _ran(record: ToolCallRecord) -> bool:
    """Whether the call was allowed and executed (not refused, rejected or denied)."""
    return record.approved_by is not None


def _failure(record: ToolCallRecord) -> str:
    path = record.call.arguments.get("path") or record.call.arguments.get("command") or ""
    first = (record.result.output.strip().splitlines() or ["failed"])[0][:160]
    return f"{record.call.name} {str(path)[:80]} — {first}".replace("  ", " ")


def unfinished_reason(records: list[ToolCallRecord]) -> str | None:
    """A fact, not a guess: the model ran calls to change files and none of them succeeded.

    A command that changed files is a change made, whatever its exit code: otherwise a run
    that changed the tree by shell and then failed one write would say nothing changed.
    """
    writes = [r for r in records if r.call.name in WRITE_TOOLS and _ran(r)]
    if not writes or any(r.result.ok for r in writes) or _command_changed(records):
        return None
    return (f"no file was changed: all {len(writes)} attempted change(s) failed (last: "
            f"{_failure(writes[-1])})")


def _command_changed(records: list[ToolCallRecord]) -> list[str]:
    """The files commands that ran changed, as the toolbox listed them."""
    return [change["path"] for r in records if r.call.name not in WRITE_TOOLS
            and _ran(r) for change in toolmeta.changes(r.result.meta)]


def progress_of(records: list[ToolCallRecord]) -> str:
    """What a run did so far, in one clause: `changed a.py, b.py; 9 tool calls, 4 failed`."""
    written = [str(r.call.arguments.get("path", "?")) for r in records
               if r.call.name in WRITE_TOOLS and _ran(r) and r.result.ok]
    changed = list(dict.fromkeys(written + _command_changed(records)))
    failed = [r for r in records if _ran(r) and not r.result.ok]
    done = f"changed {', '.join(changed[:6])}" if changed else "no file changed"
    text = f"{done}; {len(records)} tool call(s), {len(failed)} failed"
    return text + (f" (last failure: {_failure(failed[-1])})" if failed else "")


@dataclass
class Agent:
    """One conversation with one model in one sandbox."""

    model: Model
    tools: ToolRegistry
    context: ToolContext
    authorize: Authorize
    system_prompt: str = ""
    """Sent first on every request; not part of `messages` (it may change on resume)."""
    hooks: HookBus = field(default_factory=HookBus)
    fitter: ContextFitter | None = None
    sink: MessageSink | None = None
    max_turns: int = 20
    max_bad_replies: int = 3
    messages: list[Message] = field(default_factory=list)
    """The conversation without the system prompt, as persisted."""
    coach: Coach | None = None
    """Guards against a weak model's typical mistakes (the runner sets one for the json
    protocols, which weak models use)."""
    _cut_noted: Message | None = field(default=None, init=False, repr=False)
    """The request whose cut was already said (once is enough)."""
    _users_seen: tuple[int, Message | None, Message | None] = field(
        default=(0, None, None), init=False, repr=False)
    """(messages looked at, the last of them, the latest user message among them): where
    `_latest_user` goes on from."""

    def __post_init__(self) -> None:
        if self.coach is not None:
            self.coach.learn(self.messages)

    @cached_property
    def specs(self) -> list[ToolSpec]:
        """The offered tools' schemas, built once per agent rather than once per model call."""
        return self.tools.specs()

    def add(self, message: Message) -> None:
        """Append to the conversation and persist it before going on."""
        self.messages.append(message)
        if self.sink is not None:
            self.sink.append(message)

    def run(self, query: str) -> RunResult:
        """Answer `query`, calling tools as the model asks, within `max_turns` model calls."""
        self.add(Message.user(query))
        if self.coach is not None:
            self.coach.begin(query)
        records: list[ToolCallRecord] = []
        bad_replies = cuts = 0
        for turn in range(1, self.max_turns + 1):
            reply = self.query()
            if reply.cut is not None:
                cuts = self._cut(reply, cuts, turn, records)
            if reply.problem:
                bad_replies = self._reject(reply, bad_replies)
                continue
            bad_replies = 0
            self.add(reply.message)
            if not reply.message.tool_calls:
                nudge = self.coach.review(reply.message.content) if self.coach else None
                if nudge is None:
                    return RunResult(reply.message.content, turn, records,
                                     unfinished_reason(records), reply.cut)
                self.hooks.emit(NoticeEvent(message=f"the answer went back to the model: {nudge}"))
                self.add(Message.user(nudge))
                continue
            records += [self.execute(call) for call in reply.message.tool_calls]
            stuck = self.coach.stuck if self.coach else None
            if stuck is not None:
                raise MaxTurnsExceeded(
                    f"no final answer: stopped after {turn} model turns because {stuck}; "
                    f"done so far: {progress_of(records)}",
                    fix="say more precisely what to change, or use a more capable model "
                        "(--provider ollama)")
        raise MaxTurnsExceeded(
            f"no final answer after {self.max_turns} model turns; done so far: "
            f"{progress_of(records)}",
            fix="raise --max-turns, or make the request smaller",
        )

    def query(self) -> ModelReply:
        """Fit the context and ask the model for its next turn.

        A request the server refuses as too long is fitted again, with what the refusal
        taught the fitter, and sent once more; a second refusal ends the run.
        """
        prompt = [Message.system(self.system_prompt)] if self.system_prompt else []
        sent = (self.fitter.fit if self.fitter else list)(prompt + self.messages)
        self._note_cut_request(sent)
        specs = self.specs
        started = time.monotonic()
        try:
            reply = self.model.chat(sent, specs, on_token=self._token, on_thinking=self._thinking)
        except ContextOverflowError as exc:
            if self.fitter is None:
                raise
            self.fitter.overflowed(sent, exc)
            self.hooks.emit(WarningEvent(
                message="the request was longer than the model's window; sending it trimmed"))
            sent = self.fitter.fit(prompt + self.messages)
            reply = self.model.chat(sent, specs, on_token=self._token, on_thinking=self._thinking)
        if self.fitter is not None:
            self.fitter.observe(sent, reply.usage)
        self.hooks.emit(ModelRequestEvent(
            model=self.model.name, messages=len(sent),
            prompt_bytes=sum(map(len, map(_CONTENT, sent))), tools=[s.name for s in specs],
            duration_ms=round((time.monotonic() - started) * 1000, 1),
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens, reply=reply.raw, prompt=sent,
        ))
        return reply

    def _note_cut_request(self, sent: Sequence[Message]) -> None:
        """Warn when the request itself did not fit the context window (the fitter then sends
        its head and tail only): a person should know the model never saw its middle."""
        latest = self._latest_user()
        if latest is None or latest is self._cut_noted or any(map(partial(is_, latest), sent)):
            return
        self._cut_noted = latest
        self.hooks.emit(WarningEvent(
            message=f"the request ({len(latest.content):,} characters) does not fit the "
                    "model's context window: only its start and end were sent, the middle cut "
                    "(send a smaller request, or raise --max-tokens if the model's window is "
                    "larger)"))

    def _latest_user(self) -> Message | None:
        """The conversation's latest user message, from the messages added since the last
        look (every message again when the list was cleared or replaced since): a turn costs
        what it added, not the whole conversation."""
        count, last, latest = self._users_seen
        messages = self.messages
        if count > len(messages) or (count and messages[count - 1] is not last):
            count, latest = 0, None
        for message in messages[count:]:
            if message.role == "user":
                latest = message
        self._users_seen = (len(messages), messages[-1] if messages else None, latest)
        return latest

    def _token(self, text: str) -> None:
        self.hooks.emit(TokenEvent(text=text))

    def _thinking(self, text: str) -> None:
        self.hooks.emit(ThinkingEvent(text=text))

    def _cut(self, reply: ModelReply, cuts: int, turn: int,
             records: list[ToolCallRecord]) -> int:
        """A reply the model did not end is said; it is asked again (for a short reply) once
        per run: a second cut that cannot be used ends the run rather than loop."""
        why = ("kept repeating itself" if reply.cut == "repetition"
               else "reached the per-reply token limit")
        if reply.problem is None:
            self.hooks.emit(WarningEvent(message=f"the model's reply {why} and was cut; "
                                                 "what it wrote before the cut is used"))
            return cuts
        if cuts:
            raise MaxTurnsExceeded(
                f"no final answer: stopped after {turn} model turns because the model's reply "
                f"was cut again ({why}); done so far: {progress_of(records)}",
                fix="make the request smaller, or use a more capable model (--provider ollama)")
        self.hooks.emit(WarningEvent(message=f"the model's reply {why} and was cut; "
                                             "asking once for a short reply"))
        return cuts + 1

    def _reject(self, reply: ModelReply, bad_replies: int) -> int:
        """Tell the model what was wrong with its reply; give up after a few in a row."""
        if bad_replies + 1 >= self.max_bad_replies:
            raise AgentError(
                f"the model sent {bad_replies + 1} unusable replies in a row: {reply.problem}",
                fix="try a more capable model"
                + ("" if self.model.tool_protocol == "constrained"
                   else ", or --tool-protocol constrained"),
            )
        self.hooks.emit(WarningEvent(message=f"unusable model reply: {reply.problem}"))
        # A cut reply goes back without its repeated tail: copies in the context invite more.
        said = reply.message.content if reply.cut else reply.raw or reply.message.content
        self.add(Message.assistant(said))
        self.add(Message.user(f"Your last reply could not be used: {reply.problem}"))
        return bad_replies + 1

    def execute(self, call: ToolCall) -> ToolCallRecord:
        """Validate, authorize and run one call; the result is added to the conversation."""
        record = self._run_tool(call)
        if self.coach is not None:
            self.coach.observe(call, record.result)
        self.add(Message.tool(call, record.result.output))
        self.hooks.emit(ToolResultEvent(
            call_id=call.id, tool=call.name, ok=record.result.ok,
            output=record.result.output, meta=record.result.meta,
        ))
        return record

    def _run_tool(self, call: ToolCall) -> ToolCallRecord:
        tool = self.tools.get(call.name)
        if tool is None:
            return self._refused(call, f"Unknown tool '{call.name}'. Available tools: "
                                       f"{', '.join(self.tools.names())}.", "unknown-tool")
        try:
            args = tool.validate(call.arguments)
        except ValidationError as exc:
            return self._refused(call, format_validation_error(call.name, exc), "invalid-arguments")
        refusal = self.coach.refuse(call, self.context.sandbox) if self.coach else None
        if refusal is not None:
            rule, why = refusal
            return self._refused(call, why, rule)
        verdict = self.authorize(tool, args, call)
        self.hooks.emit(ToolCallEvent(
            call_id=call.id, tool=call.name, arguments=call.arguments,
            decision="allow" if verdict.allowed else "deny", rule=verdict.rule,
            approved_by=verdict.approved_by, reason=verdict.reason,
        ))
        if not verdict.allowed:
            return ToolCallRecord(call, ToolResult.error(f"Denied: {verdict.reason}"), verdict.rule)
        try:
            result = self._call(tool, args, verdict.host_args, call)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, a hang-up: the audit still gets its end
            self.hooks.emit(ToolResultEvent(call_id=call.id, tool=call.name, ok=False,
                                            output=INTERRUPTED_RESULT, meta={"interrupted": True}))
            raise
        return ToolCallRecord(call, result, verdict.rule, verdict.approved_by)

    def _call(self, tool: Tool, args: BaseModel, host_args: Mapping[str, Any],
              call: ToolCall) -> ToolResult:
        started = time.monotonic()
        context = replace(self.context, host_args=host_args, on_output=self._output_of(call))
        try:
            result = tool.call(args, context)
        except SandboxAgentError:
            raise  # infrastructure (engine, toolbox, audit): the run cannot go on
        except Exception as exc:  # a custom tool's bug is the model's result, not a crash
            self.hooks.emit(WarningEvent(message=f"tool {tool.name} raised {exc!r}"))
            result = ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {exc}")
        result.meta.setdefault("duration_ms", round((time.monotonic() - started) * 1000, 1))
        return result

    def _output_of(self, call: ToolCall) -> Callable[[str, str], None]:
        """Relays a running command's output as `tool_output` events (untrusted text)."""

        def relay(stream: str, text: str) -> None:
            self.hooks.emit(ToolOutputEvent(
                call_id=call.id, tool=call.name, text=text,
                stream="stderr" if stream == "stderr" else "stdout"))

        return relay

    def _refused(self, call: ToolCall, message: str, rule: str) -> ToolCallRecord:
        self.hooks.emit(ToolCallEvent(
            call_id=call.id, tool=call.name, arguments=call.arguments,
            decision="reject", rule=rule, approved_by=None, reason=message,
        ))
        return ToolCallRecord(call, ToolResult.error(message), rule)

