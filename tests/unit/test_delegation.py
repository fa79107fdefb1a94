"""Delegation at the facade: a child runner per delegate call, with its own sandbox from the
factory, the parent's model lent (never closed by the child), linked by parent_session; the
limits; the waiver of the confirmation. No Docker: the in-repo fake sandbox stands in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from executor.messages import Message, ToolCall
from executor.models import ScriptedModel
from executor.runner import Runner
from executor.session import NdjsonSessionStore
from tests.conftest import PRIVATE_ENV
from tests.fakes.sandbox import FakeSandbox


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("SANDBOX_AGENT_") and n not in PRIVATE_ENV]:
        monkeypatch.delenv(name)


def delegating(*tasks: str, write: bool = False) -> Message:
    return Message.assistant("", [ToolCall(id=f"d{i}", name="delegate",
                                           arguments={"task": t, "write": write})
                                  for i, t in enumerate(tasks)])


def build(root: Path, script: list[Any], boxes: list[FakeSandbox], **options: Any) -> Runner:
    def factory(config: Any) -> FakeSandbox:
        boxes.append(FakeSandbox())
        boxes[-1].read_only = config.read_only  # type: ignore[attr-defined]
        return boxes[-1]

    return Runner.build(root, model=ScriptedModel(script, tool_protocol="native"),
                        sandbox=factory, audit=False,
                        orchestrator=True, **options)


def test_a_child_runs_in_its_own_sandbox_and_its_answer_is_the_result(tmp_path: Path) -> None:
    boxes: list[FakeSandbox] = []
    script = [delegating("look around"), "child answer", "parent answer"]
    with build(tmp_path, script, boxes, confirm_delegation=False) as parent:
        result = parent.run("go")
        model = parent.model
        assert not model.closed  # type: ignore[attr-defined]  # the child's close left the lent model open
    assert result.answer == "parent answer"
    [record] = result.tool_calls
    assert (record.result.ok, record.result.output) == (True, "child answer")
    assert record.approved_by == "--no-confirm-delegation"
    assert len(boxes) == 2 and all(box.stopped for box in boxes)
    child = NdjsonSessionStore.open(tmp_path, record.result.meta["child_session"]).header
    assert child.parent_session == parent.session_name
    assert [box.read_only for box in boxes] == [False, True]  # type: ignore[attr-defined]


def test_without_a_waiver_or_a_person_the_call_is_denied(tmp_path: Path) -> None:
    boxes: list[FakeSandbox] = []
    with build(tmp_path, [delegating("x"), "gave up"], boxes) as parent:
        result = parent.run("go")
    assert result.tool_calls[0].result.output.startswith("Denied:") and len(boxes) == 1


def test_yes_approves_it_and_lets_a_child_write(tmp_path: Path) -> None:
    boxes: list[FakeSandbox] = []
    with build(tmp_path, [delegating("write it", write=True), "wrote", "ok"], boxes,
               yes=True) as parent:
        result = parent.run("go")
    assert result.tool_calls[0].result.meta["read_only"] is False
    assert [box.read_only for box in boxes] == [False, False]  # type: ignore[attr-defined]


def test_the_count_is_limited_and_children_are_not_offered_delegate(tmp_path: Path) -> None:
    boxes: list[FakeSandbox] = []
    script = [delegating("one", "two"), "first child", "parent"]
    with build(tmp_path, script, boxes, yes=True, max_delegations=1) as parent:
        model = parent.model
        result = parent.run("go")
    outputs = [r.result.output for r in result.tool_calls]
    assert outputs == ["first child",
                       "Delegation refused: this session may start at most 1 child sessions."]
    offered = [[t.name for t in call.tools] for call in model.calls]  # type: ignore[attr-defined]
    assert ["delegate" in names for names in offered] == [True, False, True]
