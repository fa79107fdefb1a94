"""`Runner.build`: options split into Settings and RunOptions, tools filtered, policy wired.

No Docker: nothing here calls `start()`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from executor.agent import Agent
from executor.config import Settings
from executor.errors import ConfigError, PolicyFileError
from executor.messages import Message, ToolCall, ToolResult
from executor.models import ScriptedModel
from executor.models.ollama import OllamaModel
from executor.policy import Decision
from executor.runner import Approval, Runner
from executor.tools import Preview, RiskLevel, Tool, ToolContext
from executor.tools.builtin import EditFile, ReadFile, RunShellCommand, WriteFile
from tests.conftest import PRIVATE_ENV
from tests.fakes.sandbox import FakeSandbox

BUILTINS = ["read_file", "list_files", "search_files", "write_file", "edit_file",
            "run_shell_command"]
READ_ONLY = ["read_file", "list_files", "search_files"]


class EchoArgs(BaseModel):
    text: str


class Echo(Tool):
    """A custom host-side tool (not read-only safe)."""

    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Echo the text."
    Args: ClassVar[type[BaseModel]] = EchoArgs
    risk: ClassVar[RiskLevel] = RiskLevel.HIGH

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        return ToolResult(ok=True, output=args.text)


class Peek(Echo):
    """A custom tool that is read-only safe."""

    name: ClassVar[str] = "peek"
    read_only_safe: ClassVar[bool] = True
    risk: ClassVar[RiskLevel] = RiskLevel.LOW


def build(root: Path, **options: Any) -> Runner:
    """A runner with a scripted model (no provider is contacted)."""
    return Runner.build(root, model=ScriptedModel([]), **options)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SANDBOX_AGENT_* of the machine running the tests."""
    import os

    for name in [n for n in os.environ if n.startswith("SANDBOX_AGENT_") and n not in PRIVATE_ENV]:
        monkeypatch.delenv(name)


# -- options ---------------------------------------------------------------------------------------


def test_options_go_to_settings_or_run_options_by_name(tmp_path: Path) -> None:
    runner = build(tmp_path, max_turns=4, image="img:1", session="s1", read_only=True, yes=True)

    assert (runner.settings.max_turns, runner.settings.image) == (4, "img:1")
    assert (runner.options.session, runner.options.read_only, runner.options.yes) == (
        "s1", True, True)
    assert runner.options.root == tmp_path.resolve()


def test_an_unknown_option_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown option.*max_turn, readonly") as info:
        build(tmp_path, max_turn=3, readonly=True, yes=True)
    assert info.value.exit_code == 2


def test_an_invalid_value_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        build(tmp_path, max_turns=0)
    with pytest.raises(ConfigError, match="deny_tools"):
        build(tmp_path, deny_tools="write_file")


def test_the_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        build(tmp_path / "file.txt")
    with pytest.raises(ConfigError, match="not a directory"):
        build(tmp_path / "missing")


def test_environment_settings_are_overridden_by_explicit_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_MAX_TURNS", "7")
    monkeypatch.setenv("SANDBOX_AGENT_TIMEOUT", "33")
    monkeypatch.setenv("SANDBOX_AGENT_IMAGE", "from-env:1")

    runner = build(tmp_path, max_turns=3)

    assert runner.settings.max_turns == 3  # the option wins
    assert (runner.settings.timeout, runner.settings.image) == (33.0, "from-env:1")  # env kept


def test_given_settings_are_the_base_and_options_override_them(tmp_path: Path) -> None:
    runner = build(tmp_path, settings=Settings(max_turns=9, memory="1g"), max_turns=2)

    assert (runner.settings.max_turns, runner.settings.memory) == (2, "1g")


def test_the_model_is_built_from_the_settings_without_io(tmp_path: Path) -> None:
    runner = Runner.build(tmp_path, provider="ollama", model="m:1", host="http://127.0.0.1:9")

    assert isinstance(runner.model, OllamaModel) and runner.model.name == "m:1"
    assert not (tmp_path / ".sandbox-agent").exists()  # no session, no audit yet
    assert runner.sandbox is None and runner.agent is None


# -- tools -----------------------------------------------------------------------------------------


def test_all_builtin_tools_and_custom_ones_are_offered(tmp_path: Path) -> None:
    assert build(tmp_path, tools=[Echo()]).tools.names() == [*BUILTINS, "echo"]


def test_read_only_offers_only_read_only_safe_tools(tmp_path: Path) -> None:
    runner = build(tmp_path, tools=[Echo(), Peek()], read_only=True)

    assert runner.tools.names() == [*READ_ONLY, "peek"]
    assert runner.policy.decide(WriteFile(), {"path": "a", "content": ""},
                                interactive=False).rule == "flag --read-only"


