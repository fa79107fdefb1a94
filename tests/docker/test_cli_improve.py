"""`sandbox-agent improve` end to end: a read-only review, then a fix session in a copy workspace
whose changes stay pending until `apply`; without a terminal it needs --yes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from executor.session import NdjsonSessionStore
from tests.docker.cli_support import (
    READ_TOOLS,
    assert_user_error,
    containers_of,
    explain,
    model_args,
    offered_tools,
    run_cli,
    tool_exchanges,
    tree,
)
from tests.fakes.model_server import Call, ModelServer, Reply

pytestmark = pytest.mark.docker

FINDING = {"file": "src/app.py", "line": 2, "severity": "medium",
           "title": "add() is misnamed: it subtracts", "body": "Return a + b."}


def improve(root: Path, server: ModelServer, *flags: Any) -> Any:
    return run_cli("improve", "--root", root, *model_args(server, "ollama"), *flags)


def script_review(server: ModelServer, findings: list[dict[str, Any]]) -> None:
    server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    server.reply(tool_calls=[Call("submit_review", {"summary": "One bug.", "findings": findings})])
    server.reply("Reviewed.")


def test_the_fix_lands_in_a_pending_changeset_never_in_the_tree(
        project: Path, model_server: ModelServer, docker_client: Any):
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    before = tree(project)
    script_review(model_server, [FINDING])
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py",
                                                      "old_text": "a - b", "new_text": "a + b"})])
    model_server.reply("1. fixed")

    done = improve(project, model_server, "--yes")

    assert done.returncode == 0, explain(done)
    assert done.stdout == "1. fixed\n"
    assert tree(project) == before  # nothing touched the tree
    assert "review: 1 finding(s) to fix" in done.stderr
    assert "medium src/app.py:2 add() is misnamed: it subtracts" in done.stderr
    assert "sandbox-agent apply --root" in done.stderr and "pending" in done.stderr
    review_requests, fix_requests = model_server.chat_requests[:3], model_server.chat_requests[3:]
    assert all(set(offered_tools(r)) == READ_TOOLS | {"submit_review"} for r in review_requests)
    assert "edit_file" in offered_tools(fix_requests[0])
    fix_query = fix_requests[0].body["messages"][-1]["content"]
    assert "1. [medium] src/app.py:2 add() is misnamed: it subtracts\n   Return a + b." in fix_query
    sessions = {s.name: NdjsonSessionStore.open(project, s.name).header
                for s in NdjsonSessionStore(project, "x").list()}
    assert sorted(h.mount_mode for h in sessions.values()) == ["ro", "rw"]
    assert [h.workspace for h in sessions.values() if h.mount_mode == "rw"] == ["copy"]

    diff = run_cli("diff", "--root", project)
    assert "-    return a - b\n+    return a + b" in diff.stdout, explain(diff)
    applied = run_cli("apply", "--root", project, "--yes")
    assert applied.returncode == 0, explain(applied)
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert containers_of(docker_client, project) == []


def test_without_a_terminal_it_needs_yes(project: Path, model_server: ModelServer):
    done = improve(project, model_server)
    assert_user_error(done, 2, "improve needs --yes")
    assert model_server.chat_requests == []


def test_no_findings_means_no_fix_session(project: Path, model_server: ModelServer):
    script_review(model_server, [])
    done = improve(project, model_server, "--yes")
    assert done.returncode == 0 and done.stdout == "", explain(done)
    assert "nothing to improve: One bug." in done.stderr
    assert len(model_server.chat_requests) == 3 and model_server.pending == 0
    sessions = NdjsonSessionStore(project, "x").list()
    assert [NdjsonSessionStore.open(project, s.name).header.mount_mode for s in sessions] == ["ro"]


def test_a_failed_review_is_one_error_and_no_fix(project: Path, model_server: ModelServer):
    model_server.error(400, "bad model")
    done = improve(project, model_server, "--yes")
    assert_user_error(done, 23, "the review failed")
    assert len(model_server.chat_requests) == 1


def test_the_fix_phase_keeps_what_the_review_read_at_the_start(
        project: Path, workdir: Path, model_server: ModelServer):
    """The fix is a later phase of the same run: the person's policy file rewritten (allow-all)
    between the review and the fix changes nothing; the fix's command is still denied."""
    policy = workdir / "policy.toml"
    policy.write_text('[[rules]]\nname = "no shell"\ntool = "run_shell_command"\n'
                      'decision = "deny"\nreason = "no commands in this run"\n')
    model_server.reply(tool_calls=[Call("submit_review", {"summary": "One bug.",
                                                          "findings": [FINDING]})])
    model_server.respond(lambda request: (policy.write_text(  # the review's last reply
        '[[rules]]\ntool = "*"\ndecision = "allow"\n'), Reply("Reviewed."))[1])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch pwned"})])
    model_server.reply("1. not fixed")

    done = improve(project, model_server, "--yes", "--policy", policy)

    assert done.returncode == 0 and done.stdout == "1. not fixed\n", explain(done)
    [(tool, _, result)] = tool_exchanges(model_server.last_chat)
    assert tool == "run_shell_command" and result.startswith("Denied:"), result
    assert "no commands in this run" in result
