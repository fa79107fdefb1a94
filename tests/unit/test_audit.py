"""The audit log on real files: chain, tamper detection, redaction, concurrency, export, CLI."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_args

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from executor import audit
from executor.audit import AuditLog, canonical, read_records, record_hash, verify
from executor.cli import audit as audit_cli
from executor.errors import AuditError, AuditIntegrityError, ConfigError
from executor.hooks import (
    CompleteEvent,
    ErrorEvent,
    HookBus,
    ModelRequestEvent,
    RetryEvent,
    RunStartEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from executor.redact import Redactor
from executor.text import inert_line

REPO = Path(__file__).resolve().parents[2]
DAY1 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


class Clock:
    """A settable clock that advances a millisecond per reading."""

    def __init__(self, start: datetime = DAY1) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def make_log(directory: Path, clock: Clock | None = None, **options: Any) -> AuditLog:
    options.setdefault("redactor", Redactor({}))
    return AuditLog(directory, session="s1", clock=clock or Clock(), **options)


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def day_file(directory: Path, day: str) -> Path:
    return directory / f"{day}.ndjson"


# ---------------------------------------------------------------------------- writing


def test_records_form_a_hash_chain_that_verifies(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    written = [log.record("note", n=n) for n in range(5)]
    raw = lines_of(day_file(tmp_path, "2024-05-01"))
    assert [r["seq"] for r in written] == [1, 2, 3, 4, 5]
    assert written[0]["prev"] == "0" * 64
    for line, record, before in zip(raw, written, [None, *written], strict=False):
        assert line == canonical(record) + b"\n"
        body = {k: v for k, v in json.loads(line).items() if k != "hash"}
        assert record["hash"] == hashlib.sha256(canonical(body)).hexdigest()
        assert before is None or record["prev"] == before["hash"]
    report = verify(tmp_path)
    assert report.ok and not report.empty
    assert (report.records, report.head_seq, report.head_hash) == (5, 5, written[-1]["hash"])


def test_canonical_form_is_sorted_compact_ascii() -> None:
    assert canonical({"b": 1, "a": "é", "c": [1, {"z": None, "y": True}]}) == (
        b'{"a":"\\u00e9","b":1,"c":[1,{"y":true,"z":null}]}'
    )


def test_layout_utc_day_private_modes_and_state_dir(tmp_path: Path) -> None:
    late_evening_west = datetime(2024, 5, 1, 23, 30, tzinfo=timezone(timedelta(hours=-2)))
    log = AuditLog.for_root(
        tmp_path, session="s", clock=Clock(late_evening_west), redactor=Redactor({})
    )
    record = log.record("note")
    directory = audit.default_audit_dir(tmp_path)
    assert tmp_path.resolve() not in directory.parents  # never inside the project
    assert (directory / "2024-05-02.ndjson").is_file()  # 01:30 UTC the next day
    assert record["ts"].startswith("2024-05-02T01:30:00.") and record["ts"].endswith("Z")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "2024-05-02.ndjson").stat().st_mode) == 0o600
    assert not (tmp_path / ".sandbox-agent").exists()


def test_chain_continues_across_days(tmp_path: Path) -> None:
    clock = Clock()
    log = make_log(tmp_path, clock)
    first = [log.record("note", n=n) for n in range(2)]
    clock.now += timedelta(days=1)
    second = [log.record("note", n=n) for n in range(2)]
    assert second[0]["prev"] == first[-1]["hash"] and second[0]["seq"] == 3
    assert len(lines_of(day_file(tmp_path, "2024-05-02"))) == 2
    report = verify(tmp_path)
    assert report.ok and report.files == ("2024-05-01.ndjson", "2024-05-02.ndjson")


def test_a_new_writer_picks_up_the_chain_from_disk(tmp_path: Path) -> None:
    make_log(tmp_path).record("note")
    record = make_log(tmp_path).record("note")  # another run, no shared memory
    assert record["seq"] == 2 and verify(tmp_path).ok


def test_clock_going_back_appends_to_the_newest_file(tmp_path: Path) -> None:
    clock = Clock(DAY1 + timedelta(days=3))
    log = make_log(tmp_path, clock)
    log.record("note")
    clock.now = DAY1
    log.record("note")
    assert [p.name for p in sorted(tmp_path.glob("*.ndjson"))] == ["2024-05-04.ndjson"]
    assert verify(tmp_path).ok


def test_reserved_fields_cannot_be_overwritten(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hash"):
        make_log(tmp_path).record("note", hash="0" * 64)


def test_torn_tail_is_left_for_verify_and_the_chain_goes_on(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.record("note")
    path = day_file(tmp_path, "2024-05-01")
    with path.open("ab") as f:
        f.write(b'{"seq":2,"kind":"no')  # a crash in the middle of a write
    record = make_log(tmp_path).record("note")
    assert record["seq"] == 2
    assert json.loads(lines_of(path)[-1]) == record  # on a line of its own
    problem = verify(tmp_path).problem
    assert problem and (problem.kind, problem.line) == ("broken", 2)


# ---------------------------------------------------------------------------- verify


@pytest.fixture
def three_days(tmp_path: Path) -> Path:
    """Nine records, three per day, 2024-05-01 .. 2024-05-03."""
    clock = Clock()
    log = make_log(tmp_path, clock)
    for day in range(3):
        clock.now = DAY1 + timedelta(days=day)
        for n in range(3):
            log.record("note", day=day, n=n)
    assert verify(tmp_path).ok
    return tmp_path


def rewrite(path: Path, edit: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(edit(lines_of(path))))


def test_editing_one_byte_names_the_record(three_days: Path) -> None:
    path = day_file(three_days, "2024-05-02")
    data = bytearray(path.read_bytes())
    line2 = data.index(b"\n") + 1
    at = data.index(b'"n":1', line2) + 4
    data[at] = ord("7")
    path.write_bytes(bytes(data))
    problem = verify(three_days).problem
    assert problem is not None
    assert (problem.kind, problem.file, problem.line, problem.seq) == (
        "edited", "2024-05-02.ndjson", 2, 5
    )
    assert "hash mismatch" in problem.detail


def test_a_rewritten_but_rehashed_record_breaks_the_next_link(three_days: Path) -> None:
    def forge(lines: list[bytes]) -> list[bytes]:
        record = json.loads(lines[0])
        record["n"] = 99
        record["hash"] = record_hash(record)
        return [canonical(record) + b"\n", *lines[1:]]

    rewrite(day_file(three_days, "2024-05-02"), forge)
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.line, problem.seq) == ("edited", 2, 5)
    assert "2024-05-02.ndjson line 1" in problem.detail


def test_deleting_a_record_names_where_it_is_missing(three_days: Path) -> None:
    rewrite(day_file(three_days, "2024-05-02"), lambda ls: [ls[0], ls[2]])
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.file, problem.line, problem.seq) == (
        "removed", "2024-05-02.ndjson", 2, 6
    )
    assert "seq 5 missing" in problem.detail


def test_inserting_a_copy_is_detected(three_days: Path) -> None:
    rewrite(day_file(three_days, "2024-05-01"), lambda ls: [ls[0], ls[1], ls[1], ls[2]])
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.line, problem.seq) == ("inserted", 3, 2)
    assert "copy of the record at 2024-05-01.ndjson line 2" in problem.detail


def test_inserting_a_forged_record_with_a_valid_hash_is_detected(three_days: Path) -> None:
    def insert(lines: list[bytes]) -> list[bytes]:
        previous = json.loads(lines[0])
        forged = {**previous, "seq": 2, "prev": previous["hash"], "n": "forged"}
        forged["hash"] = record_hash(forged)
        return [lines[0], canonical(forged) + b"\n", *lines[1:]]

    rewrite(day_file(three_days, "2024-05-01"), insert)
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.line, problem.seq) == ("inserted", 3, 2)
    assert "also used at 2024-05-01.ndjson line 2" in problem.detail


def test_swapping_two_records_is_reported_as_reordered(three_days: Path) -> None:
    rewrite(day_file(three_days, "2024-05-03"), lambda ls: [ls[0], ls[2], ls[1]])
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.file, problem.line, problem.seq) == (
        "reordered", "2024-05-03.ndjson", 2, 9
    )
    assert "before seq 8 (2024-05-03.ndjson line 3)" in problem.detail


def test_truncating_a_day_in_the_middle_breaks_the_chain_between_files(three_days: Path) -> None:
    rewrite(day_file(three_days, "2024-05-02"), lambda ls: ls[:1])
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.file, problem.line, problem.seq) == (
        "removed", "2024-05-03.ndjson", 1, 7
    )
    assert "seq 5..6 missing between 2024-05-02.ndjson and 2024-05-03.ndjson" in problem.detail


def test_a_missing_day_file_is_detected(three_days: Path) -> None:
    day_file(three_days, "2024-05-02").unlink()
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.file, problem.seq) == (
        "removed", "2024-05-03.ndjson", 7
    )


def test_removing_the_oldest_file_is_detected(three_days: Path) -> None:
    day_file(three_days, "2024-05-01").unlink()
    problem = verify(three_days).problem
    assert problem and problem.kind == "removed" and "at the start" in problem.detail


def test_a_broken_json_line_is_named(three_days: Path) -> None:
    rewrite(day_file(three_days, "2024-05-02"), lambda ls: [ls[0], b"{garbage\n", *ls[1:]])
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.line, problem.seq) == ("broken", 2, None)


def test_a_reserialised_record_is_not_canonical(three_days: Path) -> None:
    def pretty(lines: list[bytes]) -> list[bytes]:
        return [lines[0], json.dumps(json.loads(lines[1])).encode() + b"\n", lines[2]]

    rewrite(day_file(three_days, "2024-05-01"), pretty)
    problem = verify(three_days).problem
    assert problem and (problem.kind, problem.line) == ("edited", 2)
    assert "canonical" in problem.detail


def test_missing_or_empty_log_is_ok_but_empty(tmp_path: Path) -> None:
    assert verify(tmp_path / "nothing").empty
    (tmp_path / "2024-05-01.ndjson").write_bytes(b"")
    report = verify(tmp_path)
    assert report.ok and report.empty and report.head_hash == "0" * 64


def test_raise_for_problem(three_days: Path) -> None:
    verify(three_days).raise_for_problem()
    rewrite(day_file(three_days, "2024-05-01"), lambda ls: ls[1:])
    with pytest.raises(AuditIntegrityError, match=r"2024-05-01.ndjson line 1, seq 2"):
        verify(three_days).raise_for_problem()


# ---------------------------------------------------------------------------- concurrency

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from executor.audit import AuditLog
    from executor.redact import Redactor
    log = AuditLog(Path(sys.argv[1]), session=sys.argv[2], required=True, redactor=Redactor({}))
    for n in range(int(sys.argv[3])):
        log.record("note", n=n, pad="x" * 2000)
    """
)


