"""ScriptedModel: the deterministic in-process model tests drive the agent with."""

from __future__ import annotations

import pytest

from executor.errors import ModelError
from executor.messages import Message, ModelReply, ToolCall
from executor.models import ScriptedModel, ScriptExhaustedError
from executor.protocols import Model
from executor.tools.builtin import ReadFile


def test_replays_strings_messages_and_replies_in_order() -> None:
    scripted = ModelReply(message=Message.assistant("as given"), problem=None)
    model = ScriptedModel([
        '{"name": "read_file", "arguments": {"path": "a.py"}}',
        Message.assistant("", [ToolCall(name="list_files")]),
        scripted,
        "plain answer",
    ])
    first = model.chat([Message.user("go")], [ReadFile.spec()])
    assert [(c.name, c.arguments) for c in first.message.tool_calls] == [
        ("read_file", {"path": "a.py"})]
    assert [c.name for c in model.chat([], []).message.tool_calls] == ["list_files"]
    assert model.chat([], []) == scripted
    assert model.chat([], []).message.content == "plain answer"
    assert model.remaining == 0


def test_strings_are_parsed_with_the_tolerant_parser_including_problems() -> None:
    model = ScriptedModel(["", '```json\n{"name": "x", "parameters": {}}\n```'])
    assert model.chat([], []).problem is not None
    assert model.chat([], []).message.tool_calls[0].name == "x"


def test_records_every_call_as_a_snapshot() -> None:
    model = ScriptedModel(["a", "b"])
    history = [Message.user("one")]
    model.chat(history, [ReadFile.spec()])
    history.append(Message.user("two"))
    model.chat(history, [])
    assert [len(c.messages) for c in model.calls] == [1, 2]
    assert model.calls[0].tools == [ReadFile.spec()]
    assert model.calls[1].tools == []


def test_streams_the_reply_text_to_on_token() -> None:
    tokens: list[str] = []
    ScriptedModel(["hello"]).chat([], [], on_token=tokens.append)
    assert tokens == ["hello"]


def test_running_out_of_script_is_a_clear_model_error() -> None:
    model = ScriptedModel(["only"], name="tiny")
    model.chat([Message.user("q1")], [])
    with pytest.raises(ScriptExhaustedError) as caught:
        model.chat([Message.user("is anyone there?")], [])
    assert isinstance(caught.value, ModelError)
    assert "call #2" in str(caught.value) and "only 1 replies" in str(caught.value)
    assert "is anyone there?" in str(caught.value)


def test_is_a_model_and_reports_its_context_and_closing() -> None:
    model = ScriptedModel([], context_length=2048)
    assert isinstance(model, Model)
    assert model.context_length() == 2048
    model.close()
    assert model.closed
