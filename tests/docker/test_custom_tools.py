"""Custom tools registered before `Runner.build`: offered to the model with a schema from their
pydantic model, validated, decided by the policy, audited, hidden in read-only runs unless
read-only safe — with the stand-in model server and a real container.

The `count_lines` tool is the one in examples/custom_tool.py, so the example cannot rot.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

import executor.tools
from examples.custom_tool import CountLines
from executor.agent import RunResult
from executor.audit import default_audit_dir
from executor.messages import ToolResult
from executor.policy import Decision
from executor.runner import Runner
from executor.tools import Preview, RiskLevel, Tool, ToolContext, default_registry, register
from executor.tools.builtin import BUILTIN_TOOLS
from executor.trust import read_project_file, trust
from tests.docker.conftest import IMAGE
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
BUILTIN_NAMES = [tool.name for tool in BUILTIN_TOOLS]


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    """Each test starts with no custom tool and leaves none behind (the registry is global)."""
    saved = list(executor.tools._custom)
    executor.tools._custom.clear()
    yield
    executor.tools._custom[:] = saved


# -- tools for the tests -------------------------------------------------------------------------


class TargetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(description="Where to deploy.")


class Deploy(Tool):
    """Critical: denied by the built-in defaults. Leaves a file in the container when it runs."""

    name = "deploy"
    description = "Deploy the project."
    Args = TargetArgs
    risk = RiskLevel.CRITICAL
    calls: ClassVar[list[str]] = []

    def call(self, args: TargetArgs, ctx: ToolContext) -> ToolResult:
        self.calls.append(args.target)
        return ctx.sandbox.call("write_file", {"path": f"DEPLOYED-{args.target}",
                                               "content": f"session {ctx.session_id}\n"})


class Restart(Deploy):
    """High risk: needs approval (none in a non-interactive run, unless --yes)."""

    name = "restart_service"
    description = "Restart the service."
    risk = RiskLevel.HIGH


@pytest.fixture(autouse=True)
def reset_calls() -> None:
    Deploy.calls = []


def project(workdir: Path) -> Path:
    root = workdir / "proj"
    root.mkdir()
    (root / "poem.txt").write_text("".join(f"line {n}\n" for n in range(1, 8)))
    (workdir / "outside.txt").write_text("not yours\n")
    return root


def run(root: Path, server: ModelServer, query: str = "go", **options: Any) -> RunResult:
    """One in-process run against the stand-in server; the container is removed after it."""
    with Runner.build(root, provider="ollama", host=server.url, image=IMAGE, stream=False,
                      **options) as runner:
        return runner.run(query)


def audit_records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(default_audit_dir(root).glob("*"))
            if path.suffix == ".ndjson" for line in path.read_bytes().splitlines()]


def offered(request_body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools of one chat request by name (Ollama's native `tools` field)."""
    return {t["function"]["name"]: t["function"] for t in request_body["tools"]}


def tool_messages(server: ModelServer) -> list[str]:
    return [m["content"] for m in server.last_chat.body["messages"] if m["role"] == "tool"]


# -- offered, validated, run in the sandbox, audited ---------------------------------------------


