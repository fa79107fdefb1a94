"""The agent loop, driven by the deterministic ScriptedModel in an in-memory sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from executor.agent import Agent, Authorization
from executor.context import ContextWindow, TokenCounter
from executor.errors import AgentError, AuditError, MaxTurnsExceeded
from executor.hooks import Event, HookBus
from executor.messages import Message, ModelReply, ToolCall, ToolResult, Usage
from executor.models import ScriptedModel
from executor.models.parsing import cut_note, cut_reply
from executor.protocols import Sandbox
from executor.tools import (
    Tool,
    ToolContext,
    ToolRegistry,
    default_registry,
    format_validation_error,
)
from executor.tools.builtin import ReadFileArgs
from tests.fakes.sandbox import FakeSandbox


def allow(tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
    """Every call may run (as with --yes)."""
    return Authorization(True, "test:allow", approved_by="--yes")


def calls(*tool_calls: tuple[str, dict[str, Any]]) -> Message:
    """An assistant turn calling these tools (ids c1, c2, ... in order)."""
    return Message.assistant("", [ToolCall(id=f"c{i}", name=name, arguments=args)
                                  for i, (name, args) in enumerate(tool_calls, 1)])


def unusable(problem: str = "not a JSON object") -> ModelReply:
    """A reply the parser could not use."""
    return ModelReply(message=Message.assistant("garbage"), problem=problem, raw="garbage")


class ListSink:
    """A MessageSink that keeps what it is given."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def append(self, message: Message) -> None:
        self.messages.append(message)


def make_agent(script: list[Any], sandbox: FakeSandbox | None = None, **fields: Any) -> Agent:
    """An agent on the built-in tools, a started fake sandbox and a ScriptedModel."""
    box = sandbox or FakeSandbox()
    box.start()
    context = ToolContext(sandbox=box, root=Path("/project"), read_only=False, session_id="t")
    return Agent(model=ScriptedModel(script), context=context,
                 **{"authorize": allow, "tools": default_registry(), **fields})


def model_of(agent: Agent) -> ScriptedModel:
    assert isinstance(agent.model, ScriptedModel)
    return agent.model


def sandbox_of(agent: Agent) -> FakeSandbox:
    assert isinstance(agent.context.sandbox, FakeSandbox)
    return agent.context.sandbox


def record_events(agent: Agent) -> list[Event]:
    events: list[Event] = []
    agent.hooks.subscribe(events.append)
    return events


def test_the_fake_sandbox_satisfies_the_protocol() -> None:
    assert isinstance(FakeSandbox(), Sandbox)


# -- tool calls that cannot run are results the model sees ---------------------------------------


def test_unknown_tool_is_an_error_result_and_the_run_continues() -> None:
    agent = make_agent([calls(("teleport", {"to": "mars"})), Message.assistant("sorry")])

    result = agent.run("go")

    assert result.answer == "sorry" and result.turns == 2
    [record] = result.tool_calls
    assert not record.result.ok and record.rule == "unknown-tool"
    seen = model_of(agent).calls[1].messages[-1]
    assert (seen.role, seen.tool_call_id) == ("tool", "c1")
    assert seen.content.startswith("Unknown tool 'teleport'. Available tools: read_file, ")
    assert "run_shell_command" in seen.content
    assert sandbox_of(agent).calls == []


def test_invalid_arguments_are_explained_with_format_validation_error() -> None:
    bad = {"path": 7, "start_line": 0, "colour": "red"}
    agent = make_agent([calls(("read_file", bad)), Message.assistant("fixed")])

    agent.run("read it")

    with pytest.raises(ValidationError) as info:
        ReadFileArgs.model_validate(bad)
    seen = model_of(agent).calls[1].messages[-1]
    assert seen.content == format_validation_error("read_file", info.value)
    assert "- path:" in seen.content and "- colour:" in seen.content
    assert sandbox_of(agent).calls == []