def test_two_processes_writing_at_once_keep_one_valid_chain(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, "150"], cwd=REPO)
        for name in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    report = verify(tmp_path)
    assert report.ok, report.problem
    records = list(read_records(tmp_path))
    assert [r["seq"] for r in records] == list(range(1, 301))
    assert sorted(r["session"] for r in records) == ["a"] * 150 + ["b"] * 150


# ---------------------------------------------------------------------------- redaction

SHAPES = {
    "openai-key": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
    "github-token": "ghp_" + "a1B2" * 9,
    "github-pat": "github_pat_" + "11ABCDEFG0" * 4,
    "aws-access-key": "AKIA" + "IOSFODNN7EXAMPLE",
    "slack-token": "xoxb-" + "1234567890-abcdefghij",
    "bearer": "Bearer " + "abc.def-ghi_jkl~mno",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2lnbmF0dXJl",
    "private-key": (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        "MIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"
    ),
    "url-credentials": "https://deploy:s3cr3tpass@git.example.com/repo.git",
    "assignment": "export DB_PASSWORD=hunter2hunter2",
    "stripe-live": "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe-restricted": "rk_" + "test_" + "51H8abcdEFGHijklMNOPqrst",
    "gitlab-token": "glpat-" + "xYz12AbC34dEf56GhI78",
    "google-api-key": "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "npm-token": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "huggingface-token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "pypi-token": "pypi-AgE" + "IcHlwaS5vcmcCJGE2ZDVlN2Q4LTk5ZTAtNGQ0Zi1hNjY0LWM0N2ExYmIwMjE",
    "sendgrid-key": "SG." + "ngeVfQFYQlKU0ufo8x5d1A.TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    "digitalocean-token": "dop_v1_" + "ab" * 32,
    "groq-key": "gsk_" + "Ab1" * 17 + "c",
}
SECRET_PART = {
    "bearer": "abc.def-ghi_jkl~mno",
    "url-credentials": "s3cr3tpass",
    "assignment": "hunter2hunter2",
    "private-key": "MIIEowIBAAKCAQEA7",
}


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_token_shapes_never_reach_the_file(tmp_path: Path, kind: str) -> None:
    token = SHAPES[kind]
    log = make_log(tmp_path)
    log.tool_call(tool="run_shell_command", arguments={"command": f"curl {token}"},
                  decision="allow", rule="r", call_id="c1")
    log.tool_result(tool="run_shell_command", ok=True, output=f"out: {token} end", call_id="c1")
    data = day_file(tmp_path, "2024-05-01").read_bytes()
    assert SECRET_PART.get(kind, token).encode() not in data
    assert b"[REDACTED:" in data and verify(tmp_path).ok


