"""A reply the model server cut at its own length limit (OpenAI `finish_reason`, Ollama
`done_reason`: "length"), through the real CLI against the stand-in server: an answer cut short
is printed with a note and ends with exit 35 (`--json` status `truncated`), never 0; a cut
call is asked again once for a short reply, and the whole answer that follows exits 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docker.cli_support import ask, explain
from tests.fakes.model_server import ModelServer

pytestmark = pytest.mark.docker

CASES = [("ollama", "--stream"), ("openai", "--no-stream"), ("openai", "--stream")]


@pytest.mark.parametrize(("provider", "stream"), CASES)
def test_an_answer_cut_at_the_servers_limit_exits_35_with_the_answer_kept(
        project: Path, model_server: ModelServer, provider: str, stream: str) -> None:
    model_server.reply('{"answer": "calc.py adds two numbers and the', finish="length")
    done = ask(project, model_server, provider, stream, "--tool-protocol", "json")
    assert done.returncode == 35, explain(done)
    assert done.stdout.startswith("calc.py adds two numbers and the"), explain(done)
    assert "This answer is incomplete" in done.stdout, explain(done)
    assert "error: the run answered, but the answer was cut" in done.stderr, explain(done)
    assert "Traceback" not in done.stderr and len(model_server.chat_requests) == 1


def test_json_says_truncated_and_why(project: Path, model_server: ModelServer) -> None:
    model_server.reply('{"answer": "calc.py adds two numbers and the', finish="length")
    done = ask(project, model_server, "openai", "--json", "--tool-protocol", "constrained")
    assert done.returncode == 35, explain(done)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == "truncated", report
    assert "per-reply token limit" in report["unfinished"], report
    assert report["answer"].startswith("calc.py adds two numbers and the"), report


@pytest.mark.parametrize(("provider", "stream"), CASES)
def test_a_call_cut_at_the_servers_limit_is_asked_again_once(
        project: Path, model_server: ModelServer, provider: str, stream: str) -> None:
    model_server.reply('{"name": "read_file", "arguments": {"path": "calc.py", "sta',
                       finish="length")
    model_server.reply('{"answer": "calc.py adds two numbers."}')
    done = ask(project, model_server, provider, stream, "--tool-protocol", "json")
    assert done.returncode == 0, explain(done)
    assert done.stdout == "calc.py adds two numbers.\n", explain(done)
    asked = model_server.chat_requests[1].body["messages"][-1]["content"]
    assert "Your reply was cut before it was complete" in asked, asked
