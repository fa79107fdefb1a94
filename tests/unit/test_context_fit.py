"""Every request fits the window of the model actually served.

The stand-in model server counts prompts its own way (UTF-8 bytes / 3: more tokens than
tiktoken's estimate, as Qwen's tokenizer gives on numbered code) and refuses a request longer
than its window the way llama.cpp, vLLM or a terse server do. The agent runs its real loop
with the OpenAI-compatible provider against it; the tests look at what the server received.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from executor.agent import Agent, Authorization
from executor.context import ContextWindow, TokenCounter, counter_for
from executor.errors import ContextOverflowError
from executor.hooks import Event, WarningEvent
from executor.messages import Message, ToolCall, ToolResult
from executor.models import OpenAIModel
from executor.models.ollama import OllamaModel
from executor.models.toolproto import tools_prompt
from executor.review import ReviewRequest, SubmitReview, collect_diff, run_review, split_diff
from executor.runner import Runner
from executor.tools import Tool, ToolContext, default_registry
from tests.fakes import ModelServer
from tests.fakes.model_server import RecordedRequest, Reply
from tests.fakes.sandbox import FakeSandbox

MODULE = "\n".join(
    f"{n:6}\tdef helper_{n}(value):  # keeps {n} in range\n"
    f"{n:6}\t    return min(max(value, {n}), {n * 7})" for n in range(1, 401))
"""An 800-line numbered read_file result: the kind of output that overflowed the window."""


def allow(tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
    return Authorization(True, "test:allow", approved_by="--yes")


def agent_on(server: ModelServer, budget: int, *, protocol: str = "constrained",
             system: str = "You are a coding agent.") -> tuple[Agent, list[Event]]:
    """An agent whose model is the stand-in server, with a window of `budget` tokens."""
    box = FakeSandbox({"read_file": ToolResult(ok=True, output=MODULE)})
    box.start()
    model = OpenAIModel("fake-model", base_url=server.openai_url,
                        tool_protocol=protocol, stream=False)  # type: ignore[arg-type]
    tools = default_registry()
    agent = Agent(model=model, tools=tools, authorize=allow, system_prompt=system,
                  context=ToolContext(sandbox=box, root=Path("/p"), read_only=False,
                                      session_id="t"))
    agent.fitter = ContextWindow(budget=budget, tools=agent.specs, protocol=model.tool_protocol,
                                 counter=counter_for(None))  # as the runner builds it
    events: list[Event] = []
    agent.hooks.subscribe(events.append)
    return agent, events


def read_then_answer(server: ModelServer) -> None:
    server.reply('{"name": "read_file", "arguments": {"path": "big.py"}}')
    server.reply('{"answer": "helper_200 clamps the value."}')


def answered(server: ModelServer) -> list[Any]:
    return [r for r in server.chat_requests if r not in server.rejected]


def test_a_big_tool_result_is_cut_to_the_served_window_not_refused(
        model_server: ModelServer) -> None:
    model_server.window = 3000
    read_then_answer(model_server)
    agent, _ = agent_on(model_server, budget=3000)

    result = agent.run("What does helper_200 in big.py do?")

    assert result.answer == "helper_200 clamps the value."
    assert not model_server.rejected
    sizes = [ModelServer.prompt_size(r) for r in model_server.chat_requests]
    assert len(sizes) == 2 and max(sizes) <= 3000 * 0.9, sizes
    last = model_server.last_chat.body["messages"]
    assert "truncated" in last[-1]["content"] and "TOOL_RESULT read_file" in last[-1]["content"]
    assert tools_prompt(agent.specs)[:200] in last[0]["content"]  # the tools prompt went out


def test_the_tools_prompt_of_the_json_protocols_takes_its_room() -> None:
    specs = default_registry().specs()
    counter = TokenCounter()
    constrained = ContextWindow(budget=8192, tools=specs, protocol="constrained", counter=counter)
    native = ContextWindow(budget=8192, tools=specs, protocol="native", counter=counter)
    prompt = counter.count_text(tools_prompt(specs))
    assert constrained.overhead() >= prompt > 500
    assert native.overhead() == counter.count_tools(specs)
    assert constrained.room() == 8192 - constrained.overhead()


def test_a_huge_system_prompt_is_cut_inside_the_window(model_server: ModelServer) -> None:
    # AGENTS.md and skills are part of the system prompt: however long, it is inside the budget.
    model_server.window = 2500
    model_server.reply('{"answer": "ok"}')
    agent, _ = agent_on(model_server, budget=2500, system="Project rules.\n" + "Be nice. " * 4000)

    assert agent.run("hello").answer == "ok"
    assert not model_server.rejected
    assert ModelServer.prompt_size(model_server.last_chat) <= 2500


@pytest.mark.parametrize("style", ["llama.cpp", "vllm"])
def test_a_refused_request_is_trimmed_with_the_servers_counts_and_sent_again(
        model_server: ModelServer, style: str) -> None:
    # The budget believes in a bigger window than the one served (a server started with -c).
    model_server.window, model_server.window_style = 2000, style  # type: ignore[assignment]
    read_then_answer(model_server)
    agent, events = agent_on(model_server, budget=8192)

    result = agent.run("What does helper_200 in big.py do?")

    assert result.answer == "helper_200 clamps the value."
    assert len(model_server.rejected) == 1
    assert ModelServer.prompt_size(answered(model_server)[-1]) <= 2000
    assert any(isinstance(e, WarningEvent) and "window" in e.message for e in events)


def test_a_request_refused_twice_ends_the_run_naming_the_setting(
        model_server: ModelServer) -> None:
    model_server.window, model_server.window_style = 1500, "plain"
    read_then_answer(model_server)
    agent, _ = agent_on(model_server, budget=16384)

    with pytest.raises(ContextOverflowError) as raised:
        agent.run("What does helper_200 in big.py do?")

    assert raised.value.exit_code == 25
    assert "--max-tokens" in (raised.value.fix or "")
    assert len(model_server.rejected) == 2  # the first refusal was retried once, no more
    assert ModelServer.prompt_size(model_server.rejected[1]) < ModelServer.prompt_size(
        model_server.rejected[0])


def test_the_overflow_refusal_of_a_streamed_request_is_read_too(
        model_server: ModelServer) -> None:
    model_server.window = 50
    model_server.reply("never sent")
    model = OpenAIModel("fake-model", base_url=model_server.openai_url, stream=True)
    with pytest.raises(ContextOverflowError) as raised:
        model.chat([Message.user("word " * 400)], [])
    assert (raised.value.prompt_tokens, raised.value.context_size) == (
        ModelServer.prompt_size(model_server.last_chat), 50)


def test_ollama_overflow_fix_names_max_tokens() -> None:
    hint = OllamaModel("m", host="127.0.0.1:9")._http.server
    assert "--max-tokens" in hint.overflow_fix and "num_ctx" in hint.overflow_fix


# -- a review whose diff is bigger than the window ------------------------------------------------

def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                   check=True, capture_output=True)


def _module(name: str, lines: int, version: int) -> str:
    return "".join(f"def {name}_{n}(x):\n    return x * {n + version}\n\n" for n in range(lines))


def _reviewer(request: RecordedRequest) -> Reply:
    """Submits one finding per file the request's diff shows, then answers."""
    last = request.body["messages"][-1]["content"]
    if last.startswith("TOOL_RESULT submit_review"):
        return Reply('{"answer": "Reviewed."}')
    files = re.findall(r"(?m)^diff --git a/\S+ b/(\S+)", last)
    findings = [{"file": f, "line": 2, "severity": "low", "title": f"changed {f}", "body": ""}
                for f in dict.fromkeys(files)]
    call = {"name": "submit_review", "arguments": {"summary": f"{len(files)} files",
                                                    "findings": findings}}
    return Reply(json.dumps(call))


