"""The Coach in the agent loop, driven by the ScriptedModel in an in-memory sandbox.

Each test scripts a weak model's typical mistake and asserts what the model is told and what
reaches the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from executor.agent import Agent, Authorization
from executor.coach import Coach, norm_path
from executor.errors import MaxTurnsExceeded
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


def searched(output: str) -> FakeSandbox:
    """A sandbox whose search_files shows `output`."""
    return FakeSandbox({"search_files": ToolResult(ok=True, output=output, meta={"matches": 3})})


RENAME_HITS = ("shop/billing.py:1:def calc_total(prices):\n"
               "shop/cart.py:1:from shop.billing import calc_total\n")


def test_claiming_a_file_was_changed_that_no_call_changed_goes_back_once() -> None:
    claim = "Renamed it in shop/billing.py. All uses in shop/cart.py have been updated too."
    agent = coached([call("search_files", pattern="calc_total"),
                     call("edit_file", path="shop/billing.py", old_text="a", new_text="b"),
                     claim,
                     call("edit_file", path="shop/cart.py", old_text="a", new_text="b"),
                     claim], searched(RENAME_HITS))
    assert agent.run("rename calc_total").answer == claim
    nudge = told(agent)[2]
    assert nudge.startswith("You answered that shop/cart.py was changed, but no call changed it")
    assert "files changed: shop/billing.py" in nudge
    assert ran(agent) == ["search_files", "edit_file", "edit_file"]


def test_a_file_named_by_its_base_name_counts_as_the_file_the_tools_showed() -> None:
    agent = coached([call("search_files", pattern="calc_total"),
                     call("edit_file", path="shop/billing.py", old_text="a", new_text="b"),
                     "I updated billing.py. I updated cart.py.", "done"], searched(RENAME_HITS))
    assert agent.run("rename calc_total").answer == "done"
    assert told(agent)[2].startswith("You answered that cart.py was changed")


def test_files_named_beside_a_change_but_not_as_changed_are_accepted() -> None:
    for answer in ("I updated shop/billing.py. shop/cart.py imports it and needs no change.",
                   "shop/billing.py was changed to match the import in shop/cart.py."):
        agent = coached([call("search_files", pattern="calc_total"),
                         call("edit_file", path="shop/billing.py", old_text="a", new_text="b"),
                         answer], searched(RENAME_HITS))
        assert agent.run("rename calc_total").answer == answer


def test_a_file_no_tool_showed_is_not_taken_for_a_claim() -> None:
    answer = "I updated shop/billing.py; you may want to update docs/notes.md too."
    agent = coached([call("search_files", pattern="calc_total"),
                     call("edit_file", path="shop/billing.py", old_text="a", new_text="b"),
                     answer], searched(RENAME_HITS))
    assert agent.run("rename calc_total").answer == answer


def test_a_command_that_changed_files_it_cannot_list_mutes_the_file_claims() -> None:
    box = searched(RENAME_HITS)
    box.results["run_shell_command"] = ToolResult(
        ok=True, output="exit_code: 0", meta={"exit_code": 0, "changes_incomplete": True,
                                              "changes": [{"path": "x", "change": "modified"}]})
    agent = coached([call("search_files", pattern="calc_total"),
                     call("run_shell_command", command="sed -i s/a/b/ shop/*.py"),
                     "Updated shop/cart.py."], box)
    assert agent.run("rename calc_total").answer == "Updated shop/cart.py."


def test_a_file_may_be_read_again_after_an_edit_of_it_failed() -> None:
    box = FakeSandbox({"edit_file": ToolResult.error("old_text not found in 'a.py' (0 matches).")})
    read = call("read_file", path="a.py")
    agent = coached([read, read, call("edit_file", path="a.py", old_text="x", new_text="y"),
                     read, "done"], box)
    agent.run("fix it")
    assert ran(agent) == ["read_file", "edit_file", "read_file"]
    assert told(agent)[1].startswith("You already made this exact read_file call")


def shrinking(removed: int, added: int) -> FakeSandbox:
    """A sandbox whose preview of a write over an existing file removes and adds lines."""
    diff = "\n".join(["--- a/calc.py", "+++ b/calc.py", "@@ -1,9 +1,2 @@",
                      *["-old"] * removed, *["+new"] * added])
    return FakeSandbox({"preview": ToolResult(ok=True, output=diff, meta={"exists": True})})


def test_a_write_that_deletes_most_of_a_read_file_is_refused_once() -> None:
    write = call("write_file", path="calc.py", content="def subtract(a, b): ...")
    agent = coached([call("read_file", path="calc.py"), write, write, "done"], shrinking(9, 2))
    agent.run("add multiply to calc.py")
    assert ran(agent) == ["read_file", "write_file"]
    assert told(agent)[1] == (
        "Not written: this would delete 9 lines of calc.py and add 2. To add or change part of "
        "a file, use edit_file and keep the rest. If you do mean to replace the whole file, "
        "send the same write_file again.")


def test_a_rewrite_that_keeps_the_size_of_a_read_file_is_written() -> None:
    write = call("write_file", path="calc.py", content="...")
    for removed, added in ((9, 5), (4, 0)):
        agent = coached([call("read_file", path="calc.py"), write, "done"],
                        shrinking(removed, added))
        agent.run("rewrite calc.py")
        assert ran(agent) == ["read_file", "write_file"]


def test_an_answer_after_an_edit_that_left_a_replaced_name_goes_back_once() -> None:
    box = FakeSandbox({"edit_file": ToolResult(
        ok=True, output="edited 'cart.py'\nnote: 'calc_total' is still on line 1: ...",
        meta={"still_there": {"calc_total": [1]}})})
    agent = coached([call("edit_file", path="cart.py", old_text="calc_total(x)",
                          new_text="compute_total(x)"), "Renamed.", "Renamed."], box)
    assert agent.run("rename calc_total").answer == "Renamed."
    assert told(agent)[1] == (
        "Your edit of cart.py left 'calc_total' (line 1) in the file, as its result notes. If "
        "the task means every use, change those too; if they should stay, give your answer "
        "again.")


def test_an_answer_before_the_file_the_request_asks_for_was_written_goes_back_once() -> None:
    agent = coached([call("run_shell_command", command="wc -l data.txt"),
                     "data.txt has 12 lines.",
                     call("write_file", path="count_lines.py", content="print(12)"),
                     "count_lines.py prints it."])
    request = "Make a script count_lines.py that prints how many lines data.txt has."
    assert agent.run(request).answer == "count_lines.py prints it."
    assert told(agent)[1] == (
        "The task asks for count_lines.py, but no call has written it. Write it now with "
        "write_file, doing what the task says: 'Make a script count_lines.py that prints how "
        "many lines data.txt has.'. Then answer.")


def test_a_file_the_request_names_that_exists_or_is_only_asked_about_is_no_nudge() -> None:
    agent = coached([call("read_file", path="calc.py"), "calc.py already has multiply()."])
    assert agent.run("Add multiply to calc.py.").answer == "calc.py already has multiply()."
    agent = coached(["It prints 12."])
    assert agent.run("What does count_lines.py print? Run it.").answer == "It prints 12."


def test_the_first_change_in_answer_to_a_question_is_refused_once() -> None:
    edit = call("edit_file", path="config.py", old_text="8731", new_text="8732")
    agent = coached([call("read_file", path="config.py"), edit, edit, "It listens on 8732."])
    agent.run("Which port does this app listen on?")
    assert ran(agent) == ["read_file", "edit_file"]
    assert told(agent)[1].startswith("Not changed: the task is a question, so answer it")
    answered = coached([call("read_file", path="config.py"), edit, "It listens on 8731."])
    assert answered.run("Which port does this app listen on?").answer == "It listens on 8731."


def test_a_question_that_asks_for_a_change_is_no_question() -> None:
    edit = call("edit_file", path="config.py", old_text="8731", new_text="8732")
    for request in ("Can you change the port to 8732?", "Which test fails? Fix it?"):
        agent = coached([edit, "done"])
        agent.run(request)
        assert ran(agent) == ["edit_file"], request


def test_a_model_that_only_repeats_a_failed_call_is_stopped() -> None:
    box = FakeSandbox({"edit_file": ToolResult.error("old_text not found in 'a.py' (0 matches).")})
    edit = call("edit_file", path="a.py", old_text="x", new_text="y")
    agent = coached([edit] * 10, box)
    with pytest.raises(MaxTurnsExceeded, match="stopped after 4 model turns because the model "
                       "repeated calls that had failed or whose result it already had, 3 times"):
        agent.run("fix it")
    assert ran(agent) == ["edit_file"]


def test_a_repeat_after_another_call_starts_the_count_again() -> None:
    box = FakeSandbox({"edit_file": ToolResult.error("old_text not found in 'a.py' (0 matches).")})
    edit = call("edit_file", path="a.py", old_text="x", new_text="y")
    agent = coached([edit, edit, edit, call("list_files", path="."), edit, edit, "gave up",
                     "gave up"], box)
    assert agent.run("fix it").answer == "gave up"
    assert ran(agent) == ["edit_file", "list_files"]


def test_a_model_that_reruns_a_command_and_rereads_a_file_is_stopped() -> None:
    run = call("run_shell_command", command="python3 count_lines.py")
    read = call("read_file", path="count_lines.py")
    agent = coached([run, read, run, read, run, read, run])
    with pytest.raises(MaxTurnsExceeded, match="3 times in a row"):
        agent.run("make count_lines.py print the count")
    assert ran(agent) == ["run_shell_command", "read_file"]
    assert told(agent)[2].startswith("You already made this exact run_shell_command call")


def test_a_command_runs_again_once_a_file_changed() -> None:
    run = call("run_shell_command", command="python3 -m unittest")
    agent = coached([run, call("write_file", path="a.py", content="x = 1"), run, "done"])
    assert agent.run("make the tests pass").answer == "done"
    assert ran(agent) == ["run_shell_command", "write_file", "run_shell_command"]
