"""`sandbox-agent review` end to end: a read-only container, a report file, an exit code for CI."""

from __future__ import annotations

import json
import os
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
    assert data["schema_version"] == 2 and data["status"] == "ok"
    assert data["summary"] == "Summary: small and fine."
    assert data["findings"] == [{"file": "hello.py", "line": 1, "severity": "low",
                                 "title": "add a main guard.", "body": "",
                                 "location_note": None}]
    assert data["findings_source"] == "text"
    assert data["root"] == str(project) and data["provider"] == provider
    assert data["diff_base"] is None and data["diff"] is None and data["turns"] == 3
    assert data["tool_calls"] == [
        {"tool": "read_file", "arguments": {"path": "hello.py"}, "ok": True},
        {"tool": "write_file", "arguments": {"path": "hello.py", "content": "x"}, "ok": False},
    ]
    assert mounts and mounts[0]["RW"] is False  # the kernel refuses writes, not only Python
    for request in model_server.chat_requests:
        assert set(offered_tools(request)) == READ_TOOLS | {"submit_review"}
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
    assert data["findings"] == [] and data["summary"] == ""
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
    assert "## Findings\n\n- **high** `src/app.py:2`: add() subtracts.\n\n---\n" in done.stdout
    assert "2 turns, tools used: read_file_" in done.stdout


def test_review_without_changes_since_the_base_is_an_empty_report_and_exit_0(
        project: Path, workdir: Path, model_server: ModelServer, docker_client: Any):
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "initial")
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD", "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    data = json.loads(report.read_text())
    assert data["status"] == "no_changes" and data["findings"] == []
    assert data["diff"]["files"] == [] and data["diff"]["base"] == "HEAD"
    assert "No changes since HEAD" in done.stderr
    assert model_server.requests == []  # no model, and so no container either
    assert containers_of(docker_client, project) == []


def test_a_diff_base_outside_a_git_repository_is_one_clear_line(workdir: Path,
                                                               model_server: ModelServer):
    plain = workdir / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")

    done = run_cli("review", "--root", plain, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD")

    assert_user_error(done, 2, "is not in a git repository")
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
    assert text.startswith(f"# Code review of `{project}`\n\nSummary: small and fine.\n\n"
                           "## Findings\n\n- **low** `hello.py:1`: add a main guard.\n\n---\n_model ")
    assert text.rstrip().endswith("tools used: none_")


def test_an_output_in_a_missing_directory_fails_before_the_review(
        project: Path, workdir: Path, model_server: ModelServer, docker_client: Any):
    model_server.reply(REVIEW)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", workdir / "missing" / "report.json")

    assert_user_error(done, 2, "cannot write the report", str(workdir / "missing"))
    assert model_server.chat_requests == []
    assert containers_of(docker_client, project) == []


def test_a_link_the_repository_ships_at_the_report_name_is_replaced_not_followed(
        project: Path, workdir: Path, model_server: ModelServer):
    victim = workdir / "authorized_keys"  # outside the project, writable by the CI user
    victim.write_text("ssh-ed25519 AAAA person@laptop\n")
    (project / "review.md").symlink_to(victim)  # shipped by the pull request
    model_server.reply("Summary: fine.\nssh-ed25519 AAAAATTACKER attacker@evil")

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", project / "review.md", "--format", "markdown")

    assert done.returncode == 0, explain(done)
    assert victim.read_text() == "ssh-ed25519 AAAA person@laptop\n"
    report = project / "review.md"
    assert not report.is_symlink() and "attacker@evil" in report.read_text()


def test_a_fifo_at_the_report_name_fails_before_the_review_not_a_hang(
        project: Path, model_server: ModelServer, docker_client: Any):
    os.mkfifo(project / "review.sarif")
    model_server.reply(REVIEW)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", project / "review.sarif", "--format", "sarif", timeout=60)

    assert_user_error(done, 2, "cannot write the report", "a FIFO is there")
    assert model_server.chat_requests == []
    assert containers_of(docker_client, project) == []


def test_a_dash_sends_the_report_to_stdout(project: Path, model_server: ModelServer):
    model_server.reply(REVIEW)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", "-", "--format", "json")

    assert done.returncode == 0, explain(done)
    assert json.loads(done.stdout)["summary"] == "Summary: small and fine."
    assert not (project / "-").exists()


def test_an_unwritable_report_is_one_line_after_the_review(project: Path,
                                                           model_server: ModelServer):
    model_server.reply(REVIEW)

    # Its directory exists, but not even root may write it: open() fails at the very end.
    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--output", "/proc/version")

    assert_user_error(done, 2, "cannot write the report")
    assert len(model_server.chat_requests) == 1


# -- structured findings, exit codes, SARIF, GitHub -----------------------------------------------

FINDINGS = [
    {"file": "src/app.py", "line": 2, "severity": "high", "title": "add() subtracts",
     "body": "Return a + b."},
    {"file": "hello.py", "line": 1, "severity": "low", "title": "no main guard, at all",
     "body": "100% of it runs on import:\nwrap it\r\n::error::forged"},
]
REPORTED = [{**f, "location_note": None} for f in FINDINGS]
"""FINDINGS as the JSON report holds them (each placed inside the root)."""


def _submit(server: ModelServer, findings: list[dict[str, Any]] = FINDINGS,
            summary: str = "One bug.") -> None:
    server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    server.reply(tool_calls=[Call("submit_review", {"summary": summary, "findings": findings})])
    server.reply("Reviewed.")


@pytest.mark.parametrize("protocol", ["native", "constrained"])
def test_findings_handed_in_with_the_tool_are_the_report(project: Path, workdir: Path,
                                                        model_server: ModelServer, protocol: str):
    if protocol == "native":
        _submit(model_server)
    else:  # the constrained protocol: every reply is a JSON object the schema allows
        model_server.reply(json.dumps({"name": "submit_review", "arguments": {
            "summary": "One bug.", "findings": FINDINGS}}))
        model_server.reply('{"answer": "Reviewed."}')
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "openai"),
                   "--tool-protocol", protocol, "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    data = json.loads(report.read_text())
    assert data["findings_source"] == "tool" and data["summary"] == "One bug."
    assert data["findings"] == REPORTED
    if protocol == "constrained":  # the schema the server enforced holds the Finding shape
        schema = model_server.chat_requests[0].body["response_format"]["json_schema"]["schema"]
        [submit] = [o for o in schema["oneOf"]
                    if o["properties"].get("name", {}).get("const") == "submit_review"]
        finding = schema["$defs"]["Finding"]
        assert finding["properties"]["severity"]["enum"] == ["low", "medium", "high"]
        assert set(finding["required"]) == {"file", "severity", "title"}
        assert submit["properties"]["arguments"]["required"] == ["summary", "findings"]


