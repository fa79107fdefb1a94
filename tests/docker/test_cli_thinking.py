"""`--think` through the CLI with a real container: the request field, the reasoning dimmed on
stderr (inert), apart from the answer in the session file and out of `--json`'s answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.session import NdjsonSessionStore
from tests.docker.cli_support import ask, assert_ok, explain
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

FIRST_THOUGHT = "I should read hello.py first."
SECOND_THOUGHT = "It calls print \x1b[31mwith hello."


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_thinking_streams_on_stderr_and_stays_out_of_the_answer(
        project: Path, model_server: ModelServer, provider: str):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})], thinking=FIRST_THOUGHT)
    model_server.reply("It prints hello.", thinking=SECOND_THOUGHT)

    done = ask(project, model_server, provider, "--think", "high", "--stream", "--json")

    assert done.returncode == 0, explain(done)
    result = json.loads(done.stdout)
    assert result["answer"] == "It prints hello."
    assert "read hello.py first" not in done.stdout and "calls print" not in done.stdout
    assert f"thinking: {FIRST_THOUGHT}" in done.stderr
    assert "thinking: It calls print \\x1b[31mwith hello." in done.stderr  # inert
    assert "\x1b" not in done.stderr
    first, second = model_server.chat_requests
    if provider == "ollama":
        assert first.body["think"] == "high"
        sent_back = [m for m in second.body["messages"] if m["role"] == "assistant"]
        assert sent_back[0]["thinking"] == FIRST_THOUGHT and sent_back[0]["content"] == ""
    else:
        assert first.body["reasoning_effort"] == "high" and "think" not in first.body
    [session] = NdjsonSessionStore(project, "x").list()
    replies = [m for m in NdjsonSessionStore.open(project, session.name).load()
               if m.role == "assistant"]
    assert [m.thinking for m in replies] == [FIRST_THOUGHT, SECOND_THOUGHT]
    assert replies[1].content == "It prints hello."


def test_without_a_terminal_or_stream_the_reasoning_is_not_shown(
        project: Path, model_server: ModelServer):
    model_server.reply("Hello.", thinking="a long private chain of thought")
    done = ask(project, model_server, "ollama", "--think", "on")
    assert_ok(done, "Hello.")
    assert "chain of thought" not in done.stderr
    assert model_server.last_chat.body["think"] is True


def test_a_bad_level_is_one_usage_error(project: Path, model_server: ModelServer):
    done = ask(project, model_server, "ollama", "--think", "maximum")
    assert done.returncode == 2 and "Traceback" not in done.stderr, explain(done)
    assert "--think" in done.stderr and model_server.chat_requests == []


def test_the_environment_sets_it(project: Path, model_server: ModelServer):
    model_server.reply("ok")
    done = ask(project, model_server, "ollama", env={"SANDBOX_AGENT_THINK": "off"})
    assert_ok(done, "ok")
    assert model_server.last_chat.body["think"] is False
