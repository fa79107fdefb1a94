"""The tool protocols as pure functions: prompt, history conversion, reply schema."""

from __future__ import annotations

import json

from pydantic import BaseModel

from executor.messages import Message, ToolCall, ToolSpec
from executor.models.toolproto import (
    PROTOCOL_PROMPT,
    offered,
    prepare_messages,
    reply_schema,
    tools_prompt,
)
from executor.tools import default_registry
from executor.tools.base import schema_of
from executor.tools.builtin import EditFile, ReadFile, RunShellCommand

TOOLS = [ReadFile.spec(), EditFile.spec(), RunShellCommand.spec()]


def test_prompt_is_the_measured_text_then_tools_then_an_example() -> None:
    prompt = tools_prompt(TOOLS)
    assert PROTOCOL_PROMPT == (
        'You are a coding agent. Reply with exactly one JSON object per turn. To use a tool: '
        '{"name": "<tool>", "arguments": {...}} When finished: '
        '{"answer": "<answer for the user>"}'
    )
    assert prompt.startswith(PROTOCOL_PROMPT)
    lines = prompt.splitlines()
    assert (
        "- edit_file: " + EditFile.description.rstrip(".") + ". Arguments: path, old_text, "
        "new_text."
    ) in lines
    assert sum(line.startswith("- ") for line in lines) == 3
    example = lines[lines.index("Example:") + 1:]
    assert example[0] == ('assistant: {"name": "read_file", "arguments": {"path": "README.md", '
                          '"start_line": 1}}')
    assert example[1] == "user: TOOL_RESULT read_file:"
    assert json.loads(example[-1].removeprefix("assistant: "))["answer"]


def test_the_json_protocols_offer_only_core_arguments_all_required_in_order() -> None:
    edit = offered(EditFile.spec())
    assert list(edit.parameters["properties"]) == ["path", "old_text", "new_text"]
    assert edit.parameters["required"] == ["path", "old_text", "new_text"]
    assert edit.parameters["additionalProperties"] is False
    schema = reply_schema([EditFile.spec()])["oneOf"][0]["properties"]["arguments"]
    assert schema == edit.parameters
    assert "replace_all" in EditFile.spec().parameters["properties"]  # native: all of them


def test_a_tool_without_core_arguments_is_offered_whole() -> None:
    class Args(BaseModel):
        path: str
        limit: int = 5

    spec = ToolSpec(name="custom", description="d", parameters=schema_of(Args))
    assert offered(spec) == spec
    assert "- custom: d. Arguments: path, limit (optional)." in tools_prompt([spec])


def test_with_the_built_in_tools_the_prompt_has_rules_and_a_worked_multi_step_example() -> None:
    prompt = tools_prompt(default_registry().specs())
    assert "How to work:" in prompt
    example = prompt.splitlines()[prompt.splitlines().index("Example 1:") + 1:]
    assert example[0].startswith("user: ") and "Example 2:" in example
    calls = [json.loads(line.removeprefix("assistant: ")) for line in example
             if line.startswith("assistant: ")]
    assert [c.get("name") for c in calls] == ["search_files", "read_file", "edit_file", None,
                                              "read_file", "edit_file", None,
                                              "search_files", "read_file", None]
    offered_args = {s.name: set(offered(s).parameters["required"])
                    for s in default_registry().specs()}
    assert all(set(c["arguments"]) == offered_args[c["name"]] for c in calls if "name" in c)
    assert all(c["answer"] for c in calls if "name" not in c)


def test_prompt_without_tools_still_explains_the_answer() -> None:
    prompt = tools_prompt([])
    assert "(none: answer directly)" in prompt and '{"answer"' in prompt


def test_native_history_is_sent_as_is() -> None:
    history = [Message.user("hi"), Message.assistant("", [ToolCall(name="read_file")])]
    assert prepare_messages(history, TOOLS, "native") == history


def test_json_history_renders_calls_and_merges_consecutive_results() -> None:
    a = ToolCall(name="read_file", arguments={"path": "a"})
    b = ToolCall(name="run_shell_command", arguments={"command": "ls"})
    history = [
        Message.system("House rules."),
        Message.user("look"),
        Message.assistant("thinking", [a, b]),
        Message.tool(a, "A"),
        Message.tool(b, "B"),
        Message.user("thanks"),
    ]
    sent = prepare_messages(history, TOOLS, "json")
    assert [m.role for m in sent] == ["system", "user", "assistant", "user", "user"]
    assert sent[0].content.startswith("House rules.\n\n" + PROTOCOL_PROMPT)
    assert [json.loads(line) for line in sent[2].content.splitlines()] == [
        {"name": "read_file", "arguments": {"path": "a"}},
        {"name": "run_shell_command", "arguments": {"command": "ls"}},
    ]
    assert sent[2].tool_calls == []
    assert sent[3].content == "TOOL_RESULT read_file:\nA\n\nTOOL_RESULT run_shell_command:\nB"
    assert sent[4].content == "thanks"
    assert history[0].content == "House rules."  # the kept history is not modified


def test_only_the_first_system_message_gets_the_prompt() -> None:
    history = [Message.user("x"), Message.system("one"), Message.system("two")]
    sent = prepare_messages(history, TOOLS, "constrained")
    assert [m.content.startswith("one\n\n" + PROTOCOL_PROMPT) for m in sent] == [
        False, True, False]
    assert sent[2].content == "two"


def test_reply_schema_has_one_entry_per_tool_plus_the_answer() -> None:
    schema = reply_schema(TOOLS)
    options = schema["oneOf"]
    assert len(options) == 4
    assert options[0] == {
        "type": "object",
        "properties": {"name": {"const": "read_file"},
                       "arguments": offered(TOOLS[0]).parameters},
        "required": ["name", "arguments"],
    }
    assert options[-1] == {"type": "object", "properties": {"answer": {"type": "string"}},
                           "required": ["answer"]}


def test_reply_schema_hoists_nested_definitions_to_the_root() -> None:
    class Range(BaseModel):
        start: int
        end: int

    class Args(BaseModel):
        path: str
        range: Range

    spec = ToolSpec(name="read_range", description="d", parameters=schema_of(Args))
    assert "$defs" in spec.parameters
    schema = reply_schema([spec])
    assert schema["$defs"] == {"Range": spec.parameters["$defs"]["Range"]}
    arguments = schema["oneOf"][0]["properties"]["arguments"]
    assert "$defs" not in arguments
    assert arguments["properties"]["range"] == {"$ref": "#/$defs/Range"}
