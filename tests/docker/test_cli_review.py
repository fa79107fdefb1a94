"""`sandbox-agent review` end to end: a read-only container, a report file, an exit code for CI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply

pytestmark = pytest.mark.docker

REVIEW = "Summary: small and fine.\n\n- hello.py:1 low: add a main guard."


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    *args], check=True, capture_output=True)


def _workspace_mount(docker_client: Any, root: Path) -> dict[str, Any]:
    [container] = containers_of(docker_client, root)
    mounts = docker_client.api.inspect_container(container.id)["Mounts"]
    return next(m for m in mounts if m["Destination"] == "/workspace")


@pytest.mark.engines
@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_review_writes_a_json_report_from_a_read_only_container(
        project: Path, workdir: Path, model_server: ModelServer, docker_client: Any,
        provider: str):
    before = tree(project)
    mounts: list[dict[str, Any]] = []

    def read_while_looking(request: RecordedRequest) -> Reply:
        mounts.append(_workspace_mount(docker_client, project))
        return Reply(tool_calls=(Call("read_file", {"path": "hello.py"}),))

    model_server.respond(read_while_looking)
    model_server.reply(tool_calls=[Call("write_file", {"path": "hello.py", "content": "x"})])
    model_server.reply(REVIEW)
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, provider),
                   "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    assert done.stdout == "" and "Traceback" not in done.stderr
    data = json.loads(report.read_text())
    assert data["status"] == "ok" and data["review"] == REVIEW
    assert data["root"] == str(project) and data["provider"] == provider
    assert data["diff_base"] is None and data["turns"] == 3
    assert data["tool_calls"] == [
        {"tool": "read_file", "arguments": {"path": "hello.py"}, "ok": True},
        {"tool": "write_file", "arguments": {"path": "hello.py", "content": "x"}, "ok": False},
    ]
    assert mounts and mounts[0]["RW"] is False  # the kernel refuses writes, not only Python
    for request in model_server.chat_requests:
        assert set(offered_tools(request)) == READ_TOOLS
    assert "Review the code of this project" in model_server.chat_requests[0].body["messages"][1][
        "content"]
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert results[0] == '     1\tprint("hello")' and "Unknown tool 'write_file'" in results[1]
    assert tree(project) == before
    assert containers_of(docker_client, project) == []


def test_a_failed_review_exits_non_zero_with_an_error_report(
        project: Path, workdir: Path, model_server: ModelServer, docker_client: Any):
    model_server.error(400, "model does not exist")
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "json", "--output", report)

    assert_user_error(done, 23, "HTTP 400")
    data = json.loads(report.read_text())
    assert data["status"] == "error"
    assert data["error"]["exit_code"] == 23 and data["error"]["type"] == "ModelResponseError"
    assert "model does not exist" in data["error"]["message"]
    assert "review" not in data
    assert containers_of(docker_client, project) == []


def test_review_of_uncommitted_changes_sends_the_diff(project: Path, model_server: ModelServer):
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "initial")
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a - b  # oops\n")
    model_server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    model_server.reply("- src/app.py:2 high: add() subtracts.")

    done = run_cli("review", "--root", project, *model_args(model_server, "openai"),
                   "--diff-base", "HEAD")

    assert done.returncode == 0, explain(done)
    prompt = model_server.chat_requests[0].body["messages"][1]["content"]
    assert "changes since HEAD" in prompt and "```diff" in prompt
    assert "-    return a + b\n+    return a - b  # oops" in prompt
    assert "hello.py" not in prompt  # only the changed file
    # Markdown on stdout: the heading names the scope, then the review, then the facts.
    assert done.stdout.startswith(f"# Code review of `{project}` (changes since `HEAD`)\n\n")
    assert "- src/app.py:2 high: add() subtracts.\n\n---\n" in done.stdout
    assert "2 turns, tools used: read_file_" in done.stdout


def test_review_without_changes_since_the_base_is_a_usage_error(project: Path,
                                                                 model_server: ModelServer,
                                                                 docker_client: Any):
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "initial")

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD")

    assert_user_error(done, 2, "no changes since HEAD")
    assert model_server.chat_requests == []
    assert containers_of(docker_client, project) == []


def test_a_diff_base_outside_a_git_repository_is_one_clear_line(workdir: Path,
                                                               model_server: ModelServer):
    plain = workdir / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")

    done = run_cli("review", "--root", plain, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD")

    assert_user_error(done, 2, "git diff HEAD failed")
    assert "--diff-base needs a git repository" in done.stderr
    assert model_server.requests == []


def test_review_writes_a_markdown_report_file(project: Path, workdir: Path,
                                              model_server: ModelServer):
    model_server.reply(REVIEW)
    report = workdir / "review.md"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", report, "--format", "markdown")

    assert done.returncode == 0, explain(done)
    assert done.stdout == ""
    text = report.read_text()
    assert text.startswith(f"# Code review of `{project}`\n\n{REVIEW}\n\n---\n_model ")
    assert text.rstrip().endswith("tools used: none_")


def test_an_output_in_a_missing_directory_fails_before_the_review(
        project: Path, workdir: Path, model_server: ModelServer, docker_client: Any):
    model_server.reply(REVIEW)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", workdir / "missing" / "report.json")

    assert_user_error(done, 2, "cannot write the report", str(workdir / "missing"))
    assert model_server.chat_requests == []
    assert containers_of(docker_client, project) == []


def test_an_unwritable_report_is_one_line_after_the_review(project: Path,
                                                           model_server: ModelServer):
    model_server.reply(REVIEW)

    # Its directory exists, but not even root may write it: open() fails at the very end.
    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", "/proc/version")

    assert_user_error(done, 2, "cannot write the report")
    assert len(model_server.chat_requests) == 1