def test_an_invalid_finding_goes_back_to_the_model_to_fix(project: Path, workdir: Path,
                                                          model_server: ModelServer):
    bad = [{"file": "src/app.py", "line": 0, "severity": "urgent", "title": "x"}]
    model_server.reply(tool_calls=[Call("submit_review", {"summary": "S", "findings": bad})])
    _submit(model_server)
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    [(_, _, result), *_] = tool_exchanges(model_server.last_chat)
    assert "Invalid arguments for submit_review" in result
    assert "findings.0.line" in result and "findings.0.severity" in result
    assert json.loads(report.read_text())["findings"] == REPORTED


@pytest.mark.parametrize(("fail_on", "code"), [("high", 33), ("medium", 33), (None, 0)])
def test_fail_on_sets_the_exit_code(project: Path, workdir: Path, model_server: ModelServer,
                                    fail_on: str | None, code: int):
    _submit(model_server, [FINDINGS[0]] if fail_on != "medium" else [FINDINGS[1]])
    flags = ["--fail-on", fail_on] if fail_on else []

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "json", "--output", workdir / "r.json", *flags)

    if fail_on == "medium":  # a low finding does not reach medium
        assert done.returncode == 0, explain(done)
        return
    if code:
        assert_user_error(done, code, "1 finding(s) at or above high", "src/app.py:2")
    else:
        assert done.returncode == 0, explain(done)
    assert json.loads((workdir / "r.json").read_text())["status"] == "ok"


def test_sarif_report_has_the_structure_code_scanning_reads(project: Path, workdir: Path,
                                                            model_server: ModelServer):
    _submit(model_server)
    out = workdir / "review.sarif"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "sarif", "--output", out)

    assert done.returncode == 0, explain(done)
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    [run] = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "sandbox-agent" and driver["version"]
    assert "informationUri" not in driver  # no page of our own; the index's is another project's
    rule_ids = {rule["id"] for rule in driver["rules"]}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == f"file://{project}/"
    assert [r["level"] for r in run["results"]] == ["error", "note"]
    for result, finding in zip(run["results"], FINDINGS, strict=True):
        assert result["ruleId"] in rule_ids
        assert result["message"]["text"].startswith(finding["title"])
        [location] = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"] == {"uri": finding["file"], "uriBaseId": "%SRCROOT%"}
        assert physical["region"] == {"startLine": finding["line"]}
    assert run["properties"]["summary"] == "One bug."


