"""The audit trail and the policy end to end: the real `sandbox-agent` CLI (no terminal, so
non-interactive), the stand-in model server and a real container.

What is asserted is what a security team would check: the bytes of the audit log, what
`audit verify` says about them, the files on disk, and what the model server received.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from executor.audit import CSV_COLUMNS, default_audit_dir
from executor.session import sessions_dir
from executor.state import project_dir
from tests.docker.cli_support import _KEPT
from tests.docker.conftest import IMAGE
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

SANDBOX_AGENT = Path(sys.executable).parent / "sandbox-agent"
RUN_TIMEOUT = 120
_SCRUBBED = ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY",
             "MY_SERVICE_TOKEN")


# -- helpers ---------------------------------------------------------------------------------


def cli(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`sandbox-agent ARGS` with stdin /dev/null and only the configuration a test passes."""
    base = {k: v for k, v in os.environ.items()
            if (not k.startswith("SANDBOX_AGENT_") or k in _KEPT) and k not in _SCRUBBED}
    base.update(SANDBOX_AGENT_IMAGE=IMAGE, SANDBOX_AGENT_RETRY_BASE_DELAY="0.01", NO_COLOR="1",
                COLUMNS="250", TERM="dumb", **(env or {}))
    return subprocess.run([str(SANDBOX_AGENT), *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=base, timeout=RUN_TIMEOUT,
                          check=False)


def ask(root: Path, server: ModelServer, *flags: Any, query: str = "do the task",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """One non-interactive `ask` run against the stand-in server."""
    return cli("ask", "--root", root, "--host", server.url, "--no-stream", *flags, query, env=env)


def audit_dir(root: Path) -> Path:
    return default_audit_dir(root)


def day_files(root: Path) -> list[Path]:
    return sorted(audit_dir(root).glob("*.ndjson"))


def audit_bytes(root: Path) -> bytes:
    """Every day file of the root's audit log, concatenated in chain order."""
    return b"".join(path.read_bytes() for path in day_files(root))


def records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in audit_bytes(root).splitlines()]


def of_kind(recs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in recs if r["kind"] == kind]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tool_messages(server: ModelServer) -> list[str]:
    """Contents of the tool results in the last chat request (the whole conversation)."""
    return [m["content"] for m in server.last_chat.body["messages"] if m["role"] == "tool"]


def ok_run(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def new_root(workdir: Path, name: str = "proj", git: bool = False) -> Path:
    root = workdir / name
    root.mkdir()
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def write_policy(root: Path, text: str, *, trusted: bool = True) -> Path:
    """The project's policy file, trusted by the person through the CLI unless told otherwise."""
    path = root / ".sandbox-agent" / "policy.toml"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_text(text)
    if trusted:
        done = cli("policy", "trust", "--root", root)
        assert done.returncode == 0 and "trusted" in done.stderr, done.stderr
    return path


def rule_line(policy: Path, name: str) -> int:
    """Line of the `[[rules]]` header of the rule called `name` (rule ids name it)."""
    lines = policy.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == f'name = "{name}"')
    return max(i for i in range(at + 1) if lines[i].strip() == "[[rules]]") + 1


# -- 1. one record per event, verify, tampering ----------------------------------------------

AUDIT_POLICY = """\
[[rules]]
name = "line counts"
prefix = "wc -l"
decision = "allow"

[[rules]]
name = "no recursive deletes"
regex = "rm\\\\s+-[a-zA-Z]*[rf]"
decision = "deny"
reason = "recursive deletes are not allowed here"
"""


def test_one_record_per_event_in_order_and_verify_names_tampering(
        workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    source = "".join(f"value_{n} = {n}\n" for n in range(40)).encode()
    (root / "a.py").write_bytes(source)
    (root / "build").mkdir()
    (root / "build" / "keep.txt").write_text("keep me\n")
    policy = write_policy(root, AUDIT_POLICY)
    model_server.reply(tool_calls=[Call("read_file", {"path": "a.py"})])
    model_server.reply(tool_calls=[Call("edit_file", {"path": "a.py", "old_text": "value_7 = 7",
                                                      "new_text": "value_7 = 'seven'"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "wc -l a.py"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "rm -rf build"})])
    model_server.reply(tool_calls=[Call("deploy_everything", {"now": True})])
    model_server.reply("All done.")

    done = ask(root, model_server, "--yes", "--session", "audited",
               env={"SANDBOX_AGENT_AUDIT_MAX_RESULT_BYTES": "64"})
    ok_run(done)

    after = (root / "a.py").read_bytes()
    assert after == source.replace(b"value_7 = 7", b"value_7 = 'seven'")
    assert (root / "build" / "keep.txt").read_text() == "keep me\n"  # the deny rule held

    recs = records(root)
    assert [r["kind"] for r in recs] == [
        "run_start",
        "model_request", "tool_call", "sandbox_start", "tool_result",  # started when needed
        "model_request", "tool_call", "tool_result", "write",
        "model_request", "tool_call", "tool_result",
        "model_request", "tool_call", "tool_result",
        "model_request", "tool_call", "tool_result",
        "model_request",
        "run_end",
    ]
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert {r["session"] for r in recs} == {"audited"}
    assert len({r["run"] for r in recs}) == 1

    start = recs[0]
    assert "data_session" not in start and start["pid"] > 0 and start["user"]
    assert start["mount_mode"] == "rw" and start["image"] == IMAGE
    assert start["image_digest"] is None and start["container_id"] is None  # not started yet
    [sandbox] = of_kind(recs, "sandbox_start")
    assert sandbox["image_digest"].startswith("sha256:") and len(sandbox["container_id"]) == 64
    assert sandbox["mount_mode"] == "rw" and sandbox["image"] == IMAGE
    assert start["policy_source"] == f"{policy} (project, trusted)"
    assert start["argv"][0] == "ask" and "--yes" in start["argv"]

    requests = of_kind(recs, "model_request")
    assert len(requests) == len(model_server.chat_requests) == 6
    assert [r["messages"] for r in requests] == [
        len(c.body["messages"]) for c in model_server.chat_requests]
    assert all(r["prompt_tokens"] == 100 and "prompt" not in r for r in requests)

    read, edit, wc, rm, unknown = of_kind(recs, "tool_call")
    assert (read["tool"], read["decision"], read["rule"], read["approved_by"]) == (
        "read_file", "allow", "default:low", "default:low")
    assert (edit["decision"], edit["rule"], edit["approved_by"]) == (
        "allow", "default:medium", "--yes")
    wc_rule = f"policy.toml:{rule_line(policy, 'line counts')} [[rules]] #1 (line counts)"
    assert (wc["decision"], wc["rule"], wc["approved_by"]) == ("allow", wc_rule, f"policy:{wc_rule}")
    rm_rule = (f"policy.toml:{rule_line(policy, 'no recursive deletes')} [[rules]] #2 "
               "(no recursive deletes)")
    assert (rm["decision"], rm["rule"], rm["approved_by"]) == ("deny", rm_rule, None)
    assert rm["reason"] == "recursive deletes are not allowed here"
    assert rm["arguments"] == {"command": "rm -rf build"}
    assert (unknown["tool"], unknown["decision"], unknown["rule"]) == (
        "deploy_everything", "reject", "unknown-tool")

    results = of_kind(recs, "tool_result")
    assert [r["call_id"] for r in results] == [c["call_id"] for c in of_kind(recs, "tool_call")]
    assert [r["ok"] for r in results] == [True, True, True, False, False]
    seen = tool_messages(model_server)
    for result, content in zip(results, seen, strict=True):
        data = content.encode()
        assert result["output_bytes"] == len(data)
        preview = result["preview"].encode()
        assert len(preview) <= 64 and data.startswith(preview)
        assert result["preview_truncated"] == (len(data) > 64)
    assert results[0]["preview_truncated"]  # 40 numbered lines, capped at 64 bytes
    for executed in results[:3]:
        assert isinstance(executed["duration_ms"], int)
    assert results[2]["exit_code"] == 0 and "40 a.py" in results[2]["preview"]
    assert "exit_code" not in results[3] and "recursive deletes" in results[3]["preview"]

    (write,) = of_kind(recs, "write")
    assert write["call_id"] == edit["call_id"] and write["path"] == "a.py"
    assert write["sha256_before"] == sha256(source)
    assert write["sha256_after"] == sha256(after)
    assert write["bytes"] == len(after) and write["lines_changed"] == 2

    end = recs[-1]
    assert (end["status"], end["turns"], end["answer_preview"]) == ("ok", 6, "All done.")

    verified = cli("audit", "verify", "--root", root)
    assert verified.returncode == 0, verified.stderr
    assert f"ok: {len(recs)} records" in verified.stdout
    assert_tampering_detected(root, edit["seq"])


def assert_tampering_detected(root: Path, target: int) -> None:
    """Edit one byte of, delete, or swap the record `target`: verify exits 51 and names it."""
    path = next(p for p in day_files(root) if f'"seq":{target},'.encode() in p.read_bytes())
    pristine = path.read_bytes()
    lines = pristine.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if json.loads(line)["seq"] == target)
    line = lines[index]
    edited = line.replace(b"seven", b"sevem", 1)
    assert edited != line and len(edited) == len(line)
    cases = {
        "edited": ([*lines[:index], edited, *lines[index + 1:]], index + 1, target),
        "removed": ([*lines[:index], *lines[index + 1:]], index + 1, target + 1),
        "reordered": ([*lines[:index], lines[index + 1], line, *lines[index + 2:]], index + 1,
                      target + 1),
    }
    try:
        for kind, (tampered, line_no, seq) in cases.items():
            path.write_bytes(b"".join(tampered))
            done = cli("audit", "verify", "--root", root)
            assert done.returncode == 51, (kind, done.stdout, done.stderr)
            assert f"{kind} record at {path.name} line {line_no}, seq {seq}" in done.stderr, (
                kind, done.stderr)
    finally:
        path.write_bytes(pristine)
    assert cli("audit", "verify", "--root", root).returncode == 0


# -- 2. the container cannot reach the audit or session files --------------------------------

MARKER = "MARKER-first-run-7c1e9a"


@pytest.mark.engines
def test_container_cannot_read_or_write_the_audit_and_session_files(
        workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    (root / "readme.txt").write_text("a project file\n")
    model_server.reply("noted")
    ok_run(ask(root, model_server, "--session", "first", query=f"remember {MARKER}"))
    day = day_files(root)[-1]
    session_file = sessions_dir(root) / "first.ndjson"
    assert root.resolve() not in session_file.parents and root.resolve() not in day.parents
    session_before, audit_before = session_file.read_bytes(), audit_bytes(root)
    assert MARKER.encode() in session_before and MARKER.encode() in audit_before
    first_hashes = [r["hash"] for r in records(root)]
    first_requests = len(model_server.requests)

    state = project_dir(root)
    up = "../" * len(root.resolve().parts)  # enough ../ to reach / from /workspace
    must_fail = [
        Call("read_file", {"path": str(day)}),
        Call("read_file", {"path": str(session_file)}),
        Call("read_file", {"path": f"{up}{str(day).lstrip('/')}"}),
        Call("list_files", {"path": str(state)}),
        Call("search_files", {"pattern": "MARK[E]R", "path": str(state)}),
        Call("write_file", {"path": str(day), "content": "forged\n"}),
        Call("edit_file", {"path": str(session_file), "old_text": '"role"', "new_text": "x"}),
        Call("run_shell_command", {"command": f"cat {day}"}),
        Call("run_shell_command", {"command": f"cat {session_file}"}),
        Call("run_shell_command", {"command": f"ls -la {state}"}),
        Call("run_shell_command", {"command": f"echo forged >> {day}"}),
        Call("run_shell_command", {"command": f"echo forged > {session_file}"}),
    ]
    may_succeed = [  # they run, but must not reveal anything
        Call("list_files", {"path": ".", "depth": 5}),
        Call("search_files", {"pattern": "MARK[E]R|seq|role"}),
        Call("run_shell_command", {"command": "grep -rs 'MARK[E]R' /workspace /tmp /home /root; "
                                              "find / -path /proc -prune -o -name '*.ndjson' "
                                              "-print 2>/dev/null; true"}),
    ]
    model_server.reply(tool_calls=must_fail + may_succeed)
    model_server.reply("tried everything")
    done = ask(root, model_server, "--yes", "--session", "second")
    # every write failed: the answer stands, and exit 34 says that nothing was changed
    assert done.returncode == 34 and "no file was changed" in done.stderr, done.stderr

    assert session_file.read_bytes() == session_before
    after = audit_bytes(root)
    assert after.startswith(audit_before) and b"forged\n" not in after.splitlines(keepends=True)
    assert cli("audit", "verify", "--root", root).returncode == 0

    results = tool_messages(model_server)
    assert len(results) == len(must_fail) + len(may_succeed)
    run2 = [r for r in records(root) if r["session"] == "second"]
    outcomes = [r["ok"] for r in of_kind(run2, "tool_result")]
    assert outcomes == [False] * len(must_fail) + [True] * len(may_succeed), list(
        zip(outcomes, results, strict=True))
    assert all(r["decision"] == "allow" for r in of_kind(run2, "tool_call"))
    assert not (root / ".sandbox-agent").exists()  # nothing of ours lands in the project

    received = b"".join(request.raw for request in model_server.requests[first_requests:])
    assert MARKER.encode() not in received
    assert not any(h.encode() in received for h in first_hashes)
    assert b'"type": "header"' not in received and b'"prev":' not in received


def test_a_shipped_policy_grants_nothing_until_the_person_trusts_it(
        workdir: Path, model_server: ModelServer):
    root = new_root(workdir, git=True)
    policy = write_policy(root, '[[rules]]\ntool = "*"\ndecision = "allow"\n', trusted=False)
    calls = [Call("write_file", {"path": "planted.sh", "content": "echo hi\n"}),
             Call("run_shell_command", {"command": "touch ran"})]
    model_server.reply(tool_calls=calls)
    model_server.reply("done")
    done = ask(root, model_server)  # no --yes, no terminal: fail closed
    ok_run(done)
    assert f"project policy {policy} is not trusted" in done.stderr
    assert not (root / "planted.sh").exists() and not (root / "ran").exists()
    decisions = [(r["decision"], r["approved_by"]) for r in of_kind(records(root), "tool_call")]
    assert decisions == [("deny", None), ("deny", None)]
    assert "(project, untrusted: deny/ask only)" in of_kind(records(root), "run_start")[0][
        "policy_source"]

    shown = cli("policy", "trust", "--root", root)
    assert shown.returncode == 0 and 'decision = "allow"' in shown.stdout
    model_server.reply(tool_calls=calls)
    model_server.reply("done")
    ok_run(ask(root, model_server))
    assert (root / "planted.sh").exists() and (root / "ran").exists()
    allowed = [r["approved_by"] for r in of_kind(records(root), "tool_call")][2:]
    assert all(a.startswith("policy:") for a in allowed), allowed

    policy.write_text(policy.read_text() + "# changed by a later commit\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch again"})])
    model_server.reply("done")
    done = ask(root, model_server)
    assert "changed since you trusted it" in done.stderr and not (root / "again").exists()