def test_denied_tools_and_prefixes_are_removed_and_denied(tmp_path: Path) -> None:
    runner = build(tmp_path, tools=[Echo()], deny_tools=["run_shell_command"],
                   deny_prefixes=["write", "ec"], yes=True)

    assert runner.tools.names() == ["read_file", "list_files", "search_files", "edit_file"]
    shell = runner.policy.decide(RunShellCommand(), {"command": "ls"}, interactive=False)
    write = runner.policy.decide(WriteFile(), {"path": "a", "content": ""}, interactive=False)
    assert (shell.allowed, shell.rule) == (False, "flag --deny-tool")
    assert (write.allowed, write.rule) == (False, "flag --deny-prefix")


def test_denied_commands_are_denied_even_with_yes(tmp_path: Path) -> None:
    runner = build(tmp_path, deny_commands=["rm"], yes=True)

    rm = runner.policy.decide(RunShellCommand(), {"command": "ls && rm -rf /"}, interactive=False)
    ls = runner.policy.decide(RunShellCommand(), {"command": "ls -la"}, interactive=False)
    assert (rm.allowed, rm.rule) == (False, "flag --deny-command")
    assert ls.allowed and ls.approved_by == "--yes"


def test_a_policy_file_is_read_at_build(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    bad = tmp_path / "policy.toml"
    bad.write_text("[[rules]\n")
    with pytest.raises(PolicyFileError):
        build(root, policy_file=bad)


# -- approvals (the runner's authorize, without a sandbox) ----------------------------------------


def _authorize(runner: Runner, tool: Tool, args: dict[str, Any]) -> Any:
    return runner._authorize(tool, tool.validate(args), ToolCall(name=tool.name, arguments=args))


def test_non_interactive_runs_fail_closed(tmp_path: Path) -> None:
    verdict = _authorize(build(tmp_path), WriteFile(), {"path": "a", "content": "x"})

    assert not verdict.allowed and verdict.reason


def with_fake_sandbox(runner: Runner) -> FakeSandbox:
    """Give an unstarted runner an agent whose sandbox is a started fake."""
    box = FakeSandbox()
    box.start()
    context = ToolContext(sandbox=box, root=runner.options.root, read_only=False, session_id="s")
    runner.agent = Agent(model=runner.model, tools=runner.tools, context=context,
                         authorize=runner._authorize)
    return box


def test_interactive_runs_ask_the_approver(tmp_path: Path) -> None:
    asked: list[tuple[str, Decision]] = []
    shown: list[Preview] = []

    def approver(tool: Tool, args: BaseModel, decision: Decision, preview: Preview) -> bool:
        asked.append((tool.name, decision))
        shown.append(preview)
        return bool(args.model_dump()["path"] == "ok.txt")

    runner = Runner.build(tmp_path, model=ScriptedModel([]), approver=approver, interactive=True)
    box = with_fake_sandbox(runner)
    yes = _authorize(runner, WriteFile(), {"path": "ok.txt", "content": "x"})
    no = _authorize(runner, WriteFile(), {"path": "no.txt", "content": "x"})
    read = _authorize(runner, ReadFile(), {"path": "a"})

    assert (yes.allowed, yes.approved_by) == (True, "user")
    assert not no.allowed and "declined" in no.reason
    assert read.allowed
    # The person saw the sandbox's preview; the approved call carries its guard, the declined
    # one nothing (a new file: "absent").
    assert box.calls[0] == ("preview", {"tool": "write_file",
                                        "args": {"path": "ok.txt", "content": "x"}})
    assert shown[0].text.startswith("write_file ok.txt (new file, 1 line, 1 byte)")
    assert dict(yes.host_args) == {"expect_sha256": "absent"} and not no.host_args
    assert not read.host_args
    assert [name for name, _ in asked] == ["write_file", "write_file"]


def test_an_approval_says_who_and_a_refusal_why(tmp_path: Path) -> None:
    answers = iter([Approval(True, by="user:session"), Approval(False, reason="use git mv")])

    def approver(tool: Tool, args: BaseModel, decision: Decision, preview: Preview) -> Approval:
        return next(answers)

    runner = Runner.build(tmp_path, model=ScriptedModel([]), approver=approver, interactive=True)
    with_fake_sandbox(runner)
    granted = _authorize(runner, RunShellCommand(), {"command": "git status"})
    refused = _authorize(runner, RunShellCommand(), {"command": "mv a b"})

    assert (granted.allowed, granted.approved_by) == (True, "user:session")
    assert not refused.allowed
    assert refused.reason == "run_shell_command was declined by the user, who said: use git mv"


def test_a_policy_denial_never_reaches_the_approver(tmp_path: Path) -> None:
    def approver(tool: Tool, args: BaseModel, decision: Decision, preview: Preview) -> Approval:
        raise AssertionError("asked about a denied call")

    runner = Runner.build(tmp_path, model=ScriptedModel([]), approver=approver, interactive=True,
                          deny_commands=["rm"])
    with_fake_sandbox(runner)
    verdict = _authorize(runner, RunShellCommand(), {"command": "rm -rf x"})
    assert not verdict.allowed and verdict.rule == "flag --deny-command"


def test_settle_answers_calls_an_interrupt_left_open(tmp_path: Path) -> None:
    runner = build(tmp_path)
    with_fake_sandbox(runner)
    assert runner.agent is not None
    call = ToolCall(name="read_file", arguments={"path": "a"})
    runner.agent.add(Message.user("go"))
    runner.agent.add(Message.assistant("", tool_calls=[call]))
    runner.settle()
    runner.settle()  # idempotent
    last = runner.agent.messages[-1]
    assert (last.role, last.tool_call_id) == ("tool", call.id)
    assert len(runner.agent.messages) == 3 and "no result" in last.content


def test_an_approved_write_carries_the_hashes_of_what_was_shown(tmp_path: Path) -> None:
    """Before and after: the toolbox writes nothing unless the file is what was shown and the
    call writes the bytes the diff showed; a call shown as failing must not write at all."""
    shown = {"path": "a.py", "resolved": "a.py", "symlink": False, "exists": True,
             "binary": False, "sha256_before": "b" * 64, "sha256_after": "c" * 64, "error": None}
    box = FakeSandbox({"preview": ToolResult(ok=True, output="--- a/a.py\n", meta=shown)})
    box.start()
    context = ToolContext(sandbox=box, root=tmp_path, read_only=False, session_id="s")
    args = EditFile.Args(path="a.py", old_text="x", new_text="y")
    assert dict(EditFile().preview(args, context).host_args) == {
        "expect_sha256": "b" * 64, "expect_sha256_after": "c" * 64}
    box.results["preview"] = ToolResult(ok=True, output="", meta={
        **shown, "sha256_after": None, "error": "not changed: this edit would break 'a.py'"})
    failing = EditFile().preview(args, context)
    assert failing.error and dict(failing.host_args) == {
        "expect_sha256": "b" * 64, "expect_sha256_after": "fails"}


RESTARTED = ToolResult.error("edit_file did not answer within 75s. The toolbox was restarted; "
                             "the call had no result.", toolbox_restarted=True)


def _after_restart(tmp_path: Path, tool: Tool, args: BaseModel, now: str | None,
                   host_args: dict[str, Any]) -> tuple[ToolResult, FakeSandbox]:
    """Call `tool` on a sandbox whose toolbox was restarted mid-call; the file now hashes to
    `now` (None: no file), and a write_file's content hashes to "d" * 64."""
    box = FakeSandbox({tool.name: RESTARTED, "preview": ToolResult(ok=True, output="", meta={
        "path": "a.py", "resolved": "a.py", "exists": now is not None, "sha256_before": now,
        "sha256_after": "d" * 64, "error": None})})
    box.start()
    context = ToolContext(sandbox=box, root=tmp_path, read_only=False, session_id="s",
                          host_args=host_args)
    return tool.call(args, context), box


def test_a_write_cut_short_by_a_toolbox_restart_is_recorded_when_it_landed(tmp_path: Path):
    """Red-team round 8: a write that landed but whose toolbox was restarted before answering
    had no `write` record and was reported as failed. The host now looks at the file."""
    edit = EditFile.Args(path="a.py", old_text="x", new_text="y")
    guard = {"expect_sha256": "b" * 64, "expect_sha256_after": "c" * 64}
    landed, box = _after_restart(tmp_path, EditFile(), edit, "c" * 64, guard)
    assert landed.ok and "the toolbox was restarted before it answered" in landed.output
    assert landed.meta["sha256_before"] == "b" * 64 and landed.meta["sha256_after"] == "c" * 64
    assert landed.meta["path"] == "a.py" and landed.meta["toolbox_restarted"] is True
    assert [tool for tool, _ in box.calls] == ["edit_file", "preview"]
    for now in ("b" * 64, None):  # not written, or the file is gone
        missed, _ = _after_restart(tmp_path, EditFile(), edit, now, guard)
        assert not missed.ok and "may or may not have been made: read 'a.py'" in missed.output
        assert "sha256_after" not in missed.meta
    shown_failing, _ = _after_restart(tmp_path, EditFile(), edit, "c" * 64,
                                      {**guard, "expect_sha256_after": "fails"})
    assert not shown_failing.ok
    unguarded, _ = _after_restart(tmp_path, EditFile(), edit, "c" * 64, {})
    assert not unguarded.ok  # --yes: no shown hash, and an edit's result is not known here
    write = WriteFile.Args(path="a.py", content="new")
    written, _ = _after_restart(tmp_path, WriteFile(), write, "d" * 64, {})
    assert written.ok and written.meta["sha256_after"] == "d" * 64
    assert written.meta["sha256_before"] is None and written.meta["before_unknown"] is True
    new_file, _ = _after_restart(tmp_path, WriteFile(), write, "d" * 64,
                                 {"expect_sha256": "absent", "expect_sha256_after": "d" * 64})
    assert new_file.ok and new_file.meta["sha256_before"] is None
    assert new_file.meta["before_unknown"] is False