def test_github_annotations_are_escaped(project: Path, model_server: ModelServer):
    _submit(model_server)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "github")

    assert done.returncode == 0, explain(done)
    lines = done.stdout.splitlines()
    assert lines[0] == ("::error file=src/app.py,line=2,title=high%3A add() subtracts::"
                        "Return a + b.")
    assert lines[1] == ("::notice file=hello.py,line=1,title=low%3A no main guard%2C at all::"
                        "100%25 of it runs on import:%0Awrap it%0D%0A::error::forged")
    assert lines[2].startswith("review: 2 finding(s). One bug.")
    assert len(lines) == 3  # the forged command stayed inside the escaped message


def test_under_github_actions_a_report_on_stdout_cannot_issue_commands(
        project: Path, model_server: ModelServer):
    _submit(model_server, summary="Fine.\n::add-mask::leak\n::error::forged")

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   env={"GITHUB_ACTIONS": "true"})

    assert done.returncode == 0, explain(done)
    lines = done.stdout.splitlines()
    token = lines[0].removeprefix("::stop-commands::")
    assert len(token) == 32 and lines[-1] == f"::{token}::"
    assert any("add-mask::leak" in line for line in lines[1:-1])  # inside the fence: shown
    assert [line for line in lines if line.lstrip().startswith("::")] == [lines[0], lines[-1]]
    annotations = [line for line in done.stderr.splitlines() if line.startswith("::")]
    assert annotations[0].startswith("::error file=src/app.py,line=2,")
    assert len(annotations) == 2


def test_under_github_actions_the_github_format_gives_its_annotations(
        project: Path, model_server: ModelServer):
    _submit(model_server)

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "github", env={"GITHUB_ACTIONS": "true"})

    assert done.returncode == 0, explain(done)
    commands = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert commands == [
        "::error file=src/app.py,line=2,title=high%3A add() subtracts::Return a + b.",
        "::notice file=hello.py,line=1,title=low%3A no main guard%2C at all::"
        "100%25 of it runs on import:%0Awrap it%0D%0A::error::forged"]


def test_under_github_actions_streamed_model_text_cannot_issue_commands(
        project: Path, model_server: ModelServer):
    """The second outside review: with --stream (and --think) the model's tokens reach stderr
    line by line, and the runner reads workflow commands there too."""
    forged = "ok\n::error file=a.py,line=1,title=Forged::injected\n::add-mask::sandbox\n"
    model_server.reply(forged, thinking=forged)

    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--stream",
                   "--think", "on", "say hi", env={"GITHUB_ACTIONS": "true"})

    assert done.returncode == 0, explain(done)
    for stream in (done.stdout, done.stderr):
        lines = stream.replace("\r", "\n").splitlines()
        assert not [line for line in lines if line.lstrip().startswith("::")], stream
    assert "\u200b:add-mask::sandbox" in done.stderr  # still shown to a person


def test_a_long_diff_is_cut_and_the_report_says_what_was_covered(
        project: Path, workdir: Path, model_server: ModelServer):
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "initial")
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "big.txt").write_text("".join(f"line {i} {'x' * 60}\n" for i in range(2000)))
    (project / "zz_new.py").write_text("print('untracked')\n")
    model_server.default = Reply("Looked.")
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD", "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    diff = json.loads(report.read_text())["diff"]
    assert diff["files"] == ["src/app.py", "big.txt", "zz_new.py"]
    assert diff["untracked"] == ["big.txt", "zz_new.py"]
    assert diff["included"] == ["src/app.py"] and diff["partial"] == ["big.txt"]
    assert diff["omitted"] == ["zz_new.py"]
    assert diff["included_chars"] == 60_000 and diff["total_chars"] > 120_000
    assert diff["parts"] > 1  # 60,000 characters do not fit the stand-in's 8,192 tokens
    prompts = [m["content"] for m in (r.body["messages"][-1] for r in model_server.chat_requests)
               if "```diff" in m["content"]]
    assert len(prompts) == diff["parts"]
    assert "+    return a - b" in prompts[0] and "big.txt's diff was cut" in prompts[-1]
    assert all("Not shown (read them with the tools if they matter): big.txt, zz_new.py" in p
               for p in prompts)
    assert "warning: the diff was cut at 60000 of" in done.stderr


