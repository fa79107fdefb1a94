"""Both providers x streaming/non-streaming x the three tool protocols, over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from executor.messages import Message, ToolCall, ToolSpec
from executor.models import OllamaModel, OpenAIModel
from executor.models.toolproto import PROTOCOL_PROMPT, reply_schema
from executor.protocols import Model
from executor.tools.builtin import ListFiles, ReadFile
from tests.fakes import Call, ModelServer
from tests.fakes.providers import PROVIDERS, ProviderName, make_model

PROTOCOLS = ("native", "json", "constrained")
TOOLS: list[ToolSpec] = [ReadFile.spec(), ListFiles.spec()]

pytestmark = [
    pytest.mark.parametrize("provider", PROVIDERS),
]


def conversation() -> list[Message]:
    """A history with a tool round trip, as the agent loop keeps it."""
    call = ToolCall(id="call_1", name="read_file", arguments={"path": "a.py"})
    return [
        Message.system("Be brief."),
        Message.user("What is in a.py?"),
        Message.assistant("", [call]),
        Message.tool(call, "1 | print('hi')"),
    ]


def chat(model: Model, messages: list[Message] | None = None) -> tuple[Any, list[str]]:
    tokens: list[str] = []
    reply = model.chat(messages or conversation(), TOOLS, on_token=tokens.append)
    return reply, tokens


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_plain_answer_with_usage_and_tokens(
    provider: ProviderName, stream: bool, protocol: str, model_server: ModelServer
) -> None:
    model_server.reply("It prints hi.", prompt_tokens=1234, completion_tokens=7)
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        reply, tokens = chat(model)
    assert reply.problem is None
    assert reply.message.content == "It prints hi."
    assert reply.message.tool_calls == []
    assert reply.usage.prompt_tokens == 1234
    assert reply.usage.completion_tokens == 7
    assert reply.raw == "It prints hi."
    assert tokens == (["It ", "prints ", "hi."] if stream else [])
    assert model_server.last_chat.streaming is stream


@pytest.mark.parametrize("stream", [True, False])
def test_native_structured_tool_calls(
    provider: ProviderName, stream: bool, model_server: ModelServer
) -> None:
    model_server.reply(tool_calls=[Call("read_file", {"path": "a.py"}, id="c7"),
                                   Call("list_files", {"depth": 2})])
    with make_model(provider, model_server, stream=stream) as model:
        reply, _ = chat(model)
    calls = reply.message.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", {"path": "a.py"}), ("list_files", {"depth": 2})]
    assert calls[0].id == "c7"
    assert calls[1].id  # generated when the server gives none (Ollama)
    assert reply.problem is None


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["json", "constrained"])
def test_json_protocols_parse_the_call_from_the_text(
    provider: ProviderName, stream: bool, protocol: str, model_server: ModelServer
) -> None:
    model_server.reply('{"name": "read_file", "arguments": {"path": "b.py", "start_line": 3}}')
    model_server.reply('{"answer": "Done: b.py defines main()."}')
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        first, _ = chat(model)
        second, _ = chat(model)
    assert [(c.name, c.arguments) for c in first.message.tool_calls] == [
        ("read_file", {"path": "b.py", "start_line": 3})]
    assert second.message.content == "Done: b.py defines main()."
    assert second.message.tool_calls == []


def test_native_request_offers_tools_and_sends_history_natively(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply("ok")
    with make_model(provider, model_server, tool_protocol="native") as model:
        chat(model)
    body = model_server.last_chat.body
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file", "list_files"]
    assert body["tools"][0]["function"]["parameters"] == TOOLS[0].parameters
    assert "format" not in body and "response_format" not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert body["messages"][0]["content"] == "Be brief."  # no protocol prompt in native
    call = body["messages"][2]["tool_calls"][0]
    result = body["messages"][3]
    if provider == "ollama":
        assert call["function"] == {"name": "read_file", "arguments": {"path": "a.py"}}
        assert result == {"role": "tool", "content": "1 | print('hi')", "tool_name": "read_file"}
    else:
        assert call == {"id": "call_1", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        assert body["messages"][2]["content"] is None
        assert result == {"role": "tool", "tool_call_id": "call_1", "content": "1 | print('hi')"}


@pytest.mark.parametrize("protocol", ["json", "constrained"])
def test_json_request_has_prompt_json_history_and_no_tools_field(
    provider: ProviderName, protocol: str, model_server: ModelServer
) -> None:
    model_server.reply('{"answer": "hi"}')
    with make_model(provider, model_server, tool_protocol=protocol) as model:
        chat(model)
    body = model_server.last_chat.body
    assert "tools" not in body
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    system = messages[0]["content"]
    assert system.startswith("Be brief.\n\n" + PROTOCOL_PROMPT)
    assert "- read_file: " in system and "Arguments: path." in system
    assert "- list_files: " in system
    assert json.loads(messages[2]["content"]) == {"name": "read_file",
                                                  "arguments": {"path": "a.py"}}
    assert "tool_calls" not in messages[2]
    assert messages[3]["content"] == "TOOL_RESULT read_file:\n1 | print('hi')"


def test_constrained_request_carries_the_reply_schema(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply('{"answer": "hi"}')
    with make_model(provider, model_server, tool_protocol="constrained") as model:
        chat(model)
    body = model_server.last_chat.body
    if provider == "ollama":
        assert body["format"] == reply_schema(TOOLS)
        assert "response_format" not in body
    else:
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "reply", "strict": True, "schema": reply_schema(TOOLS)},
        }
        assert "format" not in body
    names = [o["properties"].get("name", {}).get("const") for o in reply_schema(TOOLS)["oneOf"]]
    assert names == ["read_file", "list_files", None]


def test_json_mode_sends_no_format_or_schema(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply("plain prose is an answer")
    with make_model(provider, model_server, tool_protocol="json") as model:
        reply, _ = chat(model)
    body = model_server.last_chat.body
    assert "format" not in body and "response_format" not in body and "tools" not in body
    assert reply.message.content == "plain prose is an answer"
    assert reply.problem is None


def test_json_mode_creates_a_system_message_when_there_is_none(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply('{"answer": "hi"}')
    with make_model(provider, model_server, tool_protocol="json") as model:
        chat(model, [Message.user("hello")])
    messages = model_server.last_chat.body["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith(PROTOCOL_PROMPT)
    assert messages[1] == {"role": "user", "content": "hello"}


TEXT_CALLS = {
    "fenced": ('Reading it.\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```',
               [("read_file", {"path": "a.py"})], "Reading it."),
    "bare_in_prose": ('I will call {"name": "list_files", "arguments": {"glob": "*.py"}} now.',
                      [("list_files", {"glob": "*.py"})], "I will call  now."),
    "parameters_alias": ('{"name": "read_file", "parameters": {"path": "c.py"}}',
                         [("read_file", {"path": "c.py"})], ""),
    "string_arguments": ('{"name": "read_file", "arguments": "{\\"path\\": \\"d.py\\"}"}',
                         [("read_file", {"path": "d.py"})], ""),
    "several": ('{"name": "read_file", "arguments": {"path": "a.py"}}\n'
                '{"name": "read_file", "arguments": {"path": "b.py"}}',
                [("read_file", {"path": "a.py"}), ("read_file", {"path": "b.py"})], ""),
    "qwen_tags": ('<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
                  [("list_files", {})], ""),
}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", sorted(TEXT_CALLS))
def test_text_embedded_calls_are_parsed_in_every_protocol(
    provider: ProviderName, stream: bool, protocol: str, case: str, model_server: ModelServer
) -> None:
    text, expected, prose = TEXT_CALLS[case]
    model_server.reply(text)
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        reply, _ = chat(model)
    assert [(c.name, c.arguments) for c in reply.message.tool_calls] == expected
    assert reply.message.content == prose
    assert reply.raw == text
    assert reply.problem is None


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("protocol", "text", "needle"), [
    ("native", "", "empty"),
    ("json", "", "empty"),
    ("json", '{"name": "read_file", "arguments": {"path": "a.py"}', "not valid JSON"),
    ("constrained", '{"path": "a.py"}', 'neither "name" nor "answer"'),
    ("json", '{"name": "read_file", "arguments": "a.py"}', "must be a JSON object"),
])
def test_unusable_replies_come_back_with_a_problem(
    provider: ProviderName, stream: bool, protocol: str, text: str, needle: str,
    model_server: ModelServer,
) -> None:
    model_server.reply(text)
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        reply, _ = chat(model)
    assert reply.problem is not None and needle in reply.problem
    assert reply.message.tool_calls == []
    assert reply.raw == text


def test_unknown_tool_names_are_still_returned_as_calls(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply('{"name": "launch_rocket", "arguments": {}}')
    with make_model(provider, model_server, tool_protocol="json") as model:
        reply, _ = chat(model)
    assert [c.name for c in reply.message.tool_calls] == ["launch_rocket"]
    assert reply.problem is None


def test_sampling_options_are_sent(provider: ProviderName, model_server: ModelServer) -> None:
    model_server.reply("ok")
    extra: dict[str, Any] = (
        {"think": False, "keep_alive": "10m", "options": {"num_ctx": 4096}}
        if provider == "ollama" else {"max_tokens": 64}
    )
    with make_model(provider, model_server, temperature=0.0, **extra) as model:
        chat(model)
    body = model_server.last_chat.body
    assert body["model"] == "fake-model"
    if provider == "ollama":
        assert body["options"] == {"num_ctx": 4096, "temperature": 0.0}
        assert body["think"] is False and body["keep_alive"] == "10m"
    else:
        assert body["temperature"] == 0.0 and body["max_tokens"] == 64
        assert body["stream_options"] == {"include_usage": True}


def test_satisfies_the_model_protocol(provider: ProviderName, model_server: ModelServer) -> None:
    model = make_model(provider, model_server)
    assert isinstance(model, Model)
    assert isinstance(model, OllamaModel if provider == "ollama" else OpenAIModel)
    assert model.name == "fake-model"
    model.close()
    assert model_server.requests == []  # constructing and closing did no I/O


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["json", "constrained"])
def test_an_answer_the_server_cut_at_its_length_limit_is_kept_and_flagged(
    provider: ProviderName, stream: bool, protocol: str, model_server: ModelServer
) -> None:
    model_server.reply('{"answer": "The tests pass and the', finish="length")
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        reply, _ = chat(model)
    assert reply.cut == "length" and reply.problem is None
    assert reply.message.content.startswith("The tests pass and the")
    assert "This answer is incomplete: the model reached its length limit" \
        in reply.message.content


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["json", "constrained"])
def test_a_call_the_server_cut_at_its_length_limit_asks_for_a_short_reply(
    provider: ProviderName, stream: bool, protocol: str, model_server: ModelServer
) -> None:
    model_server.reply('{"name": "read_file", "arguments": {"path": "a.py", "start', finish="length")
    with make_model(provider, model_server, stream=stream, tool_protocol=protocol) as model:
        reply, _ = chat(model)
    assert reply.cut == "length" and reply.message.tool_calls == []
    assert reply.problem is not None and "cut before it was complete" in reply.problem


@pytest.mark.parametrize("stream", [True, False])
def test_a_native_prose_answer_cut_at_the_length_limit_is_flagged(
    provider: ProviderName, stream: bool, model_server: ModelServer
) -> None:
    model_server.reply("It prints hi and then", finish="length")
    with make_model(provider, model_server, stream=stream, tool_protocol="native") as model:
        reply, _ = chat(model)
    assert reply.cut == "length" and reply.message.content.startswith("It prints hi and then")
    assert "incomplete" in reply.message.content


@pytest.mark.parametrize("stream", [True, False])
def test_a_reply_that_ended_on_its_own_is_not_cut(
    provider: ProviderName, stream: bool, model_server: ModelServer
) -> None:
    model_server.reply('{"answer": "Done."}', finish="stop")
    with make_model(provider, model_server, stream=stream, tool_protocol="constrained") as model:
        reply, _ = chat(model)
    assert reply.cut is None and reply.message.content == "Done."