def test_registered_tool_is_offered_validated_run_in_the_sandbox_and_audited(
        workdir: Path, model_server: ModelServer):
    root = project(workdir)
    register(CountLines)
    assert default_registry().names() == [*BUILTIN_NAMES, "count_lines"]
    model_server.reply(tool_calls=[
        Call("count_lines", {"path": "poem.txt"}),
        Call("count_lines", {"path": 5}),
        Call("count_lines", {"path": "poem.txt", "recursive": True}),
        Call("count_lines", {}),
        Call("count_lines", {"path": "../outside.txt"}),
        Call("count_lines", {"path": str(default_audit_dir(root))}),
    ])
    model_server.reply("poem.txt has 7 lines.")
    result = run(root, model_server)
    assert result.answer == "poem.txt has 7 lines."

    spec = offered(model_server.chat_requests[0].body)["count_lines"]
    assert spec["description"] == "Count the lines of a text file."
    assert spec["parameters"] == {
        "type": "object",
        "properties": {"path": {"type": "string",
                                "description": "Text file, relative to the project root."}},
        "required": ["path"],
        "additionalProperties": False,
    }
    counted, wrong_type, extra, missing, outside, hidden = tool_messages(model_server)
    assert counted == "poem.txt: 7 lines"
    assert wrong_type.startswith("Invalid arguments for count_lines:") and "- path:" in wrong_type
    assert "- recursive: Extra inputs are not permitted" in extra
    assert "- path: Field required" in missing
    assert outside == "path '../outside.txt' is outside the project root"  # the toolbox said so
    assert hidden == f"path '{default_audit_dir(root)}' is outside the project root"

    records = audit_records(root)
    calls = [r for r in records if r["kind"] == "tool_call"]
    assert [(c["decision"], c["rule"], c["approved_by"]) for c in calls] == [
        ("allow", "default:low", "default:low"),
        ("reject", "invalid-arguments", None),
        ("reject", "invalid-arguments", None),
        ("reject", "invalid-arguments", None),
        ("allow", "default:low", "default:low"),
        ("allow", "default:low", "default:low"),
    ]
    assert calls[1]["arguments"] == {"path": 5}
    results = [r for r in records if r["kind"] == "tool_result"]
    assert [r["tool"] for r in results] == ["count_lines"] * 6
    assert results[0]["preview"] == "poem.txt: 7 lines" and results[0]["meta"]["lines"] == 7
    assert isinstance(results[0]["duration_ms"], int)
    assert [r["ok"] for r in results] == [True, False, False, False, False, False]


def test_tools_passed_to_build_are_offered_without_global_registration(
        workdir: Path, model_server: ModelServer):
    root = project(workdir)
    model_server.reply(tool_calls=[Call("count_lines", {"path": "poem.txt"})])
    model_server.reply("7")
    run(root, model_server, tools=[CountLines()])
    assert "count_lines" in offered(model_server.chat_requests[0].body)
    assert tool_messages(model_server) == ["poem.txt: 7 lines"]
    assert default_registry().names() == BUILTIN_NAMES


# -- the policy applies ---------------------------------------------------------------------------


def test_critical_tool_is_denied_by_default_even_with_yes(workdir: Path, model_server: ModelServer):
    root = project(workdir)
    register(Deploy)
    model_server.reply(tool_calls=[Call("deploy", {"target": "prod"})])
    model_server.reply("could not deploy")
    run(root, model_server, yes=True)
    assert Deploy.calls == [] and not (root / "DEPLOYED-prod").exists()
    assert tool_messages(model_server) == ["Denied: critical-risk tools are denied by default"]
    (call,) = [r for r in audit_records(root) if r["kind"] == "tool_call"]
    assert (call["tool"], call["decision"], call["rule"]) == ("deploy", "deny", "default:critical")


def test_a_policy_rule_can_allow_a_critical_tool(workdir: Path, model_server: ModelServer):
    root = project(workdir)
    policy = root / ".sandbox-agent" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text('[[rules]]\nname = "deploys"\ntool = "deploy"\ndecision = "allow"\n')
    trust(root, read_project_file(root, ".sandbox-agent/policy.toml"))  # the person's word
    register(Deploy)
    model_server.reply(tool_calls=[Call("deploy", {"target": "staging"})])
    model_server.reply("deployed")
    run(root, model_server, session="deploying")
    assert Deploy.calls == ["staging"]
    assert (root / "DEPLOYED-staging").read_text() == "session deploying\n"  # via the container
    (call,) = [r for r in audit_records(root) if r["kind"] == "tool_call"]
    rule = "policy.toml:1 [[rules]] #1 (deploys)"
    assert (call["decision"], call["rule"], call["approved_by"]) == ("allow", rule, f"policy:{rule}")
    write = next(r for r in audit_records(root) if r["kind"] == "tool_result")
    assert write["tool"] == "deploy" and write["sha256_before"] is None


