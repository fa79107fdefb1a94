"""The three tool protocols, shared by every provider.

- `native`: tools go in the request's `tools` field; assistant tool calls and `tool`
  results are sent in the provider's own shape (the provider converts them).
- `json`: no `tools` field. The tools are described in the system prompt; the model
  answers with one JSON object per turn (`{"name", "arguments"}` or `{"answer"}`); its
  earlier calls are shown back as that JSON, and tool results arrive as user messages
  `TOOL_RESULT <tool>:\\n<content>`.
- `constrained`: `json` plus a JSON schema (`reply_schema`) the server uses to force every
  reply to be one of the offered calls or an answer.

The conversation we keep stays provider-neutral; `prepare_messages` converts a copy of
it for one request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from executor.config import ToolProtocol
from executor.messages import Message, ToolCall, ToolSpec

PROTOCOL_PROMPT = (
    "You are a coding agent. Reply with exactly one JSON object per turn. "
    'To use a tool: {"name": "<tool>", "arguments": {...}} '
    'When finished: {"answer": "<answer for the user>"}'
)
WORK_RULES = (
    "How to work:",
    "- One tool call per turn; its result comes back before your next turn.",
    "- Do not guess what is in the project: look with a tool. If the task does not say which "
    "file, find it first.",
    "- To change a file, read it first, then replace only the part the task is about and keep "
    "the rest.",
    "- If what you read takes the value asked about from another file (an import, a setting), "
    "read that file too.",
    "- Answer only when the task is done: say what you did, or give the facts that were asked "
    "for.",
)
"""Habits a weak model does not have on its own; each addresses a failure seen in bench_agent."""
TOOL_RESULT_PREFIX = "TOOL_RESULT"
Step = tuple[str, dict[str, Any], str]
"""One call of a worked example: tool, arguments, what the tool answered."""


@dataclass(frozen=True)
class _Worked:
    ask: str
    steps: tuple[Step, ...]
    answer: str


# Worked multi-step tasks shown when their tools are offered: small models follow an example
# far better than a rule. One finds, reads and changes part of a line; one adds code after
# existing lines, which they otherwise replace; one answers a question with the value it read
# (without it, a read was followed by the same read again until the turns ran out). None is a
# benchmark task.
_WORKED = (
    _Worked("Sort the notes by date instead of by title.", (
        ("search_files", {"pattern": "title", "path": "."},
         "notes.py:2:    return sorted(notes, key=lambda note: note.title)"),
        ("read_file", {"path": "notes.py", "start_line": 1},
         "     1\tdef sorted_notes(notes):\n     2\t    return sorted(notes, key=lambda note: "
         "note.title)"),
        ("edit_file", {"path": "notes.py", "old_text": "key=lambda note: note.title",
                       "new_text": "key=lambda note: note.date"},
         "edited 'notes.py': 1 replacement, 2 lines changed"),
    ), "sorted_notes() in notes.py now sorts the notes by date."),
    _Worked("Add a function last(items) to lists.py.", (
        ("read_file", {"path": "lists.py", "start_line": 1},
         "     1\tdef first(items):\n     2\t    return items[0]"),
        ("edit_file", {"path": "lists.py", "old_text": "    return items[0]",
                       "new_text": "    return items[0]\n\n\ndef last(items):\n"
                                   "    return items[-1]"},
         "edited 'lists.py': 1 replacement, 4 lines changed"),
    ), "lists.py now has last(items), after first(); first() is unchanged."),
    _Worked("Which database does the app use?", (
        ("search_files", {"pattern": "database", "path": "."},
         "app.py:1:from settings import DATABASE_URL"),
        ("read_file", {"path": "settings.py", "start_line": 1},
         "     1\tDEBUG = False\n     2\tDATABASE_URL = \"sqlite:///notes.db\""),
    ), "It uses SQLite: settings.py sets DATABASE_URL = \"sqlite:///notes.db\"."),
)
# Concrete values read better than placeholders, which small models copy literally.
_EXAMPLE_STRINGS = {"path": "README.md", "command": "ls", "pattern": "TODO"}
_PLACEHOLDERS: dict[str, Any] = {"integer": 1, "number": 1, "boolean": True, "array": [],
                                 "object": {}}


def uses_json(protocol: ToolProtocol) -> bool:
    """Whether the protocol describes the tools in the prompt instead of the `tools` field."""
    return protocol in ("json", "constrained")


def prepare_messages(
    messages: Sequence[Message], tools: Sequence[ToolSpec], protocol: ToolProtocol
) -> list[Message]:
    """The conversation as this protocol sends it (still provider-neutral messages)."""
    if not uses_json(protocol):
        return list(messages)
    return with_tool_prompt(_as_text(messages), tools)


def offered(tool: ToolSpec) -> ToolSpec:
    """The tool as the json protocols offer it: its core arguments only, all required.

    Constrained decoding lets a weak model fill every optional argument, and it does: a
    `max_results` of 1, a `glob` that hides what was asked for. Required arguments also come
    first in the grammar, so `old_text` must be required to be written before `new_text`.
    """
    if tool.core is None:
        return tool
    properties = tool.parameters.get("properties", {})
    kept = {name: properties[name] for name in tool.core if name in properties}
    parameters = {**tool.parameters, "properties": kept, "required": list(kept)}
    return tool.model_copy(update={"parameters": parameters})


def with_tool_prompt(messages: list[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """Append the protocol prompt to the first system message (or add one in front)."""
    prompt = tools_prompt(tools)
    for i, message in enumerate(messages):
        if message.role == "system":
            content = f"{message.content.rstrip()}\n\n{prompt}" if message.content else prompt
            return [*messages[:i], Message.system(content), *messages[i + 1 :]]
    return [Message.system(prompt), *messages]


def tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt text of the json protocols: rules, one line per tool, an example."""
    tools = [offered(tool) for tool in tools]
    lines = [PROTOCOL_PROMPT, "", "Tools:"]
    lines += [tool_line(tool) for tool in tools] or ["(none: answer directly)"]
    if _can_work_through(tools):
        return "\n".join([*lines, "", *WORK_RULES, "", *_worked_example()])
    return "\n".join([*lines, "", *_example(tools)])


