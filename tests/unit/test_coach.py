"""The Coach in the agent loop, driven by the ScriptedModel in an in-memory sandbox.

Each test scripts a weak model's typical mistake and asserts what the model is told and what
reaches the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from executor.agent import Agent, Authorization
from executor.coach import Coach, norm_path
from executor.hooks import Event
from executor.messages import Message, ToolCall, ToolResult
from executor.models import ScriptedModel
from executor.tools import Tool, ToolContext, default_registry
from tests.fakes.sandbox import FakeSandbox


def allow(tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
    return Authorization(True, "test:allow", approved_by="--yes")


def call(name: str, **arguments: Any) -> Message:
    """An assistant turn with one call."""
    return Message.assistant("", [ToolCall(name=name, arguments=arguments)])


def existing(*paths: str) -> FakeSandbox:
    """A sandbox whose preview says these paths exist (and nothing else does)."""
    def preview(request: dict[str, Any]) -> ToolResult:
        path = request["args"]["path"]
        return ToolResult(ok=True, output="", meta={"exists": norm_path(path) in paths})
    return FakeSandbox({"preview": preview})


def coached(script: list[Any], box: FakeSandbox | None = None,
            history: list[Message] | None = None, check: bool = False) -> Agent:
    """An agent with a coach (asking for checks only when `check`) on the built-in tools."""
    box = box or FakeSandbox()
    box.start()
    context = ToolContext(sandbox=box, root=Path("/project"), read_only=False, session_id="t")
    return Agent(model=ScriptedModel(script), tools=default_registry(), context=context,
                 authorize=allow, coach=Coach(check_changes=check), messages=list(history or []))


def ran(agent: Agent) -> list[str]:
    """Tools that reached the sandbox, previews left out."""
    assert isinstance(agent.context.sandbox, FakeSandbox)
    return [name for name, _ in agent.context.sandbox.calls if name != "preview"]


def told(agent: Agent) -> list[str]:
    """What the model was told after the first message: tool results and nudges."""
    return [m.content for m in agent.messages[1:] if m.role in ("tool", "user")]


def test_paths_name_one_file_however_they_are_written() -> None:
    assert {norm_path(p) for p in ("a/b.py", "./a/b.py", "/workspace/a/b.py", "a/x/../b.py",
                                   " a/b.py ")} == {"a/b.py"}


def test_overwriting_an_unread_file_is_refused_once_with_what_to_do() -> None:
    agent = coached([call("write_file", path="calc.py", content="def mul(): ..."),
                     call("read_file", path="calc.py"),
                     call("edit_file", path="calc.py", old_text="x", new_text="y"),
                     "done"], existing("calc.py"))
    assert agent.run("add mul to calc.py").answer == "done"
    assert ran(agent) == ["read_file", "edit_file"]
    refusal = told(agent)[0]
    assert refusal.startswith("Not written: calc.py already exists and you have not read it")
    assert "read_file" in refusal and "edit_file" in refusal


def test_a_read_or_written_file_may_be_overwritten() -> None:
    agent = coached([call("read_file", path="./a.py"),
                     call("write_file", path="a.py", content="1"),
                     call("write_file", path="new.py", content="1"),
                     call("write_file", path="new.py", content="2"),
                     "done"], existing("a.py"))
    agent.run("go")
    assert ran(agent) == ["read_file", "write_file", "write_file", "write_file"]


def test_a_new_file_is_written_without_asking_anything_but_whether_it_exists() -> None:
    agent = coached([call("write_file", path="new.py", content="x"), "done"], existing())
    agent.run("go")
    assert agent.context.sandbox.calls[0][0] == "preview"  # type: ignore[attr-defined]
    assert ran(agent) == ["write_file"]


def test_a_second_blind_overwrite_goes_through() -> None:
    agent = coached([call("write_file", path="a.py", content="1"),
                     call("write_file", path="a.py", content="1"), "done"], existing("a.py"))
    agent.run("replace a.py")
    assert ran(agent) == ["write_file"]


def test_a_resumed_conversation_counts_what_it_read() -> None:
    read = ToolCall(id="r1", name="read_file", arguments={"path": "a.py"})
    history = [Message.user("look"), Message.assistant("", [read]), Message.tool(read, "1\tx"),
               Message.assistant("ok")]
    agent = coached([call("write_file", path="a.py", content="y"), "done"], existing("a.py"),
                    history)
    agent.run("now rewrite it")
    assert ran(agent) == ["write_file"]


def test_an_answer_after_a_failed_edit_goes_back_once_with_the_error() -> None:
    box = existing("a.py")
    box.results["edit_file"] = ToolResult.error("old_text not found in 'a.py' (0 matches).")
    notices: list[Event] = []
    agent = coached([call("edit_file", path="a.py", old_text="x", new_text="y"),
                     '{"answer": "old_text not found"}',
                     call("read_file", path="a.py"),
                     "it cannot be done"], box)
    agent.hooks.subscribe(notices.append, "notice")
    assert agent.run("change a.py").answer == "it cannot be done"
    nudge = told(agent)[1]
    assert nudge.startswith("Your edit_file call failed, so nothing was changed: old_text not "
                            "found in 'a.py' (0 matches).")
    assert len(notices) == 1 and nudge in notices[0].data["message"]


def test_an_answer_after_a_command_that_is_not_installed_goes_back() -> None:
    box = FakeSandbox({"run_shell_command": ToolResult(
        ok=False, output="exit_code: 127\nstderr:\nsh: 1: python: not found",
        meta={"exit_code": 127})})
    agent = coached([call("run_shell_command", command="python x.py"),
                     "python is not installed", "python3 prints 5"], box)
    assert agent.run("run x.py").answer == "python3 prints 5"
    assert told(agent)[1].startswith("Your command failed: 'python' is not installed in the "
                                     "sandbox (exit code 127).")


def test_a_failing_test_run_is_an_answer_not_a_mistake() -> None:
    box = FakeSandbox({"run_shell_command": ToolResult(
        ok=False, output="exit_code: 1\nFAILED test_x", meta={"exit_code": 1})})
    agent = coached([call("run_shell_command", command="python3 -m unittest"),
                     "test_x fails"], box)
    assert agent.run("which test fails?").answer == "test_x fails"


def test_claiming_a_change_that_never_happened_goes_back_once() -> None:
    agent = coached(["I added multiply() to calc.py.",
                     call("read_file", path="calc.py"),
                     "I added multiply() to calc.py."])
    assert agent.run("add multiply to calc.py").answer == "I added multiply() to calc.py."
    assert told(agent)[0].startswith("You answered that something was changed, but no file")
    assert ran(agent) == ["read_file"]


def test_a_claim_after_a_real_change_is_accepted() -> None:
    agent = coached([call("edit_file", path="a.py", old_text="1", new_text="2"),
                     "I changed a.py."])
    assert agent.run("change a.py").answer == "I changed a.py."
    assert len(agent.messages) == 4


def test_a_shell_command_that_changed_files_counts_as_a_change() -> None:
    box = FakeSandbox({"run_shell_command": ToolResult(
        ok=True, output="exit_code: 0", meta={"exit_code": 0,
                                              "changes": [{"path": "a.py", "change": "modified"}]})})
    agent = coached([call("run_shell_command", command="sed -i s/a/b/ a.py"), "Updated a.py."],
                    box)
    assert agent.run("replace a with b").answer == "Updated a.py."


def test_answers_that_claim_nothing_are_accepted_at_once() -> None:
    agent = coached([call("read_file", path="config.py"), "The port is 8731."])
    assert agent.run("which port?").answer == "The port is 8731."


def test_nudges_are_capped_per_run_and_reset_for_the_next_request() -> None:
    box = FakeSandbox({"edit_file": ToolResult.error("no match")})
    script: list[Any] = []
    for attempt in range(3):
        script += [call("edit_file", path="a.py", old_text=f"x{attempt}", new_text="y"),
                   "gave up"]
    agent = coached([*script, call("edit_file", path="a.py", old_text="x", new_text="y"),
                     "gave up", "really"], box)
    assert agent.run("change a.py").answer == "gave up"
    nudges = [m for m in agent.messages if m.role == "user" and m.content.startswith("Your ")]
    assert len(nudges) == 2  # max_nudges: the third answer stands
    assert agent.run("try again").answer == "really"  # a new request may be nudged again


def test_an_answer_right_after_a_change_is_asked_once_for_a_check() -> None:
    agent = coached([call("edit_file", path="a.py", old_text="1", new_text="2"),
                     "I changed a.py.",
                     call("run_shell_command", command="python3 a.py"),
                     "I changed a.py; it runs."], check=True)
    assert agent.run("change a.py").answer == "I changed a.py; it runs."
    assert told(agent)[1].startswith("Before you finish, check your change")
    assert ran(agent) == ["edit_file", "run_shell_command"]


def test_a_change_already_checked_is_not_asked_about() -> None:
    agent = coached([call("write_file", path="new.py", content="print(1)"),
                     call("read_file", path="new.py"), "Created new.py."], check=True)
    assert agent.run("create new.py").answer == "Created new.py."
    agent = coached([call("read_file", path="a.py"), "a.py prints 1."], check=True)
    assert agent.run("what does a.py print?").answer == "a.py prints 1."


def test_the_check_is_asked_once_per_run() -> None:
    agent = coached([call("write_file", path="new.py", content="1"), "Done.",
                     call("write_file", path="new.py", content="2"), "Done again."], check=True)
    assert agent.run("create new.py").answer == "Done again."


def test_a_failed_edit_that_showed_the_file_counts_as_a_read() -> None:
    box = existing("a.py")
    box.results["edit_file"] = ToolResult(ok=False, output="0 matches\nThis is 'a.py' now: ...",
                                          meta={"file_shown": True})
    agent = coached([call("edit_file", path="a.py", old_text="x", new_text="y"),
                     call("write_file", path="a.py", content="z"), "Rewrote a.py."], box)
    agent.run("change a.py")
    assert ran(agent) == ["edit_file", "write_file"]


def test_an_identical_failing_call_is_not_run_again_until_something_changed() -> None:
    box = FakeSandbox({"edit_file": ToolResult.error("old_text not found in 'a.py' (0 matches)."),
                       "run_shell_command": ToolResult(ok=False, output="exit_code: 1\nFAILED",
                                                       meta={"exit_code": 1})})
    edit = call("edit_file", path="a.py", old_text="x", new_text="y")
    tests = call("run_shell_command", command="python3 -m unittest")
    agent = coached([edit, edit, tests, tests, call("write_file", path="b.py", content="1"),
                     tests, "done"], box)
    agent.run("fix it")
    assert ran(agent) == ["edit_file", "run_shell_command", "write_file", "run_shell_command"]
    refusals = [t for t in told(agent) if t.startswith("You made this exact call before")]
    assert len(refusals) == 2 and "old_text not found in 'a.py'" in refusals[0]


def test_an_answer_after_a_refused_overwrite_goes_back() -> None:
    agent = coached([call("write_file", path="calc.py", content="def mul(): ..."),
                     "I will read calc.py first.", call("read_file", path="calc.py"),
                     "calc.py has add()."], existing("calc.py"))
    assert agent.run("add mul to calc.py").answer == "calc.py has add()."
    assert told(agent)[1].startswith("Your write_file call failed, so nothing was changed: Not "
                                     "written: calc.py already exists")


def test_an_answer_right_after_a_search_that_found_nothing_goes_back() -> None:
    box = FakeSandbox({"search_files": ToolResult(ok=True, output="no matches for 'listen' in .",
                                                  meta={"matches": 0})})
    agent = coached([call("search_files", pattern="listen", path="."), "It listens nowhere.",
                     call("read_file", path="config.py"), "Port 8731."], box)
    assert agent.run("which port?").answer == "Port 8731."
    assert told(agent)[1].startswith("Your search found no matches")