def test_a_denied_call_is_not_executed_and_the_model_is_told_why() -> None:
    def no_writes(tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
        if tool.name == "write_file":
            return Authorization(False, "policy.toml:3", reason="writes are off today")
        return allow(tool, args, call)

    agent = make_agent(
        [calls(("write_file", {"path": "a.py", "content": "x"}), ("read_file", {"path": "a.py"})),
         Message.assistant("could only read")],
        authorize=no_writes,
    )
    events = record_events(agent)

    result = agent.run("write and read")

    assert sandbox_of(agent).calls == [("read_file", {"path": "a.py"})]
    denied, read = result.tool_calls
    assert (denied.result.ok, denied.result.output, denied.rule) == (
        False, "Denied: writes are off today", "policy.toml:3")
    assert read.result.ok and read.approved_by == "--yes"
    sent = model_of(agent).calls[1].messages
    assert [(m.tool_call_id, m.content) for m in sent[-2:]] == [
        ("c1", "Denied: writes are off today"), ("c2", "read_file ok")]
    decisions = [e.data["decision"] for e in events if e.kind == "tool_call"]
    assert decisions == ["deny", "allow"]


# -- unusable replies, turn limits ---------------------------------------------------------------


def test_an_unusable_reply_is_reported_to_the_model_which_is_asked_again() -> None:
    agent = make_agent([unusable("no JSON object found"), Message.assistant("better")])
    events = record_events(agent)

    assert agent.run("go").answer == "better"

    retried = model_of(agent).calls[1].messages
    assert [(m.role, m.content) for m in retried[-2:]] == [
        ("assistant", "garbage"),
        ("user", "Your last reply could not be used: no JSON object found")]
    assert any(e.kind == "warning" and "no JSON object found" in e.data["message"]
               for e in events)


def test_unusable_replies_in_a_row_stop_the_run() -> None:
    agent = make_agent([unusable(), unusable(), unusable("still garbage"), "never reached"],
                       max_bad_replies=3)

    with pytest.raises(AgentError, match="3 unusable replies in a row: still garbage"):
        agent.run("go")

    assert len(model_of(agent).calls) == 3


def test_a_good_reply_resets_the_unusable_count() -> None:
    agent = make_agent(
        [unusable(), unusable(), calls(("list_files", {})), unusable(), unusable(),
         Message.assistant("done")],
        max_bad_replies=3,
    )

    assert agent.run("go").answer == "done"
    assert sandbox_of(agent).tools_called == ["list_files"]


# -- replies cut at the token cap or stopped for repeating themselves ------------------------------

LOOP = "The test is case-sensitive, so 'HI' is not the same as 'hi'. "
CUT_ANSWER = '{"answer": "test_whisper fails: it expects \'hi...\'. ' + LOOP * 12
CUT_CALL = '{"name": "write_file", "arguments": {"path": "a.py", "content": "' + "x = 1\\n" * 99


def test_an_answer_cut_while_being_written_ends_the_run_with_a_note() -> None:
    agent = make_agent([cut_reply(CUT_ANSWER, "constrained", "length"), "never reached"])
    events = record_events(agent)

    result = agent.run("Which test fails?")

    assert result.turns == 1 and len(model_of(agent).calls) == 1
    assert result.answer.startswith("test_whisper fails: it expects 'hi...'.")
    assert result.answer.count("case-sensitive") == 1
    assert result.answer.endswith(cut_note("length"))
    assert result.cut == "length"
    assert result.truncated is not None and "per-reply token limit" in result.truncated
    assert any(e.kind == "warning" and "per-reply token limit" in e.data["message"]
               for e in events)


def test_a_whole_answer_after_a_cut_call_is_not_truncated() -> None:
    agent = make_agent([cut_reply(CUT_CALL, "constrained", "length"), "all done"])

    result = agent.run("go")

    assert result.answer == "all done" and result.cut is None and result.truncated is None


def test_a_cut_call_is_asked_again_once_for_a_short_reply_without_its_repeated_tail() -> None:
    agent = make_agent([cut_reply(CUT_CALL, "constrained", "repetition"),
                        Message.assistant("wrote nothing")])

    assert agent.run("go").answer == "wrote nothing"

    said, asked = model_of(agent).calls[1].messages[-2:]
    assert said.role == "assistant" and said.content.count("x = 1") == 1
    assert asked.role == "user" and "Send a short reply" in asked.content


def test_a_second_cut_that_cannot_be_used_ends_the_run_instead_of_looping() -> None:
    cut = cut_reply(CUT_CALL, "constrained", "length")
    agent = make_agent([calls(("list_files", {})), cut, cut, "never reached"],
                       max_bad_replies=3)

    with pytest.raises(MaxTurnsExceeded, match=r"after 3 model turns because the model's "
                                               r"reply was cut again") as info:
        agent.run("go")

    assert len(model_of(agent).calls) == 3
    assert "1 tool call(s)" in info.value.message


def test_no_answer_within_max_turns_raises() -> None:
    agent = make_agent([calls(("list_files", {}))] * 3 + [Message.assistant("late")], max_turns=3)

    with pytest.raises(MaxTurnsExceeded) as info:
        agent.run("loop")

    assert info.value.exit_code == 31 and "3 model turns" in str(info.value)
    assert len(model_of(agent).calls) == 3
    assert sandbox_of(agent).tools_called == ["list_files"] * 3


# -- events ------------------------------------------------------------------------------------


def test_every_step_is_announced_with_its_fields() -> None:
    box = FakeSandbox({"read_file": ToolResult(ok=True, output="1\tx = 1", meta={"bytes": 6})})
    reply = ModelReply(message=Message.assistant("x is 1"), raw="x is 1",
                       usage=Usage(prompt_tokens=321, completion_tokens=4))
    agent = make_agent([calls(("read_file", {"path": "a.py"})), reply], sandbox=box)
    events = record_events(agent)

    agent.run("what is x?")

    assert [e.kind for e in events] == [
        "model_request", "tool_call", "tool_result", "token", "model_request"]
    first, call, result, token, last = (e.data for e in events)
    assert first["model"] == "scripted" and first["messages"] == 1
    assert first["prompt_bytes"] == len("what is x?")
    assert first["tools"] == default_registry().names()
    assert first["duration_ms"] >= 0 and first["prompt_tokens"] is None
    assert (last["prompt_tokens"], last["completion_tokens"], last["reply"]) == (321, 4, "x is 1")
    assert last["messages"] == 3
    assert call == {"call_id": "c1", "tool": "read_file", "arguments": {"path": "a.py"},
                    "decision": "allow", "rule": "test:allow", "approved_by": "--yes",
                    "reason": ""}
    assert {k: result[k] for k in ("call_id", "tool", "ok", "output")} == {
        "call_id": "c1", "tool": "read_file", "ok": True, "output": "1\tx = 1"}
    assert result["meta"]["bytes"] == 6 and result["meta"]["duration_ms"] >= 0
    assert token == {"text": "x is 1"}


def test_a_failing_subscriber_does_not_break_the_run() -> None:
    agent = make_agent([calls(("list_files", {})), Message.assistant("done")])
    seen: list[str] = []

    def broken(event: Event) -> None:
        seen.append(event.kind)
        raise RuntimeError("subscriber bug")

    agent.hooks.subscribe(broken)

    assert agent.run("go").answer == "done"
    assert sandbox_of(agent).tools_called == ["list_files"]
    assert "tool_call" in seen and "tool_result" in seen


def test_a_critical_subscriber_failing_on_tool_call_stops_the_run_before_the_tool_runs() -> None:
    bus = HookBus()

    def audit(event: Event) -> None:
        raise AuditError("audit record could not be written")

    bus.subscribe(audit, "tool_call", critical=True)
    agent = make_agent([calls(("run_shell_command", {"command": "rm -rf build"})), "never"],
                       hooks=bus)

    with pytest.raises(AuditError):
        agent.run("clean up")

    assert sandbox_of(agent).calls == []
    assert len(model_of(agent).calls) == 1
    assert not any(m.role == "tool" for m in agent.messages)


# -- what is kept and what is sent -------------------------------------------------------------


def test_messages_reach_the_sink_in_order_as_they_happen() -> None:
    sink = ListSink()
    agent = make_agent([unusable("bad"), calls(("list_files", {}), ("read_file", {"path": "a"})),
                        Message.assistant("done")], sink=sink)

    agent.run("go")

    assert [(m.role, m.content, m.tool_call_id) for m in sink.messages] == [
        ("user", "go", None),
        ("assistant", "garbage", None),
        ("user", "Your last reply could not be used: bad", None),
        ("assistant", "", None),
        ("tool", "list_files ok", "c1"),
        ("tool", "read_file ok", "c2"),
        ("assistant", "done", None),
    ]
    assert sink.messages == agent.messages


def test_each_message_is_persisted_before_the_next_model_request() -> None:
    sink = ListSink()
    persisted_at_request: list[int] = []
    agent = make_agent([calls(("list_files", {})), Message.assistant("done")], sink=sink)
    agent.hooks.subscribe(lambda e: persisted_at_request.append(len(sink.messages)),
                          "model_request")

    agent.run("go")

    # model_request is emitted after the reply arrives, before that reply is added
    assert persisted_at_request == [1, 3]


def test_the_system_prompt_is_sent_first_every_time_and_never_persisted() -> None:
    sink = ListSink()
    agent = make_agent([calls(("list_files", {})), Message.assistant("done")],
                       system_prompt="You are a test agent.", sink=sink)

    agent.run("go")

    for call in model_of(agent).calls:
        assert (call.messages[0].role, call.messages[0].content) == (
            "system", "You are a test agent.")
        assert sum(m.role == "system" for m in call.messages) == 1
    assert all(m.role != "system" for m in sink.messages + agent.messages)


def test_the_context_window_is_applied_to_every_request() -> None:
    budget = 400
    window = ContextWindow(budget=budget, counter=TokenCounter(None))
    earlier = [Message.user(f"old question {n} " + "words " * 60) for n in range(10)]
    big = ToolResult(ok=True, output="line of output\n" * 200)
    agent = make_agent(
        [calls(("read_file", {"path": "huge.log"})), Message.assistant("done")],
        sandbox=FakeSandbox({"read_file": big}), system_prompt="SYSTEM", fitter=window,
        messages=list(earlier),
    )

    agent.run("latest question")

    sent = [call.messages for call in model_of(agent).calls]
    assert len(sent) == 2
    for messages in sent:
        assert messages[0].content == "SYSTEM"
        assert window.counter.count_messages(messages) <= budget
        assert any("omitted" in m.content for m in messages if m.role == "system")
        assert any(m.content == "latest question" for m in messages)
    assert sent[0][-1].content == "latest question"
    assert [m.role for m in sent[1][-2:]] == ["assistant", "tool"]
    assert "[... truncated " in sent[1][-1].content  # too big for the budget: cut with a marker
    assert agent.messages[:10] == earlier and agent.messages[-1].content == "done"  # kept whole
    assert agent.messages[-2].content == big.output


class CuttingFitter:
    """A fitter that sends what `keep` leaves of every request (a stand-in for a window too
    small for the request itself: its head and tail are sent, a copy)."""

    def __init__(self, keep: Any) -> None:
        self.keep = keep

    def fit(self, messages: Any) -> list[Message]:
        return self.keep(list(messages))

    def observe(self, sent: Any, usage: Any) -> None:
        pass

    def overflowed(self, sent: Any, error: Any) -> None:
        pass


def _request_cut_warnings(events: list[Event]) -> list[str]:
    return [e.message for e in events  # type: ignore[attr-defined]
            if e.kind == "warning" and "does not fit the model's context window" in e.message]


def test_a_request_the_window_cuts_is_said_once_per_request() -> None:
    """The request the model gets only a copy of is named once however many turns follow,
    the next run's own request again, also after the conversation was compacted away."""
    def copied(messages: list[Message]) -> list[Message]:
        return [m.model_copy() if m.role == "user" else m for m in messages]

    read = ("read_file", {"path": "a.txt"})
    agent = make_agent([calls(read), calls(read), Message.assistant("one"),
                        calls(read), Message.assistant("two"), Message.assistant("three")],
                       fitter=CuttingFitter(copied))
    events = record_events(agent)

    agent.run("first request")
    assert len(_request_cut_warnings(events)) == 1
    assert "(13 characters)" in _request_cut_warnings(events)[0]
    agent.run("the second, longer request")
    assert len(_request_cut_warnings(events)) == 2
    assert "(26 characters)" in _request_cut_warnings(events)[1]
    agent.messages[:] = [Message.system("[compacted] earlier")]  # as /compact does
    agent.run("third")
    assert len(_request_cut_warnings(events)) == 3
    assert "(5 characters)" in _request_cut_warnings(events)[2]


def test_a_request_sent_as_it_is_is_never_said_to_be_cut() -> None:
    read = ("read_file", {"path": "a.txt"})
    agent = make_agent([calls(read), calls(read), Message.assistant("one"),
                        Message.assistant("two")], fitter=CuttingFitter(list))
    events = record_events(agent)
    agent.run("first request")
    agent.messages.clear()
    agent.run("again")
    assert _request_cut_warnings(events) == []


def test_a_custom_tool_that_raises_is_a_failed_result_not_a_crash():
    class Broken(Tool):
        name = "broken"
        description = "Always raises."

        class Args(BaseModel):
            pass

        def call(self, args: Any, ctx: ToolContext) -> ToolResult:
            raise ValueError("boom")

    agent = make_agent([calls(("broken", {})), "done"], tools=ToolRegistry([Broken()]))
    warnings: list[str] = []
    agent.hooks.subscribe(lambda e: warnings.append(e.data["message"]), "warning")
    result = agent.run("go")
    assert result.answer == "done"
    assert result.tool_calls[0].result.output == "broken failed: ValueError: boom"
    assert not result.tool_calls[0].result.ok
    assert warnings and "boom" in warnings[0]


def test_an_approved_calls_guard_reaches_the_sandbox_but_not_the_model() -> None:
    def approved(tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
        guard = {"expect_sha256": "ab" * 32} if tool.name == "write_file" else {}
        return Authorization(True, "test:ask", approved_by="user", host_args=guard)

    agent = make_agent([calls(("write_file", {"path": "a.txt", "content": "x"}),
                              ("read_file", {"path": "a.txt"})), "done"], authorize=approved)
    agent.run("write it")
    assert sandbox_of(agent).calls == [
        ("write_file", {"path": "a.txt", "content": "x", "expect_sha256": "ab" * 32}),
        ("read_file", {"path": "a.txt"}),
    ]
    assert agent.context.host_args == {}  # per call: the agent's own context never holds it
    assert agent.messages[1].tool_calls[0].arguments == {"path": "a.txt", "content": "x"}


def test_the_model_cannot_send_the_host_only_guard_itself() -> None:
    agent = make_agent([calls(("write_file", {"path": "a.txt", "content": "x",
                                              "expect_sha256": "absent"})), "done"])
    agent.run("write it")
    assert sandbox_of(agent).calls == []  # rejected before anything ran
    assert "expect_sha256" in agent.messages[2].content
    assert agent.messages[2].content.startswith("Invalid arguments for write_file")


# -- honest endings ------------------------------------------------------------------------------

FAILED_EDIT = ToolResult.error("old_text not found in calc.py")


def test_an_answer_after_only_failed_changes_is_unfinished() -> None:
    edit = ("edit_file", {"path": "calc.py", "old_text": "a", "new_text": "b"})
    agent = make_agent([calls(edit), calls(edit), Message.assistant("I fixed calc.py.")],
                       sandbox=FakeSandbox({"edit_file": FAILED_EDIT}))

    result = agent.run("fix calc.py")

    assert result.answer == "I fixed calc.py."
    assert result.unfinished is not None
    assert "all 2 attempted" in result.unfinished and "old_text not found" in result.unfinished


@pytest.mark.parametrize("script", [
    [calls(("read_file", {"path": "calc.py"})), Message.assistant("It adds.")],  # a question
    [calls(("edit_file", {"path": "calc.py", "old_text": "a", "new_text": "b"})),
     calls(("write_file", {"path": "calc.py", "content": "b"})), Message.assistant("Done.")],
])
def test_a_run_that_changed_a_file_or_tried_none_is_finished(script: list[Any]) -> None:
    box = FakeSandbox({"edit_file": FAILED_EDIT})  # the edit fails, the write after it works
    assert make_agent(script, sandbox=box).run("go").unfinished is None