def test_env_secrets_never_reach_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "MY_SERVICE_API_KEY": "k3y-value-123",
        "CI_JOB_TOKEN": "tok/en+value=",
        "DB_PASSWORD": "pa ss wo rd",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "LLM_CREDENTIALS": "creds-xyz-987",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SHORT_TOKEN", "1")
    log = AuditLog(tmp_path, session="s", clock=Clock())  # default: redactor from os.environ
    text = " and ".join(secrets.values())
    log.tool_call(tool="write_file", arguments={"path": "f", "content": text},
                  decision="allow", rule="r")
    log.tool_result(tool="write_file", ok=True, output=f"wrote {text}", meta={"exit_code": 1})
    data = day_file(tmp_path, "2024-05-01").read_bytes()
    for value in secrets.values():
        assert value.encode() not in data
    assert b"[REDACTED:env:DB_PASSWORD]" in data
    assert b'"exit_code":1' in data  # a short value ("1") is not redacted everywhere


@pytest.mark.parametrize("encode", [
    lambda v: v[::-1],
    lambda v: base64.b64encode(v.encode()).decode(),
    lambda v: base64.urlsafe_b64encode(v.encode()).decode().rstrip("="),
    lambda v: v.encode().hex(),
    lambda v: v.encode().hex().upper(),
], ids=["reversed", "base64", "base64url-unpadded", "hex", "HEX"])
def test_an_env_secret_is_found_in_its_usual_encodings(encode: Callable[[str], str]) -> None:
    secret = "s3cr3t-v4lue/with+odd?bytes"
    redactor = Redactor({"SERVICE_TOKEN": secret})
    leaked = redactor.text(f"echo {encode(secret)} | something")
    assert encode(secret) not in leaked and "[REDACTED:env:SERVICE_TOKEN]" in leaked


