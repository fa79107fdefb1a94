"""The host's argument models and the toolbox's argument table describe the same tools.

The model is offered (and validated against) the pydantic models in executor/tools/builtin.py;
the toolbox checks requests against its own table (it is stdlib-only and runs in the container).
If the two drift, a call the host accepts is refused in the container, or the reverse.
"""

from __future__ import annotations

from typing import Any

import pytest

from executor.tools.base import schema_of
from executor.tools.builtin import BUILTIN_TOOLS
from tests.unit import toolbox_view as BOX

HOST_ONLY = {"expect_sha256", "expect_sha256_after"}
"""Arguments the host adds after an approval; never offered to the model."""

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