def test_a_diff_bigger_than_the_window_is_reviewed_in_parts_and_merged(
        model_server: ModelServer, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    names = [f"mod{n}.py" for n in range(4)]
    for name in names:
        (root / name).write_text(_module(name[:-3], 60, 0))
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "base")
    for name in names:
        (root / name).write_text(_module(name[:-3], 60, 1))
    model_server.window = model_server.context_length = 4096
    model_server.default = _reviewer
    model = OpenAIModel("fake-model", base_url=model_server.openai_url,
                        tool_protocol="constrained", stream=False)
    tool = SubmitReview()
    runner = Runner.build(root, model=model, sandbox=FakeSandbox(), read_only=True, yes=True,
                          audit=False, tools=[tool])
    request = ReviewRequest(root=root, diff_base="HEAD")
    diff, _ = collect_diff(request)
    assert TokenCounter().count_text(diff) > 4096  # the whole diff cannot be sent at once

    report = run_review(runner, request, tool)

    assert report.status == "ok", report.error
    assert not model_server.rejected
    assert all(ModelServer.prompt_size(r) <= 4096 for r in model_server.chat_requests)
    assert report.diff is not None and report.diff.parts > 1 and not report.diff.truncated
    assert sorted({f.file for f in report.findings}) == names  # every part's findings, merged
    shown = "".join(r.body["messages"][-1]["content"] for r in model_server.chat_requests)
    for name in names:  # every changed line went out in some part
        old = set(_module(name[:-3], 60, 0).splitlines())
        for line in set(_module(name[:-3], 60, 1).splitlines()) - old:
            assert f"+{line}\n" in shown