def test_a_fifo_in_place_of_a_day_file_never_hangs_the_controller(
        workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    model_server.reply("first")
    ok_run(ask(root, model_server))
    fifo = audit_dir(root) / "2099-12-30.ndjson"
    os.mkfifo(fifo)
    model_server.reply("second")
    done = ask(root, model_server)  # RUN_TIMEOUT bounds it: a hang fails the test
    ok_run(done)
    assert "audit record could not be written" in done.stderr and "not a regular file" in done.stderr
    verified = cli("audit", "verify", "--root", root)
    assert verified.returncode == 51 and "2099-12-30.ndjson" in verified.stderr
    required = ask(root, model_server, "--audit-required")
    assert required.returncode == 50, required.stderr


def test_planted_in_tree_state_is_never_read_or_followed(workdir: Path, model_server: ModelServer):
    """A clone ships `.sandbox-agent/` look-alikes: an audit day file linked to ~/.bashrc, a
    session, nested state; none of it is read, followed or written, and one notice says so."""
    root = new_root(workdir, git=True)
    bashrc = workdir / "bashrc"
    bashrc.write_text("# the person's shell start-up file\n")
    planted = root / ".sandbox-agent"
    (planted / "audit").mkdir(parents=True)
    (planted / "audit" / "2099-12-31.ndjson").symlink_to(bashrc)
    (planted / "sessions").mkdir()
    (planted / "sessions" / "evil.ndjson").write_text(
        '{"type": "header", "version": 1, "name": "evil", "container": '
        '"sandbox-agent-/../../../../tmp/x/pwned"}\n')
    (root / "sub" / ".sandbox-agent").mkdir(parents=True)
    elsewhere = workdir / "elsewhere"  # a variant: the audit dir itself links out of the tree
    elsewhere.mkdir(mode=0o755)
    (root / "sub" / ".sandbox-agent" / "audit").symlink_to(elsewhere)
    (root / "sub" / ".sandbox-agent" / "policy.toml").write_text(
        '[[rules]]\ntool = "*"\ndecision = "allow"\n')
    for flags in (["--read-only"], ["--yes"]):
        model_server.reply(tool_calls=[Call("read_file", {"path": "$(id > /tmp/pwned-x)"})])
        model_server.reply("done")
        done = ask(root, model_server, *flags)
        ok_run(done)
        assert "is ignored and never trusted" in done.stderr
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch sub-ran"})])
    model_server.reply("done")
    ok_run(ask(root / "sub", model_server))  # no --yes: the nested policy grants nothing
    assert not (root / "sub" / "sub-ran").exists()
    assert list(elsewhere.iterdir()) == [] and (elsewhere.stat().st_mode & 0o777) == 0o755
    assert bashrc.read_text() == "# the person's shell start-up file\n"
    assert sorted(p.name for p in (planted / "audit").iterdir()) == ["2099-12-31.ndjson"]
    assert (planted / "audit" / "2099-12-31.ndjson").is_symlink()
    assert "evil" not in cli("sessions", "--root", root).stdout
    assert cli("audit", "verify", "--root", root).returncode == 0
    model_server.reply("resumed")
    resumed = ask(root, model_server, "--resume", query="go on")
    ok_run(resumed)
    assert "pwned" not in resumed.stderr and not Path("/tmp/x/pwned.lock").exists()


# -- 5. --no-audit ---------------------------------------------------------------------------


def test_no_audit_writes_no_records(workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    model_server.reply(tool_calls=[Call("write_file", {"path": "out.txt", "content": "hi\n"})])
    model_server.reply("done")
    ok_run(ask(root, model_server, "--yes", "--no-audit"))
    assert (root / "out.txt").read_text() == "hi\n"  # the run did happen
    assert not audit_dir(root).exists()
    assert sessions_dir(root).is_dir()
    done = cli("audit", "verify", "--root", root, "--require-records")
    assert done.returncode == 51 and "no audit records" in done.stderr


# -- 6. show and export ----------------------------------------------------------------------


def test_show_and_export_the_real_log(workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    (root / "notes.md").write_text("= not a formula\n")
    model_server.reply(tool_calls=[Call("read_file", {"path": "notes.md"})])
    model_server.reply(tool_calls=[Call("write_file", {"path": "out.txt", "content": "=1+1\n"})])
    model_server.reply("done")
    ok_run(ask(root, model_server, "--yes", "--session", "exported"))
    log, recs = audit_bytes(root), records(root)

    shown = cli("audit", "show", "--root", root, "--json")
    assert shown.returncode == 0 and shown.stdout.encode() == log
    exported = cli("audit", "export", "--format", "jsonl", "--root", root)
    assert exported.returncode == 0 and exported.stdout.encode() == log
    assert f"exported {len(recs)} record(s)" in exported.stderr
    target = workdir / "export.jsonl"
    assert cli("audit", "export", "-f", "jsonl", "--root", root, "-o", target).returncode == 0
    assert target.read_bytes() == log and target.stat().st_mode & 0o777 == 0o600
    assert cli("audit", "verify", "--root", root, "--audit-dir", target).returncode == 0

    table = cli("audit", "show", "--root", root)
    assert table.returncode == 0
    for word in ("run_start", "model_request", "tool_call", "tool_result", "write", "run_end",
                 "exported", "read_file", "out.txt"):
        assert word in table.stdout, word
    other = cli("audit", "show", "--root", root, "--json", "--session", "nope")
    assert other.returncode == 0 and other.stdout == ""

    as_csv = cli("audit", "export", "--format", "csv", "--root", root)
    assert as_csv.returncode == 0
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert list(rows[0]) == [*CSV_COLUMNS, "details"]
    assert [row["seq"] for row in rows] == [str(r["seq"]) for r in recs]
    assert [row["kind"] for row in rows] == [r["kind"] for r in recs]
    assert [row["hash"] for row in rows] == [r["hash"] for r in recs]
    write = next(row for row in rows if row["kind"] == "write")
    assert write["path"] == "out.txt" and write["sha256_after"] == sha256(b"=1+1\n")
    calls = [row for row in rows if row["kind"] == "tool_call"]
    assert [(c["tool"], c["decision"], c["approved_by"]) for c in calls] == [
        ("read_file", "allow", "default:low"), ("write_file", "allow", "'--yes")]  # defused
    assert json.loads(calls[1]["details"])["arguments"]["content"] == "=1+1\n"
    preview = next(row for row in rows if row["kind"] == "tool_result")["details"]
    assert "= not a formula" in json.loads(preview)["preview"]


# -- 7. policy explain, and the same file honoured by a run ----------------------------------

RUN_POLICY = """\
[[rules]]
name = "no recursive deletes"
regex = "rm\\\\s+-[a-zA-Z]*[rf]"
decision = "deny"
reason = "recursive deletes are not allowed here"

[[rules]]
name = "read-only git"
prefix = ["git status", "git diff"]
decision = "allow"
"""


def test_policy_explain_and_the_same_rules_in_a_real_run(workdir: Path, model_server: ModelServer):
    root = new_root(workdir, git=True)
    policy = write_policy(root, RUN_POLICY)
    deny_id = f"policy.toml:{rule_line(policy, 'no recursive deletes')} [[rules]] #1"
    allow_id = f"policy.toml:{rule_line(policy, 'read-only git')} [[rules]] #2 (read-only git)"

    explained = cli("policy", "explain", "--root", root, "--tool", "run_shell_command",
                    "--args", '{"command": "rm -rf /"}')
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert "decision:  deny" in lines
    assert f"rule:      {deny_id} (no recursive deletes) — tool run_shell_command, regex " \
           "'rm\\s+-[a-zA-Z]*[rf]'" in lines
    assert "reason:    recursive deletes are not allowed here" in lines
    assert "matched:   rm -rf /" in lines and f"policy:    {policy} (project, trusted)" in lines
    with_yes = cli("policy", "explain", "--root", root, "--yes", "--json", "--tool",
                   "run_shell_command", "--args", '{"command": "ls && rm -fr /tmp/x"}')
    assert json.loads(with_yes.stdout)["decision"] == "deny"
    git = cli("policy", "explain", "--root", root, "--non-interactive", "--json", "--tool",
              "run_shell_command", "--args", '{"command": "git status"}')
    assert json.loads(git.stdout)["approved_by"] == f"policy:{allow_id}"

    (root / "victim").mkdir()
    (root / "victim" / "data.txt").write_text("precious\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "git status"}),
                                   Call("run_shell_command", {"command": "touch without-yes"})])
    model_server.reply("checked")
    ok_run(ask(root, model_server, "--session", "no-yes"))
    git_status, touch = tool_messages(model_server)
    assert "exit_code: 0" in git_status and "No commits yet" in git_status
    assert "non-interactive" in touch and not (root / "without-yes").exists()

    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "rm -rf victim"}),
                                   Call("run_shell_command", {"command": "ls; rm -r victim"}),
                                   Call("run_shell_command", {"command": "touch with-yes"})])
    model_server.reply("tried")
    ok_run(ask(root, model_server, "--yes", "--session", "with-yes"))
    assert (root / "victim" / "data.txt").read_text() == "precious\n"
    assert (root / "with-yes").exists()  # --yes works: only the rule stopped the deletes

    calls = [(r["session"], r["arguments"]["command"], r["decision"], r["approved_by"])
             for r in of_kind(records(root), "tool_call")]
    assert calls == [
        ("no-yes", "git status", "allow", f"policy:{allow_id}"),
        ("no-yes", "touch without-yes", "deny", None),
        ("with-yes", "rm -rf victim", "deny", None),
        ("with-yes", "ls; rm -r victim", "deny", None),
        ("with-yes", "touch with-yes", "allow", "--yes"),
    ]


def test_an_invalid_policy_file_stops_the_run_before_anything_happens(
        workdir: Path, model_server: ModelServer):
    root = new_root(workdir)
    write_policy(root, '[[rules]]\nprefix = "ls"\ndecision = "permit"\n', trusted=False)
    model_server.reply("never asked")
    done = ask(root, model_server, "--yes")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "policy.toml:3: rule #1: decision must be one of allow, ask, deny (got 'permit')" in (
        done.stderr)
    assert model_server.chat_requests == []
    assert not audit_dir(root).exists()