def test_extra_secret_names_are_redacted(tmp_path: Path) -> None:
    redactor = Redactor({"MODEL_AUTH_VALUE": "abcdef123456"}, extra_names=["MODEL_AUTH_VALUE"])
    assert redactor.text("x abcdef123456 y") == "x [REDACTED:env:MODEL_AUTH_VALUE] y"


def test_preview_is_capped_after_redaction(tmp_path: Path) -> None:
    token = SHAPES["github-token"]
    log = make_log(tmp_path, max_result_bytes=24)
    record = log.tool_result(tool="read_file", ok=True, output="x" * 10 + token + "y" * 100)
    assert record["preview_truncated"] is True
    assert record["output_bytes"] == 10 + len(token) + 100
    assert len(record["preview"].encode()) <= 24
    assert token[:8].encode() not in day_file(tmp_path, "2024-05-01").read_bytes()


def test_cli_arguments_and_secret_keys_are_redacted(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    record = log.run_start(
        root=tmp_path, provider="openai", model="m", image="img", image_digest="sha256:1",
        container_id="c", mount_mode="ro", policy_source="built-in",
        argv=["ask", "--api-key", "plain-value-1", "--token=plain-value-2", "--max-tokens", "99"],
        settings={"api_key": "plain-value-3", "nested": [{"password": "pw"}]},
    )
    assert record["argv"] == [
        "ask", "--api-key", "[REDACTED:argument]", "--token=[REDACTED:argument]",
        "--max-tokens", "99",
    ]
    assert b"plain-value" not in day_file(tmp_path, "2024-05-01").read_bytes()
    assert record["settings"]["nested"][0]["password"] == "[REDACTED:key:password]"


# No ":" or brackets in the secret, so it can never be spelled by a marker and its neighbours.
SECRET_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-_./+= "


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(SECRET_ALPHABET, min_size=6, max_size=40).filter(lambda s: len(s.strip()) >= 6),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
)
def test_an_env_secret_never_survives_redaction(secret: str, before: str, after: str) -> None:
    redactor = Redactor({"SOME_TOKEN": secret})
    assert secret not in redactor.text(before + secret + after)


# ---------------------------------------------------------------------------- failures