def test_split_diff_keeps_every_line_and_each_part_within_the_limit() -> None:
    counter = TokenCounter()
    diff = "".join(
        f"diff --git a/f{n}.py b/f{n}.py\n--- a/f{n}.py\n+++ b/f{n}.py\n"
        + "".join(f"@@ -{h * 50},3 +{h * 50},3 @@\n" + "".join(
            f"+line {n} {h} {k} = {k * h}\n" for k in range(40)) for h in range(3))
        for n in range(3))
    parts = split_diff(diff, 300, counter)
    assert len(parts) > 3 and all(counter.count_text(p) <= 300 for p in parts)
    body = [line for line in diff.splitlines() if line.startswith("+l")]
    assert [line for p in parts for line in p.splitlines() if line.startswith("+l")] == body
    assert all(p.startswith("diff --git ") for p in parts)  # each piece says which file


def test_a_part_whose_run_goes_nowhere_does_not_lose_the_others(
        model_server: ModelServer, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    names = [f"mod{n}.py" for n in range(4)]
    for name in names:
        (root / name).write_text(_module(name[:-3], 60, 0))
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "base")
    for name in names:
        (root / name).write_text(_module(name[:-3], 60, 1))

    def reviewer(request: RecordedRequest) -> Reply:
        last = request.body["messages"][-1]["content"]
        if "part 2 of" in last or (last.startswith("TOOL_RESULT read_file")):
            n = len(request.body["messages"])  # part 2: reads and reads, never answers
            return Reply(json.dumps({"name": "read_file", "arguments": {"path": f"f{n}.py"}}))
        return _reviewer(request)

    model_server.window = model_server.context_length = 4096
    model_server.default = reviewer
    model = OpenAIModel("fake-model", base_url=model_server.openai_url,
                        tool_protocol="constrained", stream=False)
    tool = SubmitReview()
    runner = Runner.build(root, model=model, sandbox=FakeSandbox(), read_only=True, yes=True,
                          audit=False, tools=[tool], max_turns=3)

    report = run_review(runner, ReviewRequest(root=root, diff_base="HEAD"), tool)

    assert report.status == "ok", report.error
    assert report.diff is not None and report.diff.parts > 2
    assert [p.split(":")[0] for p in report.diff.failed_parts] == [
        f"part 2 of {report.diff.parts}"]
    assert len({f.file for f in report.findings}) >= len(names) - 1  # the other parts' files
