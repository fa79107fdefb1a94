"""A real run (the real CLI, the stand-in model server, a real container) exported as OCSF and
traced over OTLP/HTTP to a receiver on loopback, then reported as HTML."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.docker.cli_support import ask, explain, run_cli
from tests.fakes.model_server import Call, ModelServer
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.ocsf_schema import schema_errors

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-deploy-value-123"


def test_a_real_run_as_ocsf_events_and_an_otlp_trace(workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    model_server.reply(tool_calls=[Call("edit_file", {"path": "calc.py", "old_text": "a - b",
                                                      "new_text": "a + b"})])
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": f"echo {SECRET} > out.txt; exit 3"})])
    model_server.reply("Fixed.")
    with OtlpReceiver() as receiver:
        done = ask(root, model_server, "ollama", "--yes", "--session", "traced", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "DEPLOY_TOKEN": SECRET})
        assert done.returncode == 0 and done.stdout == "Fixed.\n", explain(done)
        spans = receiver.wait_for(4)  # sent at exit: the run has returned already

    names = sorted(s.name for s in spans)
    assert names == ["chat qwen2.5-coder:7b"] * 3 + ["execute_tool edit_file",
                     "execute_tool run_shell_command", "invoke_agent sandbox-agent"], names
    assert len({s.trace_id for s in spans}) == 1
    shell = next(s for s in spans if s.name == "execute_tool run_shell_command").attributes
    assert shell["process.exit.code"] == 3 and shell["sandbox_agent.approved_by"] == "--yes"
    assert shell["sandbox_agent.files_changed.paths"] == ["out.txt"]
    assert SECRET not in json.dumps([s.attributes for s in spans])

    exported = run_cli("audit", "export", "--root", root, "--format", "ocsf")
    assert exported.returncode == 0, explain(exported)
    events = [json.loads(line) for line in exported.stdout.splitlines()]
    kinds = [e["unmapped"]["kind"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and "sandbox_start" in kinds
    for event in events:
        assert schema_errors(event) == [], event["unmapped"]["kind"]
        assert hashlib.sha256(event["raw_data"].encode()).hexdigest() == \
            event["raw_data_hash"]["value"]
    process = next(e for e in events if e["class_uid"] == 1007)
    assert process["exit_code"] == 3 and "[REDACTED:env:DEPLOY_TOKEN]" in \
        process["process"]["cmd_line"]
    files = {e["file"]["path"] for e in events if e["unmapped"]["kind"] == "write"}
    assert files == {"calc.py", "out.txt"}
    assert SECRET not in exported.stdout

    page = run_cli("audit", "report", "--root", root, "--session", "traced")
    assert page.returncode == 0, explain(page)
    assert "Chain verified:" in page.stdout and "<span class='add'>+a + b</span>" in page.stdout
    assert SECRET not in page.stdout


def test_a_hanging_collector_does_not_hold_the_run(workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    model_server.reply("Nothing to do.")
    with OtlpReceiver(hang=True) as dead:
        done = ask(root, model_server, "ollama", env={"OTEL_EXPORTER_OTLP_ENDPOINT":
                                                      dead.endpoint})
    assert done.returncode == 0 and done.stdout == "Nothing to do.\n", explain(done)
    assert "Traceback" not in done.stderr and "Transient error" not in done.stderr
    assert "the OpenTelemetry collector did not take the last spans within 2 s" in done.stderr