def unwritable(tmp_path: Path) -> Path:
    """An audit dir that cannot be created, even as root: its parent is a file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    return blocker / "audit"


def test_required_log_raises_before_the_tool_call_runs(tmp_path: Path) -> None:
    log = make_log(unwritable(tmp_path), required=True)
    executed = []
    with pytest.raises(AuditError, match="could not be written"):
        log.tool_call(tool="run_shell_command", arguments={"command": "ls"},
                      decision="allow", rule="r")
        executed.append(True)
    assert executed == [] and log.failures == 1


def test_required_log_attached_to_the_bus_stops_the_emit(tmp_path: Path) -> None:
    bus = HookBus()
    make_log(unwritable(tmp_path), required=True).attach(bus)
    with pytest.raises(AuditError):
        bus.emit(ToolCallEvent(call_id="c", tool="t", arguments={}, decision="allow", rule="r",
                 approved_by="--yes", reason=""))


def test_default_log_warns_once_and_the_run_goes_on(tmp_path: Path) -> None:
    warnings: list[str] = []
    directory = unwritable(tmp_path)
    log = make_log(directory, on_warning=warnings.append)
    log.record("note")
    log.record("note")
    assert log.failures == 2 and len(warnings) == 1
    assert "could not be written" in warnings[0] and "continues" in warnings[0]
    (tmp_path / "blocker").unlink()
    directory.mkdir(parents=True)
    assert log.record("note")["seq"] == 1 and verify(directory).ok


# ---------------------------------------------------------------------------- helpers & hooks


def test_tool_result_of_a_write_adds_a_write_record(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.tool_call(tool="edit_file", arguments={"path": "src/a.py", "new_text": "x"},
                  decision="allow", rule="r", approved_by="user", call_id="c9")
    meta = {"bytes": 12, "sha256_before": "a" * 64, "sha256_after": "b" * 64,
            "lines_changed": 3, "duration_ms": 4.6, "extra": "kept"}
    result = log.tool_result(tool="edit_file", ok=True, output="edited", meta=meta, call_id="c9")
    write = list(read_records(tmp_path))[-1]
    assert (result["duration_ms"], result["meta"]) == (5, {"extra": "kept"})
    assert write["kind"] == "write"
    assert {k: write[k] for k in ("path", "sha256_before", "sha256_after", "bytes",
                                  "lines_changed", "call_id")} == {
        "path": "src/a.py", "sha256_before": "a" * 64, "sha256_after": "b" * 64,
        "bytes": 12, "lines_changed": 3, "call_id": "c9",
    }


def test_prompts_are_recorded_only_when_asked(tmp_path: Path) -> None:
    quiet = make_log(tmp_path).model_request(
        messages=3, prompt_bytes=100, duration_ms=12.4, prompt=[{"role": "user"}], reply="hé"
    )
    loud = make_log(tmp_path, audit_prompts=True).model_request(
        messages=3, prompt_bytes=100, duration_ms=1, prompt=[{"role": "user"}], reply="hé"
    )
    assert "prompt" not in quiet and "reply" not in quiet and quiet["reply_bytes"] == 3
    assert loud["prompt"] == [{"role": "user"}] and loud["reply"] == "hé"


def test_attach_records_the_agent_events(tmp_path: Path) -> None:
    bus = HookBus()
    make_log(tmp_path).attach(bus)
    bus.emit(RunStartEvent(root="/r", provider="ollama", model="m", image="i",
             image_digest="sha256:d", container_id="c", mount_mode="rw",
             policy_source="built-in defaults", argv=["ask", "hi"]))
    bus.emit(TokenEvent(text="t"))
    bus.emit(ModelRequestEvent(model="m", messages=2, prompt_bytes=50, tools=["read_file"],
             duration_ms=10.5, prompt_tokens=20, completion_tokens=5, reply="{}"))
    bus.emit(ToolCallEvent(call_id="c1", tool="write_file", arguments={"path": "a", "content": ""},
             decision="allow", rule="default:medium", approved_by="--yes", reason=""))
    bus.emit(ToolResultEvent(call_id="c1", tool="write_file", ok=True, output="ok",
             meta={"bytes": 0, "sha256_before": None, "sha256_after": "e" * 64,
                   "lines_changed": 0}))
    bus.emit(RetryEvent(attempt=1, delay=0.5, reason="HTTP 503", url="http://h"))
    bus.emit(WarningEvent(message="careful"))
    bus.emit(ErrorEvent(message="boom", error_type="ModelError", exit_code=20))
    bus.emit(CompleteEvent(answer="done", turns=2))
    kinds = [r["kind"] for r in read_records(tmp_path)]
    assert kinds == ["run_start", "model_request", "tool_call", "tool_result", "write", "retry",
                     "warning", "error", "run_end"]
    records = list(read_records(tmp_path))
    assert records[5]["delay_ms"] == 500 and records[-1]["answer_bytes"] == 4
    assert records[4]["path"] == "a" and verify(tmp_path).ok


def test_an_event_that_does_not_fit_fails_where_it_is_emitted(tmp_path: Path) -> None:
    """Payloads are typed: a missing field or a reserved key never reaches the log."""
    bus = HookBus()
    make_log(tmp_path).attach(bus, exclude=["warning"])
    with pytest.raises(ValidationError):
        ToolCallEvent(tool="t", seq=5)  # type: ignore[call-arg]  # no decision/rule; reserved
    with pytest.raises(ValidationError):
        CompleteEvent(status="ok", turns=1, hash="forged")  # type: ignore[call-arg]
    bus.emit(CompleteEvent(status="ok", turns=1))
    bus.emit(WarningEvent(message="not recorded"))
    assert [r["kind"] for r in read_records(tmp_path)] == ["run_end"]
    assert verify(tmp_path).ok


def test_every_recorded_event_kind_has_its_record(tmp_path: Path) -> None:
    """Each kind the log subscribes to is one it knows how to record."""
    from executor.audit import RECORDED_EVENTS
    from executor.hooks import EventKind

    assert set(RECORDED_EVENTS) <= set(get_args(EventKind))
    log = make_log(tmp_path)
    assert log.record_event(TokenEvent(text="not recorded")) is None
    assert log.record_event(WarningEvent(message="w"))["kind"] == "warning"  # type: ignore[index]


def test_audit_dir_resolution_and_exposure(tmp_path: Path) -> None:
    assert audit.audit_dir_for(tmp_path) == audit.default_audit_dir(tmp_path)
    assert audit.audit_dir_for(tmp_path, tmp_path / "logs") == tmp_path / "logs"
    with pytest.raises(ConfigError, match="inside the project root"):
        AuditLog.for_root(tmp_path, session="s", audit_dir=tmp_path / "logs")
    outside = AuditLog.for_root(tmp_path / "root", session="s", audit_dir=tmp_path / "elsewhere")
    assert outside.directory == tmp_path / "elsewhere"


# ---------------------------------------------------------------------------- read & export


def test_read_records_filters_by_session_and_time(tmp_path: Path) -> None:
    clock = Clock()
    make_log(tmp_path, clock).record("note")
    clock.now += timedelta(hours=2)
    other = AuditLog(tmp_path, session="s2", clock=clock, redactor=Redactor({}))
    other.record("note")
    assert [r["session"] for r in read_records(tmp_path, session="s2")] == ["s2"]
    since = DAY1 + timedelta(hours=1)
    assert [r["seq"] for r in read_records(tmp_path, since=since)] == [2]


def test_parse_since() -> None:
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert audit.parse_since("90m", now=now) == now - timedelta(minutes=90)
    assert audit.parse_since("2d", now=now) == now - timedelta(days=2)
    assert audit.parse_since("2024-05-01T10:00") == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert audit.parse_since("2024-05-01T10:00+02:00").utcoffset() == timedelta(hours=2)
    with pytest.raises(ConfigError, match="--since"):
        audit.parse_since("yesterday")


def test_export_jsonl_is_byte_identical_and_verifies(three_days: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    count = audit.export_records(read_records(three_days), "jsonl", out)
    originals = b"".join(p.read_bytes() for p in sorted(three_days.glob("*.ndjson")))
    assert count == 9 and out.getvalue().encode() == originals
    exported = tmp_path / "export.jsonl"
    exported.write_text(out.getvalue())
    assert verify(exported).ok and verify(exported).records == 9


def test_export_csv_round_trips(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.tool_call(tool="run_shell_command", arguments={"command": "=HYPERLINK(1)"},
                  decision="deny", rule="policy.toml:3 [[rules]] #1", reason="-no", call_id="c")
    log.tool_result(tool="run_shell_command", ok=False, output="x", meta={"exit_code": 2})
    records = list(read_records(tmp_path))
    out = io.StringIO()
    audit.export_records(records, "csv", out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == 2
    for row, record in zip(rows, records, strict=True):
        for column in audit.CSV_COLUMNS:
            assert row[column] == audit.csv_cell(record.get(column))
        details = json.loads(row["details"])
        assert details == {k: v for k, v in record.items() if k not in audit.CSV_COLUMNS}
    assert rows[0]["reason"] == "'-no"  # a spreadsheet would run it as a formula
    assert (rows[1]["ok"], rows[1]["exit_code"], rows[1]["seq"]) == ("false", "2", "2")
    assert json.loads(rows[0]["details"])["arguments"] == {"command": "=HYPERLINK(1)"}


def test_export_csv_for_a_terminal_is_inert_one_record_a_line(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    name = "x\x1b]0;title\x07\x1b[1A\u202e\r\n2,forged"
    log.tool_call(tool=name, arguments={}, decision="reject", rule="unknown-tool",
                  reason=f"Unknown tool {name!r}", call_id="c")
    records = list(read_records(tmp_path))
    raw, shown = io.StringIO(), io.StringIO()
    audit.export_records(records, "csv", raw)
    audit.export_records(records, "csv", shown, terminal=True)
    [row] = list(csv.DictReader(io.StringIO(raw.getvalue())))
    assert row["tool"] == name  # the data itself
    lines = shown.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("1,")
    assert r"x\x1b]0;title\x07\x1b[1A\u202e\r\n2,forged" in lines[1]
    flat = shown.getvalue().replace("\n", "")
    assert inert_line(flat) == flat  # nothing left that a terminal would interpret


# ---------------------------------------------------------------------------- CLI


@pytest.fixture
def cli() -> Callable[..., Any]:
    app = typer.Typer()
    app.add_typer(audit_cli.app, name="audit")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["audit", *args])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    log = AuditLog.for_root(root, session="demo", clock=Clock(), redactor=Redactor({}))
    log.tool_call(tool="run_shell_command", arguments={"command": "ls [bold]"},
                  decision="allow", rule="r", approved_by="--yes", call_id="c")
    log.tool_result(tool="run_shell_command", ok=True, output="a", meta={"exit_code": 0},
                    call_id="c")
    log.run_end(turns=1, duration_ms=5)
    return root


def test_cli_verify_ok_and_tampered(cli: Callable[..., Any], project: Path) -> None:
    ok = cli("verify", "--root", str(project))
    assert ok.exit_code == 0 and "ok: 3 records" in ok.stdout
    path = day_file(audit.default_audit_dir(project), "2024-05-01")
    path.write_bytes(path.read_bytes().replace(b'"exit_code":0', b'"exit_code":1'))
    bad = cli("verify", "--root", str(project))
    assert bad.exit_code == AuditIntegrityError.exit_code == 51
    assert "2024-05-01.ndjson line 2, seq 2" in bad.output


def test_cli_verify_empty(cli: Callable[..., Any], tmp_path: Path) -> None:
    empty = cli("verify", "--root", str(tmp_path))
    assert empty.exit_code == 0 and "no audit records" in empty.output
    strict = cli("verify", "--root", str(tmp_path), "--require-records")
    assert strict.exit_code == 51


def test_cli_verify_honours_the_audit_dir_env(
    cli: Callable[..., Any], project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_AUDIT_DIR", str(tmp_path / "none"))
    result = cli("verify", "--root", str(project))
    assert result.exit_code == 0 and "no audit records" in result.output


def test_cli_show_table_and_json(cli: Callable[..., Any], project: Path) -> None:
    table = cli("show", "--root", str(project), "--session", "demo")
    assert table.exit_code == 0
    assert "tool_call" in table.stdout and "[bold]" in table.stdout  # printed, not markup
    as_json = cli("show", "--root", str(project), "--json", "--since", "2024-05-01T10:00")
    assert [json.loads(line)["seq"] for line in as_json.stdout.splitlines()] == [1, 2, 3]
    none = cli("show", "--root", str(project), "--session", "other")
    assert none.exit_code == 0 and "no matching" in none.output
    bad = cli("show", "--root", str(project), "--since", "soon")
    assert bad.exit_code == ConfigError.exit_code


def test_cli_show_says_what_a_run_end_apply_and_undo_did(
        cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from executor.cli.common import out_console, real_console

    # this process's console keeps the width it was made with (an xdist worker's first test's)
    monkeypatch.setattr(real_console(out_console), "width", 200)
    root = tmp_path / "proj"
    root.mkdir()
    log = AuditLog.for_root(root, session="demo", clock=Clock(), redactor=Redactor({}))
    log.sandbox_start(container_id="c" * 64, image="img:1", image_digest="sha256:d",
                      mount_mode="rw", duration_ms=12, container_name="sandbox-agent-x")
    log.record("apply", files=[{"path": "a.py"}, {"path": "b.py"}], approved_by="--yes",
               conflicts=[{"path": "c.py"}])
    log.record("undo", files=[{"path": "a.py"}], conflicts=[])
    log.run_end(turns=None, duration_ms=7)  # the model never answered
    shown = cli("show", "--root", str(root)).stdout
    assert "sandbox-agent-x from img:1 (rw), 12 ms" in shown
    assert "2 file(s) applied, 1 left alone (changed since), approved by --yes: a.py, b.py" \
        in shown
    assert "1 file(s) undone: a.py" in shown
    assert "before the model answered, 7 ms" in shown and "None" not in shown


def test_cli_export_writes_a_private_file(
    cli: Callable[..., Any], project: Path, tmp_path: Path
) -> None:
    target = tmp_path / "audit.csv"
    result = cli("export", "--root", str(project), "--format", "csv", "--output", str(target))
    assert result.exit_code == 0 and "exported 3 record(s)" in result.output
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert [row["kind"] for row in csv.DictReader(target.open())] == [
        "tool_call", "tool_result", "run_end"
    ]
    jsonl = cli("export", "--root", str(project), "-f", "jsonl")
    assert len(jsonl.stdout.splitlines()) == 3


def test_a_symlinked_day_file_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("original\n")
    log = AuditLog(tmp_path / "log", session="s", redactor=Redactor({}), clock=Clock())
    log.record("note")
    (tmp_path / "log" / "2099-12-31.ndjson").symlink_to(target)
    warnings: list[str] = []
    log = AuditLog(tmp_path / "log", session="s", redactor=Redactor({}), clock=Clock(),
                   on_warning=warnings.append)
    log.tool_call(tool="read_file", arguments={"path": "$(id > /tmp/x)"}, decision="allow",
                  rule="default:low")
    assert target.read_text() == "original\n"
    assert log.failures == 1 and warnings
    report = verify(tmp_path / "log")
    assert not report.ok and report.problem is not None
    assert report.problem.file == "2099-12-31.ndjson"


def test_a_fifo_in_place_of_a_day_file_is_an_error_not_a_hang(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    directory.mkdir(mode=0o700)
    os.mkfifo(directory / "2024-05-01.ndjson")
    log = AuditLog(directory, session="s", redactor=Redactor({}), clock=Clock(), required=True)
    with pytest.raises(AuditError):
        log.record("note")
    report = verify(directory)
    assert report.problem is not None and "cannot be read" in report.problem.detail
    with pytest.raises(AuditError, match="cannot read"):
        list(read_records(directory))


def test_files_a_command_changed_get_write_records(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    made = {"path": "made.txt", "change": "created", "kind": "file", "sha256_before": None,
            "sha256_after": "ab" * 32, "size_after": 5, "mode_after": "0644"}
    gone = {"path": "old.txt", "change": "deleted", "kind": "file", "sha256_before": "cd" * 32,
            "sha256_after": None, "size_before": 9}
    edited = {"path": "notes.md", "change": "modified", "kind": "file",
              "sha256_before": "01" * 32, "sha256_after": "02" * 32}
    log.tool_result(tool="run_shell_command", ok=True, output="exit_code: 0", call_id="c1",
                    meta={"exit_code": 0, "changes": [made, gone, "junk", {"no": "path"}],
                          "changes_total": 2, "outside_changes": [edited]})
    records = list(read_records(tmp_path))
    writes = [r for r in records if r["kind"] == "write"]
    assert [(w["path"], w["change"], w["source"], w["tool"]) for w in writes] == [
        ("made.txt", "created", "command", "run_shell_command"),
        ("old.txt", "deleted", "command", "run_shell_command"),
        ("notes.md", "modified", "outside", None)]
    assert writes[0]["sha256_after"] == "ab" * 32 and writes[0]["file_kind"] == "file"
    assert writes[1]["sha256_before"] == "cd" * 32 and writes[1]["sha256_after"] is None
    [result] = [r for r in records if r["kind"] == "tool_result"]
    assert result["meta"] == {"changes_total": 2} and verify(tmp_path).ok


@pytest.mark.parametrize("split", [
    lambda v: "\n".join(v[i:i + 10] for i in range(0, len(v), 10)),  # fold -w 10
    lambda v: "-".join(v),  # sed 's/./&-/g'
    lambda v: " ".join(v[i:i + 4] for i in range(0, len(v), 4)),
], ids=["fold", "dashes", "groups"])
def test_a_long_env_secret_split_by_separators_is_still_redacted(split: Callable[[str], str]
                                                                  ) -> None:
    secret = "s3cr3tVALUEthatIsLong42"
    redacted = Redactor({"SERVICE_TOKEN": secret}).text(f"out: {split(secret)} end")
    assert redacted == "out: [REDACTED:env:SERVICE_TOKEN] end"


def test_a_huge_argument_is_kept_as_its_head_length_and_hash(tmp_path: Path) -> None:
    content = "x" * 100_000 + "TAIL"
    log = make_log(tmp_path)
    record = log.tool_call(tool="write_file", arguments={"path": "a", "content": content},
                           decision="allow", rule="r")
    kept = record["arguments"]["content"]
    assert len(kept) < 17_000 and "TAIL" not in kept
    assert f"{len(content)} bytes in all, sha256 {hashlib.sha256(content.encode()).hexdigest()}" in kept
    assert record["arguments"]["path"] == "a" and verify(tmp_path).ok


_PIECES = st.one_of(
    st.sampled_from(sorted(SHAPES.values())),
    st.sampled_from(sorted(SHAPES.values())).map(lambda t: t.upper()),
    st.sampled_from(sorted(SHAPES.values())).flatmap(
        lambda t: st.integers(1, len(t)).map(lambda n: t[:n])),
    st.sampled_from(["KEY=", "token: '", "Bearer ", "://u:p@", "-----BEGIN ", " PRIVATE KEY-----",
                     "ghp_", "xoxb-", "eyJ", ".", "\n", " ", "_live_", "SK", "sk-", ":AA",
                     "\u017fECRET=", "CREDENT\u0131AL:", "\u212aEY=", "PASSWORD = ", "bEaReR "]),
    st.sampled_from(["hunter2hunter2", "abcdefgh12", "'x1y2z3w4'"]),
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_the_shape_prefilter_changes_no_redaction(text: str) -> None:
    """A shape is skipped only where it cannot match: the same result as trying them all."""
    redactor = Redactor({})
    assert redactor._text(text) == redactor._text(text, prefilter=False)


def test_every_shape_has_needles_its_pattern_spells() -> None:
    from executor.redact import SHAPE_NEEDLES, TOKEN_SHAPES

    assert set(SHAPE_NEEDLES) <= {kind for kind, _ in TOKEN_SHAPES}
    for kind, needles in SHAPE_NEEDLES.items():
        assert needles and all(n == n.lower() for n in needles), kind