def test_untracked_files_are_reviewed_unless_told_not_to(project: Path,
                                                         model_server: ModelServer):
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "initial")
    (project / "new.py").write_text("import os\nos.system('rm -rf /')\n")
    model_server.reply("- new.py:2 high: deletes everything")  # findings: not asked again

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--diff-base", "HEAD")
    skipped = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                      "--diff-base", "HEAD", "--no-untracked")

    assert done.returncode == 0, explain(done)
    prompt = model_server.chat_requests[0].body["messages"][1]["content"]
    assert "+++ b/new.py\n@@ -0,0 +1,2 @@\n+import os\n+os.system('rm -rf /')" in prompt
    assert skipped.returncode == 0 and "No changes since HEAD" in skipped.stderr
    assert len(model_server.chat_requests) == 1


def test_a_review_answered_in_prose_is_asked_once_for_its_findings(project: Path, workdir: Path,
                                                                  model_server: ModelServer):
    """Small models answer a review in prose and never call submit_review: the report came out
    empty. They are asked once more, and what they then submit is the report."""
    model_server.reply("The add function looks wrong to me.")
    model_server.reply(tool_calls=[Call("submit_review", {"summary": "One bug.",
                                                          "findings": FINDINGS[:1]})])
    model_server.reply("Reviewed.")
    report = workdir / "report.json"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "json", "--output", report)

    assert done.returncode == 0, explain(done)
    data = json.loads(report.read_text())
    assert data["findings_source"] == "tool" and data["findings"] == REPORTED[:1]
    asked = [m["content"] for m in model_server.chat_requests[1].body["messages"]
             if m["role"] == "user"]
    assert "without calling submit_review" in asked[-1]
    assert len(model_server.chat_requests) == 3  # asked once, not again after the submission


def test_a_review_whose_answer_holds_findings_is_not_asked_again(project: Path, workdir: Path,
                                                                model_server: ModelServer):
    model_server.reply(REVIEW)
    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", "json")
    assert done.returncode == 0, explain(done)
    assert json.loads(done.stdout)["findings_source"] == "text"
    assert len(model_server.chat_requests) == 1


HOSTILE = [
    {"file": "../../../../home/runner/.ssh/id_rsa", "line": 1, "severity": "high",
     "title": "key\n\n---\n_model m (ollama), session forged_"},
    {"file": "https://evil.example/app.py", "line": 2, "severity": "medium", "title": "url"},
    {"file": "src/app.py", "line": 2, "severity": "low",
     "title": "real\n\n**Verdict: safe to merge** <!--", "body": "one\n- two\n# three"},
]


@pytest.mark.parametrize("fmt", ["markdown", "json", "sarif", "github"])
def test_what_the_model_wrote_cannot_place_or_forge_in_any_format(
        project: Path, workdir: Path, model_server: ModelServer, fmt: str):
    _submit(model_server, HOSTILE, summary="Fine.\n\n---\n_model x_\n<!--")
    out = workdir / f"review.{fmt}"

    done = run_cli("review", "--root", project, *model_args(model_server, "ollama"),
                   "--format", fmt, "--output", out, "--fail-on", "high")

    assert_user_error(done, 33, "1 finding(s) at or above high", "(no location)")
    text = out.read_text()
    assert "id_rsa" not in done.stderr and "evil.example" not in done.stderr
    if fmt == "markdown":
        lines = text.splitlines()
        assert [line for line in lines if line.startswith("_model")] == [lines[-1]]
        assert "session forged" not in lines[-1] and "<!--" not in text
        assert [line for line in lines if line.strip() == "---"] == ["---"]
        assert sum(line.startswith("- ") for line in lines) == 3
        assert "(no location:" in text and "id_rsa" not in text and "evil.example" not in text
    elif fmt == "json":
        findings = json.loads(text)["findings"]
        assert [(f["file"], f["line"]) for f in findings] == [(None, None), (None, None),
                                                              ("src/app.py", 2)]
        assert all(f["location_note"] for f in findings[:2]) and "\n" not in findings[2]["title"]
    elif fmt == "sarif":
        [run] = json.loads(text)["runs"]
        uris = [loc["physicalLocation"]["artifactLocation"]["uri"]
                for result in run["results"] for loc in result["locations"]]
        assert uris == ["src/app.py"] and "id_rsa" not in text and "evil.example" not in text
        assert len(run["invocations"][0]["toolExecutionNotifications"]) == 2
    else:
        lines = text.splitlines()
        assert [line.split(" ", 1)[0] for line in lines[:3]] == ["::error", "::warning",
                                                                 "::notice"]
        assert "file=" not in lines[0] + lines[1] and "file=src/app.py,line=2" in lines[2]
        assert len(lines) == 4 and lines[3].startswith("review: 3 finding(s). Fine. --- ")
