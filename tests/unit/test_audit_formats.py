"""Audit exports as OCSF events and HTML, on logs the real writer wrote.

OCSF events are validated against the OCSF 1.8.0 schema that the `ocsf-json-schema` package
ships (the schema server's own export, turned into JSON Schema draft 2020-12), with the profiles
each event declares.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from executor import audit
from executor.audit import read_records, verify
from executor.audit_formats import ocsf, report
from executor.cli import app
from tests.fakes.audit_log import EVIL_NAME, SECRET, full_run, sha, writer
from tests.ocsf_schema import schema_errors

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "audit"
    full_run(directory)
    return directory


def export(directory: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["audit", "export", "--audit-dir", str(directory), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


# ---------------------------------------------------------------------------- every kind


def written_kinds() -> set[str]:
    """The kinds executor/ writes: literal first arguments of every `.record(...)` (or
    `._record(...)`) call, and the kinds of AuditLog's own helpers (`self.record("run_start",
    ...)`)."""
    kinds: set[str] = set()
    for path in (REPO / "executor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("record", "_record") and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                kinds.add(node.args[0].value)
    return kinds


def test_record_kinds_lists_every_kind_the_code_writes() -> None:
    found = written_kinds()
    assert {"tool_call", "apply", "undo", "write"} <= found  # the scan sees the writers
    assert found == set(audit.RECORD_KINDS)


def test_the_sample_log_has_every_kind(log_dir: Path) -> None:
    assert {r["kind"] for r in read_records(log_dir)} == set(audit.RECORD_KINDS)


@pytest.mark.parametrize("kind", [*audit.RECORD_KINDS, *audit.PLANNED_KINDS])
def test_every_kind_has_its_own_ocsf_mapping(kind: str) -> None:
    assert kind in ocsf.MAPPERS


def test_every_kind_appears_in_every_export_format(log_dir: Path) -> None:
    jsonl = {json.loads(line)["kind"] for line in export(log_dir, "-f", "jsonl").splitlines()}
    rows = csv.DictReader(io.StringIO(export(log_dir, "-f", "csv")))
    events = events_of(export(log_dir, "-f", "ocsf"))
    assert jsonl == {row["kind"] for row in rows} == set(audit.RECORD_KINDS)
    assert {e["metadata"]["event_code"] for e in events} == set(audit.RECORD_KINDS)


# ---------------------------------------------------------------------------- OCSF


def events_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_every_event_is_valid_ocsf_of_its_class(log_dir: Path) -> None:
    events = events_of(export(log_dir, "--format", "ocsf"))
    assert len(events) == len(list(read_records(log_dir)))
    for event in events:
        assert schema_errors(event) == [], event["unmapped"]["kind"]
    classes = {(e["unmapped"]["kind"], e["class_uid"]) for e in events}
    assert {("run_start", 6002), ("sandbox_start", 6002), ("run_end", 6002), ("run_abandoned", 6002),
            ("model_request", 6003), ("tool_call", 6003), ("retry", 6003), ("write", 1001),
            ("tool_result", 1001), ("tool_result", 1007), ("tool_result", 6003),
            ("apply", 1001), ("undo", 1001), ("warning", 6008), ("error", 6008),
            ("connection", 4001)} == classes


def test_exports_are_stable_byte_for_byte(log_dir: Path) -> None:
    """The same log gives the same bytes (no export time, no random ids), in every format."""
    for args in (["export", "-f", "ocsf"], ["export", "-f", "csv"], ["report"]):
        first, second = (CliRunner().invoke(app, ["audit", *args, "--audit-dir", str(log_dir)])
                         for _ in range(2))
        assert first.exit_code == 0 and first.stdout == second.stdout, args


def test_the_schema_check_catches_what_is_not_ocsf(log_dir: Path) -> None:
    events = events_of(export(log_dir, "--format", "ocsf"))
    write = next(e for e in events if e["class_uid"] == 1001)
    del write["file"]
    call = next(e for e in events if e["unmapped"]["kind"] == "tool_call")
    del call["metadata"]["profiles"]  # its security_control attributes need the profile
    process = next(e for e in events if e["class_uid"] == 1007)
    process["exit_code"] = "zero"
    for event in (write, call, process):
        assert schema_errors(event) != []


def test_a_planned_connection_and_an_unknown_kind_are_valid_too(tmp_path: Path) -> None:
    log = writer(tmp_path)
    log.record("connection", host="pypi.example", port=443, decision="deny", rule="egress")
    log.record("future_kind", detail="x")
    events = events_of(export(tmp_path, "--format", "ocsf"))
    assert [(e["class_uid"], e["activity_id"]) for e in events] == [(4001, 5), (0, 99)]
    assert events[0]["dst_endpoint"] == {"hostname": "pypi.example", "port": 443}
    for event in events:
        assert schema_errors(event) == []


def test_events_keep_the_chain_so_a_consumer_can_verify_it(log_dir: Path) -> None:
    lines = b"".join(p.read_bytes() for p in sorted(log_dir.glob("*.ndjson"))).splitlines()
    prev = audit.ZERO_HASH
    for seq, (event, line) in enumerate(
            zip(events_of(export(log_dir, "--format", "ocsf")), lines, strict=True), start=1):
        raw, digest = event["raw_data"], event["raw_data_hash"]
        assert digest["algorithm_id"] == ocsf.SHA256
        assert hashlib.sha256(raw.encode()).hexdigest() == digest["value"]
        record = json.loads(raw)
        assert (record["seq"], record["prev"], event["metadata"]["sequence"]) == (seq, prev, seq)
        assert audit.canonical({**record, "hash": digest["value"]}) == line  # the log line
        prev = digest["value"]


def test_decisions_processes_and_files_are_mapped(log_dir: Path) -> None:
    events = events_of(export(log_dir, "--format", "ocsf"))
    calls = [e for e in events if e["unmapped"]["kind"] == "tool_call"]
    denied = next(e for e in calls if e["api"]["operation"] == "run_shell_command"
                  and e["action_id"] == ocsf.DENIED)
    assert denied["authorizations"] == [{"decision": "deny", "policy": {
        "name": "policy.toml:9 [[rules]] #4 (curl)", "desc": "network tools are denied"}}]
    assert denied["disposition_id"] == 2 and denied["severity_id"] == ocsf.LOW
    rejected = next(e for e in calls if e["api"]["operation"] == "no_such_tool")
    assert (rejected["action_id"], rejected["disposition_id"]) == (ocsf.DENIED, 25)
    approved = next(e for e in calls if e["api"]["operation"] == "edit_file")
    assert approved["unmapped"]["approved_by"] == "user" and approved["action_id"] == 1
    shell = next(e for e in events if e["class_uid"] == 1007)
    assert shell["process"]["cmd_line"].startswith("DEPLOY_TOKEN=[REDACTED:env:DEPLOY_TOKEN]")
    assert shell["exit_code"] == 0 and shell["device"]["uid"] == "c0ffee"
    edit = next(e for e in events if e["unmapped"]["kind"] == "write"
                and e["file"]["path"] == "calc.py")
    assert edit["activity_id"] == 3
    assert edit["file"]["hashes"][0]["value"] == sha("def add(a, b):\n    return a - b\n")
    assert edit["file_result"]["hashes"][0]["value"] == sha("def add(a, b):\n    return a + b\n")
    created = next(e for e in events if e["unmapped"]["kind"] == "write"
                   and e["file"]["path"] == EVIL_NAME)
    assert created["activity_id"] == 1 and created["unmapped"]["source"] == "command"
    model = next(e for e in events if e["unmapped"]["kind"] == "model_request")
    assert model["ai_model"] == {"name": "qwen2.5-coder", "ai_provider": "ollama"}
    assert model["unmapped"]["gen_ai"]["prompt_tokens"] == 310


def test_ocsf_export_is_ascii_and_never_holds_the_secret(log_dir: Path) -> None:
    text = export(log_dir, "--format", "ocsf")
    assert text.isascii() and SECRET not in text and "[REDACTED:env:DEPLOY_TOKEN]" in text


def test_session_filter_and_output_file(log_dir: Path, tmp_path: Path) -> None:
    full_run(log_dir, session="other")
    target = tmp_path / "events.ocsf.jsonl"
    export(log_dir, "--format", "ocsf", "--session", "other", "--output", str(target))
    events = events_of(target.read_text())
    assert {e["unmapped"]["session"] for e in events} == {"other"}
    assert target.stat().st_mode & 0o777 == 0o600 and verify(log_dir).ok


# ---------------------------------------------------------------------------- odd records

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
_FIELDS = ("tool", "call_id", "arguments", "decision", "rule", "ok", "exit_code", "path",
           "sha256_before", "sha256_after", "change", "files", "status", "duration_ms", "ts",
           "run", "seq", "calls_without_result", "file_kind", "source", "message", "user")


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from([*audit.RECORD_KINDS, *audit.PLANNED_KINDS, "other"]),
       fields=st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=8))
def test_any_shape_of_record_exports_and_reports(kind: str, fields: dict[str, Any]) -> None:
    """A log someone edited (verify says so) still exports and reports, never crashes."""
    record = {**fields, "kind": kind}
    event = ocsf.OcsfMapper().event(record)
    assert json.loads(json.dumps(event))["class_uid"] == event["class_uid"]
    builder = report.ReportBuilder()
    builder.add(record)
    page = builder.page(verify(Path("/nonexistent")), "x")
    assert "<script" not in page