class Answer:
    """An approver standing in for the person at the terminal."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[str] = []

    def __call__(self, tool: Tool, args: BaseModel, decision: Decision, preview: Preview) -> bool:
        self.asked.append(f"{tool.name} {args.model_dump()} {decision.rule} | {preview.text}")
        return self.approve


@pytest.mark.parametrize(("yes", "person", "approved_by"), [
    (False, None, None),  # non-interactive, no --yes: fails closed
    (True, None, "--yes"),
    (False, True, "user"),
    (False, False, None),
], ids=["non-interactive", "yes", "user-approves", "user-declines"])
def test_high_risk_tool_needs_approval(workdir: Path, model_server: ModelServer, yes: bool,
                                       person: bool | None, approved_by: str | None):
    root = project(workdir)
    register(Restart)
    model_server.reply(tool_calls=[Call("restart_service", {"target": "web"})])
    model_server.reply("done")
    approver = None if person is None else Answer(person)
    run(root, model_server, yes=yes, interactive=approver is not None, approver=approver)
    ran = approved_by is not None
    assert Deploy.calls == (["web"] if ran else [])
    assert (root / "DEPLOYED-web").exists() == ran
    (call,) = [r for r in audit_records(root) if r["kind"] == "tool_call"]
    assert (call["decision"], call["rule"], call["approved_by"]) == (
        "allow" if ran else "deny", "default:high", approved_by)
    (message,) = tool_messages(model_server)
    if approver is not None:
        assert approver.asked == [  # a custom tool without `preview` is shown its `describe`
            """restart_service {'target': 'web'} default:high | restart_service({"target":"web"})"""]
    if not ran:
        why = "declined by the user" if approver else "this run is non-interactive"
        assert why in message, message


# -- read-only runs --------------------------------------------------------------------------


def test_read_only_runs_offer_only_read_only_safe_custom_tools(
        workdir: Path, model_server: ModelServer):
    root = project(workdir)
    register(CountLines)
    register(Deploy)
    model_server.reply(tool_calls=[Call("deploy", {"target": "prod"}),
                                   Call("count_lines", {"path": "poem.txt"})])
    model_server.reply("done")
    run(root, model_server, read_only=True)
    names = set(offered(model_server.chat_requests[0].body))
    assert names == {"read_file", "list_files", "search_files", "count_lines"}
    refused, counted = tool_messages(model_server)
    assert refused.startswith("Unknown tool 'deploy'") and counted == "poem.txt: 7 lines"
    assert Deploy.calls == [] and not (root / "DEPLOYED-prod").exists()
    call = next(r for r in audit_records(root) if r["kind"] == "tool_call")
    assert (call["tool"], call["decision"], call["rule"]) == ("deploy", "reject", "unknown-tool")


# -- the example stays runnable ----------------------------------------------------------------


def test_the_custom_tool_example_runs(workdir: Path, model_server: ModelServer):
    root = workdir / "sample"
    shutil.copytree(REPO / "examples" / "sample-project", root,
                    ignore=shutil.ignore_patterns(".sandbox-agent"))
    lines = len((root / "calc.py").read_text().splitlines())
    model_server.reply(tool_calls=[Call("count_lines", {"path": "calc.py"})])
    model_server.reply(f"calc.py has {lines} lines.")
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "custom_tool.py"), "--root", str(root),
         "--host", model_server.url, "How many lines does calc.py have?"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "-> count_lines {'path': 'calc.py'} (allow)" in done.stdout
    assert done.stdout.rstrip().endswith(f"calc.py has {lines} lines.")
    assert "count_lines" in offered(model_server.chat_requests[0].body)
    assert tool_messages(model_server) == [f"calc.py: {lines} lines"]


def test_the_docs_snippet_is_the_example_tool():
    text = (REPO / "docs" / "TOOLS.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", text, re.S)
                   if "class CountLines(Tool)" in block)
    exec(compile(snippet, "docs/TOOLS.md", "exec"), {"__name__": "tools_md"})
    (registered,) = executor.tools._custom  # the snippet ends by registering it
    assert registered.spec() == CountLines.spec()
    assert (registered.risk, registered.read_only_safe, registered.requires_approval) == (
        CountLines.risk, CountLines.read_only_safe, CountLines().requires_approval)
