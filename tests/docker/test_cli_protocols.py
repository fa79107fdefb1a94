"""How `sandbox-agent ask` speaks to model servers: streaming, tool protocols, calls written in
the text, retries and timeouts — the real CLI, the stand-in server, a real container."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.docker.cli_support import (
    ALL_TOOLS,
    PROVIDERS,
    ask,
    assert_ok,
    assert_user_error,
    containers_of,
    offered_tools,
    text_results,
    tool_exchanges,
)
from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply

pytestmark = pytest.mark.docker

ANSWER = "hello.py prints hello."
HELLO_READ = '     1\tprint("hello")'


def _script(server: ModelServer, protocol: str) -> None:
    """One read_file call, then the answer, in the shape the protocol asks the model for."""
    if protocol == "native":
        server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
        server.reply(ANSWER)
    else:
        server.reply(json.dumps({"name": "read_file", "arguments": {"path": "hello.py"}}))
        server.reply(json.dumps({"answer": ANSWER}))


def _schema_names(schema: dict[str, Any]) -> set[str]:
    """Tool names a constrained reply schema allows, plus 'answer' for the answer branch."""
    names = set()
    for option in schema["oneOf"]:
        props = option["properties"]
        names.add(props["name"]["const"] if "name" in props else next(iter(props)))
    return names


def _assert_native(requests: list[RecordedRequest]) -> None:
    for request in requests:
        assert set(offered_tools(request)) == ALL_TOOLS
        assert "format" not in request.body and "response_format" not in request.body
    [(name, _, result)] = tool_exchanges(requests[-1])
    assert (name, result) == ("read_file", HELLO_READ)


def _assert_json(requests: list[RecordedRequest], provider: str, protocol: str) -> None:
    for request in requests:
        assert "tools" not in request.body
        system = request.body["messages"][0]
        assert system["role"] == "system" and "exactly one JSON object" in system["content"]
        assert "- read_file:" in system["content"] and "- run_shell_command:" in system["content"]
        constraint = request.body.get("format" if provider == "ollama" else "response_format")
        if protocol == "json":
            assert "format" not in request.body and "response_format" not in request.body
        elif provider == "ollama":
            assert _schema_names(constraint) == ALL_TOOLS | {"answer"}
        else:
            assert constraint["type"] == "json_schema"
            assert _schema_names(constraint["json_schema"]["schema"]) == ALL_TOOLS | {"answer"}
    messages = requests[-1].body["messages"]
    assert not any(m["role"] == "tool" for m in messages)
    assert json.loads(messages[-2]["content"]) == {"name": "read_file",
                                                   "arguments": {"path": "hello.py"}}
    assert text_results(requests[-1]) == [f"TOOL_RESULT read_file:\n{HELLO_READ}"]
    assert messages[-1]["content"] == text_results(requests[-1])[0]


@pytest.mark.parametrize("protocol", ["native", "json", "constrained"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_streaming_and_not_give_the_same_answer(project: Path, model_server: ModelServer,
                                                provider: str, protocol: str):
    answers = []
    for flag, streamed in (("--stream", True), ("--no-stream", False)):
        first = len(model_server.chat_requests)
        _script(model_server, protocol)

        done = ask(project, model_server, provider, "--tool-protocol", protocol, flag,
                   query="what does hello.py do?")

        assert_ok(done, ANSWER)
        answers.append(done.stdout)
        # Prose streams to stderr when asked; a json protocol's raw JSON never does.
        assert (ANSWER in done.stderr) is (streamed and protocol == "native"), done.stderr
        assert '"answer"' not in done.stderr
        requests = model_server.chat_requests[first:]
        assert len(requests) == 2
        assert all(r.body["stream"] is streamed for r in requests)
        if provider == "openai":
            assert all(("stream_options" in r.body) is streamed for r in requests)
        if protocol == "native":
            _assert_native(requests)
        else:
            _assert_json(requests, provider, protocol)
    assert answers[0] == answers[1]


def test_streamed_prose_goes_to_stderr_and_the_answer_to_stdout(project: Path,
                                                                model_server: ModelServer):
    model_server.reply("The answer is forty-two.")

    done = ask(project, model_server, "openai", "--stream")

    assert_ok(done, "The answer is forty-two.")
    assert "The answer is forty-two." in done.stderr  # the tokens, as they arrived


TEXT_CALLS = {
    "fenced": 'I will write it.\n```json\n{"name": "write_file", "arguments": '
              '{"path": "made.txt", "content": "made by text\\n"}}\n```',
    "bare": 'Sure: {"name": "write_file", "arguments": {"path": "made.txt", '
            '"content": "made by text\\n"}} and then I am done.',
    "parameters-as-string": '{"name": "write_file", "parameters": '
                            '"{\\"path\\": \\"made.txt\\", \\"content\\": \\"made by text\\\\n\\"}"}',
}


@pytest.mark.parametrize("form", list(TEXT_CALLS))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_calls_written_in_the_text_really_run(project: Path, model_server: ModelServer,
                                                   provider: str, form: str):
    model_server.reply(TEXT_CALLS[form])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat made.txt"})])
    model_server.reply("Made it.")

    done = ask(project, model_server, provider, "--yes", "--tool-protocol", "native")

    assert_ok(done, "Made it.")
    assert (project / "made.txt").read_text() == "made by text\n"
    exchanges = tool_exchanges(model_server.last_chat)
    [(write, arguments, _), (shell, _, shown)] = exchanges
    assert (write, arguments) == ("write_file", {"path": "made.txt", "content": "made by text\n"})
    assert shell == "run_shell_command" and "made by text" in shown


# -- retries and timeouts ---------------------------------------------------------------------


FAILURES = {
    "503": lambda server: server.error(503, "overloaded"),
    "429": lambda server: server.error(429, "slow down", retry_after=0),
    "dropped": lambda server: server.drop(),
}


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_transient_failures_are_retried(project: Path, model_server: ModelServer,
                                        provider: str, failure: str):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    FAILURES[failure](model_server)
    model_server.reply("Recovered.")

    done = ask(project, model_server, provider)

    assert_ok(done, "Recovered.")
    chats = model_server.chat_requests
    assert len(chats) == 3 and model_server.pending == 0
    assert chats[1].body == chats[2].body  # the very request again, with the tool result
    assert [r for _, _, r in tool_exchanges(chats[2])] == [HELLO_READ]
    assert "retrying" in done.stderr


def test_a_failure_after_every_attempt_is_one_clean_error(project: Path,
                                                          model_server: ModelServer,
                                                          docker_client: Any):
    for _ in range(3):
        model_server.error(503, "still overloaded")

    done = ask(project, model_server, "openai", env={"SANDBOX_AGENT_MAX_RETRIES": "2"})

    assert_user_error(done, 23, "503")
    assert len(model_server.chat_requests) == 3
    assert containers_of(docker_client, project) == []


@pytest.mark.parametrize(("provider", "stream"), [("ollama", "--stream"),
                                                ("openai", "--no-stream")])
def test_a_server_that_never_answers_times_out_cleanly(project: Path, model_server: ModelServer,
                                                       provider: str, stream: str,
                                                       docker_client: Any):
    for _ in range(3):
        model_server.hang(60)

    started = time.monotonic()
    done = ask(project, model_server, provider, "--timeout", "1", stream)
    elapsed = time.monotonic() - started

    assert_user_error(done, 22, "did not answer within 1s")
    assert done.stdout == ""
    assert len(model_server.chat_requests) == 3  # a timeout is retried, then given up
    assert elapsed < 30  # the hangs last 60 s: the client gave up on its own
    assert containers_of(docker_client, project) == []


@pytest.mark.parametrize(("provider", "stream", "shape"), [
    ("openai", "--stream", "comments"),  # SSE keep-alive comments: nothing on screen
    ("ollama", "--stream", "tokens"),    # a word every half second
    ("openai", "--no-stream", "body"),   # a JSON body a few bytes every half second
])
def test_a_server_that_trickles_is_given_up_at_the_timeout(
        project: Path, model_server: ModelServer, provider: str, stream: str, shape: Any,
        docker_client: Any):
    # never silent for a read timeout; a whole reply ("done") after 60 s
    model_server.trickle(shape, seconds=60, every=0.5)

    started = time.monotonic()
    done = ask(project, model_server, provider, "--timeout", "3", "--max-retries", "0", stream)
    elapsed = time.monotonic() - started

    assert_user_error(done, 22, "did not finish its response within 3s (--timeout)")
    assert done.stdout == ""  # what was streamed is not taken as an answer
    assert len(model_server.chat_requests) == 1
    assert elapsed < 20  # 3 s, the CLI's start and its end on a busy machine; not 60
    assert containers_of(docker_client, project) == []


def test_other_client_errors_are_not_retried(project: Path, model_server: ModelServer,
                                             docker_client: Any):
    model_server.error(400, "unsupported parameter")
    model_server.reply("never sent")

    done = ask(project, model_server, "ollama")

    assert_user_error(done, 23, "HTTP 400", "unsupported parameter")
    assert len(model_server.chat_requests) == 1 and model_server.pending == 1
    assert containers_of(docker_client, project) == []


def test_a_stream_cut_after_tokens_were_shown_is_not_repeated(project: Path,
                                                              model_server: ModelServer):
    model_server.reply("Half of an answer that never ends", cut_after=2)
    model_server.reply("never sent")

    done = ask(project, model_server, "openai", "--stream")

    assert_user_error(done, 21, "closed the connection")
    assert len(model_server.chat_requests) == 1 and model_server.pending == 1


# -- unusable replies -------------------------------------------------------------------------


def test_unusable_replies_are_explained_and_asked_again(project: Path,
                                                        model_server: ModelServer):
    model_server.reply('{"nme": "read_file"}')
    model_server.reply('{"name": "read_file", "arguments": {"path": "hello.py"')
    model_server.reply('{"name": "read_file", "arguments": {"path": "hello.py"}}')
    model_server.reply('{"answer": "Recovered."}')

    done = ask(project, model_server, "openai", "--tool-protocol", "json")

    assert_ok(done, "Recovered.")
    messages = model_server.last_chat.body["messages"]
    corrections = [m["content"] for m in messages
                   if m["role"] == "user" and m["content"].startswith("Your last reply")]
    assert len(corrections) == 2
    assert 'neither "name" nor "answer"' in corrections[0]
    assert "not valid JSON" in corrections[1] and "'}' is missing" in corrections[1]
    assert text_results(model_server.last_chat) == [f"TOOL_RESULT read_file:\n{HELLO_READ}"]


@pytest.mark.parametrize(("protocol", "reply"), [("constrained", '{"oops": 1}'),
                                                 ("native", "")])
def test_unusable_replies_in_a_row_end_the_run(project: Path, model_server: ModelServer,
                                               docker_client: Any, protocol: str, reply: str):
    model_server.default = Reply(reply)

    done = ask(project, model_server, "ollama", "--tool-protocol", protocol)

    assert_user_error(done, 30, "3 unusable replies in a row")
    assert len(model_server.chat_requests) == 3
    assert containers_of(docker_client, project) == []
