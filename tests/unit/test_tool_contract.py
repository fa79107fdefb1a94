"""The host's argument models and the toolbox's argument table describe the same tools.

The model is offered (and validated against) the pydantic models in executor/tools/builtin.py,
built from the toolbox's one declaration (toolbox/contract.py); the toolbox checks requests
against the table derived from it and its handlers default as it says. If they drift, a call
the host accepts is refused in the container, or the reverse.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from executor.toolbox.contract import TOOL_ARGS
from executor.tools.base import schema_of
from executor.tools.builtin import BUILTIN_TOOLS
from tests.unit import toolbox_view as BOX

HOST_ONLY = {"expect_sha256", "expect_sha256_after", "page_lines"}
"""Arguments the host adds (after an approval; read_file's page from the model's window);
never offered to the model."""

JSON_TYPES = {BOX.STR: {"string"}, BOX.INT: {"integer"}, BOX.BOOL: {"boolean"},
              BOX.NUMBER: {"integer", "number"}}


def json_type(prop: dict[str, Any]) -> str:
    options = prop.get("anyOf") or [prop]
    kinds = {o["type"] for o in options if o.get("type") != "null"}
    assert len(kinds) == 1, prop
    return kinds.pop()


@pytest.mark.parametrize("tool", BUILTIN_TOOLS, ids=lambda t: t.name)
def test_host_and_toolbox_agree_on_every_argument(tool: Any) -> None:
    schema = schema_of(tool.Args)
    offered = schema["properties"]
    required = set(schema.get("required", []))
    _, spec = BOX.TOOLS[tool.name]
    assert set(offered) == set(spec) - HOST_ONLY, tool.name
    for name, (kind, needed) in spec.items():
        if name in HOST_ONLY:
            assert not needed
            continue
        assert (name in required) == needed, (tool.name, name)
        assert json_type(offered[name]) in JSON_TYPES[kind], (tool.name, name, kind)


def test_every_toolbox_tool_is_offered_and_nothing_else() -> None:
    assert {tool.name for tool in BUILTIN_TOOLS} == set(BOX.TOOLS)


def test_descriptions_do_not_promise_a_default_the_settings_can_change() -> None:
    for tool in BUILTIN_TOOLS:
        text = str(schema_of(tool.Args)) + tool.description
        assert "default 60" not in text, tool.name


def test_the_schemas_the_model_sees_are_the_pinned_ones() -> None:
    """Building the models from the contract must not change a byte of what the model reads."""
    pinned = json.loads((Path(__file__).parent / "tool_schemas.json").read_text())
    assert {tool.name: schema_of(tool.Args) for tool in BUILTIN_TOOLS} == pinned


@pytest.mark.parametrize("tool", sorted(TOOL_ARGS))
def test_toolbox_handlers_take_and_default_what_the_contract_declares(tool: str) -> None:
    handler, _ = BOX.TOOLS[tool]
    params = list(inspect.signature(handler).parameters.values())[1:]  # after ctx
    assert [p.name for p in params] == list(TOOL_ARGS[tool]), tool
    for param in params:
        arg = TOOL_ARGS[tool][param.name]
        if arg.required:
            assert param.default is inspect.Parameter.empty, (tool, param.name)
        else:
            assert param.default == arg.default, (tool, param.name, param.default)
            assert type(param.default) is type(arg.default), (tool, param.name)


def test_host_models_default_as_the_contract_says() -> None:
    for tool in BUILTIN_TOOLS:
        fields = tool.Args.model_fields
        for name, arg in TOOL_ARGS[tool.name].items():
            if arg.host_only:
                assert name not in fields
                continue
            assert fields[name].is_required() == arg.required, (tool.name, name)
            if not arg.required:
                assert fields[name].default == arg.default, (tool.name, name)


def test_a_toolbox_reply_and_the_hosts_tool_result_have_the_same_fields() -> None:
    """The reply the toolbox builds (wire.ok / wire.fail) is what the host's ToolResult holds."""
    from executor.messages import ToolResult

    for reply in (BOX.ok("done", bytes=3), BOX.fail("no", exit_code=1)):
        assert set(reply) == set(ToolResult.model_fields)
        assert ToolResult.model_validate(reply).model_dump() == reply
