"""`sandbox-agent orchestrate`: the delegate tool starts child sessions with their own containers,
approved like any high-risk call, read-only unless the parent's approval covers writes, limited
in depth and count, and linked to their parent in the sessions and the audit log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir, read_records
from executor.session import NdjsonSessionStore
from tests.docker.cli_support import (
    assert_user_error,
    containers_of,
    explain,
    model_args,
    offered_tools,
    run_cli,
    tool_exchanges,
)
from tests.fakes.model_server import Call, ModelServer, RecordedRequest

pytestmark = pytest.mark.docker

TASK = "Read hello.py and say what it prints."


def orchestrate(root: Path, server: ModelServer, *flags: Any) -> Any:
    return run_cli("orchestrate", "--root", root, *model_args(server, "ollama"), *flags,
                   "find out what hello.py prints")


def headers(root: Path) -> dict[str, Any]:
    return {s.name: NdjsonSessionStore.open(root, s.name).header
            for s in NdjsonSessionStore(root, "x").list()}


def is_parent(request: RecordedRequest) -> bool:
    return "delegate" in offered_tools(request)


def test_a_delegate_call_needs_approval_and_fails_closed(project: Path, model_server: ModelServer,
                                                         docker_client: Any):
    model_server.reply(tool_calls=[Call("delegate", {"task": TASK})])
    model_server.reply("Could not delegate.")
    done = orchestrate(project, model_server)
    assert done.returncode == 0 and done.stdout == "Could not delegate.\n", explain(done)
    [(tool, _, result)] = tool_exchanges(model_server.last_chat)
    assert tool == "delegate" and result.startswith("Denied:") and "approval" in result
    assert len(headers(project)) == 1 and containers_of(docker_client, project) == []


def test_a_child_session_answers_and_is_linked_to_its_parent(
        project: Path, model_server: ModelServer, docker_client: Any):
    model_server.reply(tool_calls=[Call("delegate", {"task": TASK})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("It prints hello.")
    model_server.reply("The helper says: it prints hello.")

    done = orchestrate(project, model_server, "--no-confirm-delegation", "--json")

    assert done.returncode == 0, explain(done)
    result = json.loads(done.stdout)
    assert result["answer"] == "The helper says: it prints hello."
    [call] = result["tool_calls"]
    assert (call["tool"], call["approved_by"], call["ok"]) == (
        "delegate", "--no-confirm-delegation", True)
    _, child_1, _, parent_2 = model_server.chat_requests
    assert [is_parent(r) for r in model_server.chat_requests] == [True, False, False, True]
    assert child_1.body["messages"][-1] == {"role": "user", "content": TASK}
    assert "write_file" not in offered_tools(child_1)  # read-only: no write tools at all
    assert tool_exchanges(parent_2)[-1][2] == "It prints hello."
    assert "↳" in done.stderr and "read_file hello.py" in done.stderr

    sessions = headers(project)
    [child] = [h for h in sessions.values() if getattr(h, "parent_session", None)]
    [parent] = [h for h in sessions.values() if h is not child]
    assert child.parent_session == parent.name and child.mount_mode == "ro"
    assert child.container != parent.container
    records = list(read_records(default_audit_dir(project)))
    starts = {r["session"]: r for r in records if r["kind"] == "run_start"}
    assert starts[child.name]["parent_session"] == parent.name
    assert "parent_session" not in starts[parent.name]
    [delegated] = [r for r in records if r["kind"] == "tool_result" and r["tool"] == "delegate"]
    assert delegated["session"] == parent.name and delegated["meta"]["child_session"] == child.name
    child_reads = [r for r in records if r["kind"] == "tool_call" and r["session"] == child.name]
    assert [r["tool"] for r in child_reads] == ["read_file"]
    assert containers_of(docker_client, project) == []


@pytest.mark.parametrize("yes", [True, False])
def test_a_child_writes_only_when_the_parents_approval_covers_it(
        project: Path, model_server: ModelServer, yes: bool):
    model_server.reply(tool_calls=[Call("delegate", {"task": "Create notes.txt", "write": True})])
    model_server.reply(tool_calls=[Call("write_file", {"path": "notes.txt", "content": "hi\n"})])
    model_server.reply("Done.")
    model_server.reply("Delegated.")
    done = orchestrate(project, model_server, "--no-confirm-delegation",
                       *(["--yes"] if yes else []))
    assert done.returncode == 0, explain(done)
    assert (project / "notes.txt").exists() is yes
    child = model_server.chat_requests[1]
    assert "write_file" in offered_tools(child)
    written = tool_exchanges(model_server.chat_requests[2])[0][2]
    assert written.startswith("Denied:") is not yes


def test_children_cannot_delegate_and_the_count_is_limited(project: Path,
                                                           model_server: ModelServer):
    model_server.reply(tool_calls=[Call("delegate", {"task": TASK}),
                                   Call("delegate", {"task": "again"})])
    model_server.reply("Child answer.")
    model_server.reply("Both asked.")
    done = orchestrate(project, model_server, "--no-confirm-delegation", "--max-delegations", "1")
    assert done.returncode == 0, explain(done)
    assert [is_parent(r) for r in model_server.chat_requests] == [True, False, True]
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert results == ["Child answer.",
                       "Delegation refused: this session may start at most 1 child sessions."]


def test_the_count_holds_across_resumes(project: Path, model_server: ModelServer):
    """The third outside review: each --resume started --max-delegations more children."""
    model_server.reply(tool_calls=[Call("delegate", {"task": TASK})])
    model_server.reply("Child answer.").reply("One asked.")
    first = orchestrate(project, model_server, "--no-confirm-delegation", "--max-delegations",
                        "1", "--session", "s1")
    assert first.returncode == 0, explain(first)
    model_server.reply(tool_calls=[Call("delegate", {"task": "again"})]).reply("Refused.")

    again = run_cli("orchestrate", "--root", project, *model_args(model_server, "ollama"),
                    "--no-confirm-delegation", "--max-delegations", "1", "--session", "s1",
                    "--resume", "and once more")

    assert again.returncode == 0, explain(again)
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert results[-1] == "Delegation refused: this session may start at most 1 child sessions."
    children = [n for n, h in headers(project).items()
                if getattr(h, "parent_session", None) == "s1"]
    assert len(children) == 1


def test_delegation_flags_on_plain_ask_are_one_error(project: Path, model_server: ModelServer):
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"),
                   "--no-confirm-delegation", "hi")
    assert_user_error(done, 2, "are for orchestrate")
    model_server.reply("plain")
    plain = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "hi")
    assert plain.returncode == 0 and "delegate" not in offered_tools(model_server.last_chat)