def tool_line(tool: ToolSpec) -> str:
    """`- name: description Arguments: a, b, c (optional).`"""
    props = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    args = [name if name in required else f"{name} (optional)" for name in props]
    described = tool.description.strip().rstrip(".") + "."
    return f"- {tool.name}: {described} Arguments: {', '.join(args) or 'none'}."


def _can_work_through(tools: Sequence[ToolSpec]) -> bool:
    """Whether the worked examples' calls are valid calls of the offered tools."""
    by_name = {tool.name: tool for tool in tools}
    for name, arguments, _ in (step for worked in _WORKED for step in worked.steps):
        tool = by_name.get(name)
        if tool is None:
            return False
        params = tool.parameters
        if set(params.get("required", [])) != set(arguments) or not set(arguments) <= set(
                params.get("properties", {})):
            return False
    return True


def _worked_example() -> list[str]:
    lines = []
    for number, worked in enumerate(_WORKED, 1):
        lines += ["", f"Example {number}:", f"user: {worked.ask}"]
        for name, arguments, result in worked.steps:
            lines += [f"assistant: {render_call(ToolCall(name=name, arguments=arguments))}",
                      f"user: {TOOL_RESULT_PREFIX} {name}:", result]
        lines.append(f"assistant: {json.dumps({'answer': worked.answer})}")
    return lines[1:]


def _example(tools: Sequence[ToolSpec]) -> list[str]:
    if not tools:
        return ["Example:", 'assistant: {"answer": "<answer for the user>"}']
    tool = tools[0]
    call = render_call(ToolCall(name=tool.name, arguments=_example_arguments(tool)))
    return [
        "Example:",
        f"assistant: {call}",
        f"user: {TOOL_RESULT_PREFIX} {tool.name}:",
        "(the tool's output)",
        # A concrete answer: small models copy a placeholder like "<answer>" literally.
        'assistant: {"answer": "README.md explains how to install and run the project."}',
    ]


def _example_arguments(tool: ToolSpec) -> dict[str, Any]:
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = tool.parameters.get("required", [])
    return {name: _placeholder(name, props.get(name, {})) for name in required}


def _placeholder(name: str, schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("type") == "string":
        return _EXAMPLE_STRINGS.get(name, f"<{name}>")
    return _PLACEHOLDERS.get(str(schema.get("type")), f"<{name}>")


def render_call(call: ToolCall) -> str:
    """A tool call as the json protocols write it."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def tool_result_text(message: Message) -> str:
    """A tool result as the json protocols send it."""
    return f"{TOOL_RESULT_PREFIX} {message.name or 'tool'}:\n{message.content}"


def _as_text(messages: Sequence[Message]) -> list[Message]:
    """Calls become their JSON text; consecutive tool results one user message."""
    out: list[Message] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            out.append(Message.assistant("\n".join(render_call(c) for c in message.tool_calls)))
        elif message.role == "tool":
            _append_result(out, tool_result_text(message))
        else:
            out.append(message)
    return out


def _append_result(out: list[Message], text: str) -> None:
    # Several results in a row stay one user turn: strict chat templates demand alternation.
    last = out[-1] if out else None
    if last is not None and last.role == "user" and last.content.startswith(TOOL_RESULT_PREFIX):
        out[-1] = Message.user(f"{last.content}\n\n{text}")
    else:
        out.append(Message.user(text))


def reply_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one reply: one of the offered calls, or an answer."""
    defs: dict[str, Any] = {}
    options = [_call_schema(offered(tool), defs) for tool in tools]
    options.append(
        {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    )
    schema: dict[str, Any] = {"oneOf": options}
    if defs:
        schema["$defs"] = defs
    return schema


def _call_schema(tool: ToolSpec, defs: dict[str, Any]) -> dict[str, Any]:
    params = copy.deepcopy(tool.parameters)
    # "#/$defs/X" refs resolve against the root of the combined schema: move the defs there.
    defs.update(params.pop("$defs", {}))
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": params},
        "required": ["name", "arguments"],
    }
