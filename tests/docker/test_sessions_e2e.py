"""Sessions end to end: the real `sandbox-agent` process, the stand-in model server, real containers.

Each run is paused at a known point by a scripted `hang` on the next model request (the test
waits until the server has received it), then killed, interrupted or left to finish. What is
asserted is what lasts: the session file, the `sessions` listing, the containers, the audit log
and what the model server received.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir
from executor.context import INTERRUPTED_RESULT, TokenCounter
from executor.messages import Message, ToolCall
from executor.runner import SYSTEM_PROMPT
from executor.session import NdjsonSessionStore, TornLineWarning, sessions_dir
from executor.skills import load_skills
from tests.conftest import IMAGE, PRIVATE_ENV
from tests.fakes.model_server import Call, ModelServer, RecordedRequest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
HANG = 120.0  # the stand-in's pause; the test always ends it first (kill, signal or stop)
DEADLINE = 60.0  # seconds any awaited state may take
RUN_TIMEOUT = 180.0  # seconds a whole CLI run may take


# -- running the CLI -------------------------------------------------------------------------------


def cli(hostname: str | None = None) -> list[str]:
    """The `sandbox-agent` command; with `hostname`, run in its own UTS namespace of that name.

    `gc` only touches containers labelled with its own host name, so a run killed under a fresh
    name leaves an orphan that only this test's `gc` sees (other tests run on the same engine).
    """
    script = Path(sys.executable).with_name("sandbox-agent")
    command = [str(script) if script.exists() else shutil.which("sandbox-agent") or "sandbox-agent"]
    if hostname is None:
        return command
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", "--uts", *user, "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *command]


def _env() -> dict[str, str]:
    """The caller's environment without settings that would change the run, plus the test image."""
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("SANDBOX_AGENT_") or k in PRIVATE_ENV)
           and k not in ("OLLAMA_HOST", "OPENAI_BASE_URL")}
    return env | {"SANDBOX_AGENT_IMAGE": IMAGE, "SANDBOX_AGENT_RETRY_BASE_DELAY": "0",
                  "COLUMNS": "250"}


def system_prompt(root: Path) -> str:
    """The system prompt of an `ask` on `root`: the built-in one, then the skills used by
    default (none of the bundled ones for `ask`: they are `default: off`)."""
    skills = load_skills(root, command="ask").prompt()
    return f"{SYSTEM_PROMPT}\n\n{skills}" if skills else SYSTEM_PROMPT


def ask_args(root: Path, server: ModelServer, *args: str, hostname: str | None = None) -> list[str]:
    """`sandbox-agent ask --root ROOT --host URL --yes ARGS...`."""
    return [*cli(hostname), "ask", "--root", str(root), "--host", server.url, "--yes", *args]


def run(argv: list[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a CLI command to its end."""
    return subprocess.run(argv, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, env=_env(), cwd=REPO)


def start(argv: list[str]) -> subprocess.Popen[str]:
    """Start a CLI command in the background (stdin at EOF)."""
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen[str]) -> None:
    """Poll `condition` until it holds; fail with the process's stderr if it ended first."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"sandbox-agent exited ({proc.returncode}) before {what}:\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {DEADLINE:.0f}s")
        time.sleep(0.05)


def wait_requests(server: ModelServer, count: int, proc: subprocess.Popen[str]) -> None:
    """Wait until the stand-in server has received `count` chat requests."""
    wait_for(lambda: len(server.chat_requests) >= count, f"{count} chat requests", proc)


@pytest.fixture
def hostname() -> str:
    """A host name of this test's own (see `cli`)."""
    return f"sessions-e2e-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Background processes of a test; any still running at its end is killed (by pid)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


# -- reading what lasts ------------------------------------------------------------------------------


def session(root: Path, name: str = "s1") -> NdjsonSessionStore:
    """The session `name` of `root`."""
    return NdjsonSessionStore.open(root, name)


def audit_records(root: Path) -> list[dict[str, Any]]:
    """Every record of the root's audit log, in order."""
    files = sorted(default_audit_dir(root).glob("*.ndjson"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def neutral(wire: dict[str, Any]) -> Message:
    """An Ollama wire message back in the neutral shape."""
    calls = [ToolCall(id=c.get("id") or "?", name=c["function"]["name"],
                      arguments=c["function"]["arguments"]) for c in wire.get("tool_calls", [])]
    return Message(role=wire["role"], content=wire.get("content") or "", tool_calls=calls,
                   name=wire.get("tool_name"))


def received(request: RecordedRequest) -> list[Message]:
    """The messages of one chat request, system prompt included."""
    return [neutral(m) for m in request.body["messages"]]


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    """What must survive a round trip: role, text, calls (name, arguments, id) and result tool."""
    return [(m.role, m.content, [(c.name, c.arguments, c.id) for c in m.tool_calls],
             m.name if m.role == "tool" else None) for m in messages]


def assert_paired(messages: list[Message]) -> None:
    """Each assistant call is directly followed by its result (same tool, same order), and no
    result stands without its call (Ollama matches results to calls by position)."""
    expected: list[str] = []
    for message in messages:
        if message.role == "tool":
            assert expected, f"a tool result without its call: {message.content[:80]!r}"
            assert message.name == expected.pop(0)
        else:
            assert not expected, f"calls {expected} have no result before a {message.role} message"
            expected = [c.name for c in message.tool_calls] if message.role == "assistant" else []
    assert not expected, f"calls {expected} have no result"


def container(docker_client: Any, name: str) -> Any | None:
    """The container called exactly `name`, or None."""
    found = docker_client.containers.list(all=True, filters={"name": f"^/?{name}$"})
    return found[0] if found else None


def gone(docker_client: Any, container_id: str) -> bool:
    """Whether the container with this id no longer exists."""
    return not docker_client.containers.list(all=True, filters={"id": container_id})


# -- a run killed with SIGKILL, then resumed ---------------------------------------------------------


def killed_run(root: Path, server: ModelServer, started: list[subprocess.Popen[str]],
               marker: str, hostname: str) -> list[Message]:
    """Run two tool calls (one leaves `marker` in the container's /tmp), SIGKILL the process
    while it waits for the third model reply; the messages the model had received by then."""
    server.reply(tool_calls=[Call("run_shell_command", {"command": f"echo {marker} > /tmp/marker"})])
    server.reply(tool_calls=[Call("list_files", {})])
    server.hang(HANG)
    proc = start(ask_args(root, server, "--session", "s1", "leave a marker", hostname=hostname))
    started.append(proc)
    wait_requests(server, 3, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return received(server.chat_requests[2])[1:]


def tear_last_line(root: Path) -> None:
    """What a kill in the middle of writing a line leaves behind."""
    with session(root).path.open("ab") as out:
        out.write(b'{"type": "message", "ts": "2026-01-01T00:00:00.000Z", "role": "assis')


@pytest.mark.engines
def test_sigkill_mid_run_then_resume_gets_a_new_container_and_the_whole_history(
    workdir: Path, model_server: ModelServer, docker_client: Any,
    started: list[subprocess.Popen[str]], hostname: str,
) -> None:
    root = workdir / "proj"
    root.mkdir()
    marker = "kept-" + uuid.uuid4().hex[:8]
    history = killed_run(root, model_server, started, marker, hostname)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "tool"]
    left = container(docker_client, session(root).header.container)
    for _ in range(100):  # it ends with its controller (PID 1's lifeline), within moments
        if left is None or left.status != "running":
            break
        time.sleep(0.05)
        left.reload()
    assert left is not None and left.status != "running", left.status if left else None
    assert left.labels["sandbox-agent.host"] == hostname  # so no other test's gc takes it
    tear_last_line(root)
    with pytest.warns(TornLineWarning):
        saved = session(root).load()
    assert shape(saved) == shape(history)  # every message the model had seen was on disk
    listing = run([*cli(), "sessions", "--root", str(root), "--json"])
    assert listing.returncode == 0, listing.stderr
    [row] = json.loads(listing.stdout)
    assert (row["name"], row["turns"], row["status"]) == ("s1", 2, "unfinished")

    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat /tmp/marker"})])
    model_server.reply("all done")
    before = len(model_server.chat_requests)
    resumed = run(ask_args(root, model_server, "--resume", "continue", hostname=hostname))

    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "all done"
    assert "ended without its controller" in resumed.stderr and "cut off" in resumed.stderr
    first, second = model_server.chat_requests[before:]
    sent = received(first)
    assert sent[0].role == "system" and sent[0].content == system_prompt(root)
    assert shape(sent[1:]) == shape([*history, Message.user("continue")])
    assert_paired(sent[1:])
    # a bind session never re-uses a container: the first run's /tmp is gone with it
    assert marker not in received(second)[-1].content
    starts = [r for r in audit_records(root) if r["kind"] == "run_start"]
    assert starts[-1]["container_id"] != left.id
    assert gone(docker_client, left.id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the torn fragment was cut off: no warning any more
        with_resume = session(root).load()
    assert shape(with_resume[:-4]) == shape(history)
    assert [m.role for m in with_resume[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert marker not in with_resume[-2].content


def test_sigkill_then_gc_then_resume_starts_a_new_container(
    workdir: Path, model_server: ModelServer, docker_client: Any,
    started: list[subprocess.Popen[str]], hostname: str,
) -> None:
    root = workdir / "proj"
    root.mkdir()
    history = killed_run(root, model_server, started, "lost-" + uuid.uuid4().hex[:8], hostname)
    name = session(root).header.container
    left = container(docker_client, name)
    assert left is not None

    assert left.labels["sandbox-agent.host"] == hostname
    collected = run([*cli(hostname), "gc"])
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout == f"removed {name}\n"  # and nothing else
    assert gone(docker_client, left.id)

    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat /tmp/marker"})])
    model_server.reply("started afresh")
    before = len(model_server.chat_requests)
    resumed = run(ask_args(root, model_server, "--resume", "continue", hostname=hostname))

    assert resumed.returncode == 0, resumed.stderr
    assert "started a new container" in resumed.stderr  # a notice: nothing went wrong
    first, second = model_server.chat_requests[before:]
    assert shape(received(first)[1:]) == shape([*history, Message.user("continue")])
    assert "No such file" in received(second)[-1].content  # a fresh container: no marker
    starts = [r for r in audit_records(root) if r["kind"] == "run_start"]
    assert starts[-1]["container_id"] not in (None, left.id)
    assert gone(docker_client, starts[-1]["container_id"])


def test_sigkill_during_a_tool_call_resumes_with_a_placeholder_result(
    workdir: Path, model_server: ModelServer, docker_client: Any,
    started: list[subprocess.Popen[str]], hostname: str,
) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "touch started && sleep 300"})])
    proc = start(ask_args(root, model_server, "--session", "s1", "wait for it", hostname=hostname))
    started.append(proc)
    wait_for((root / "started").exists, "the tool call running", proc)
    proc.kill()
    proc.communicate(timeout=30)
    saved = session(root).load()
    assert [m.role for m in saved] == ["user", "assistant"]  # the call, never its result

    model_server.reply("resumed")
    before = len(model_server.chat_requests)
    left = container(docker_client, session(root).header.container)
    assert left is not None
    resumed = run(ask_args(root, model_server, "--resume", "go on", hostname=hostname))

    assert resumed.returncode == 0, resumed.stderr
    sent = received(model_server.chat_requests[before])[1:]
    assert [(m.role, m.content) for m in sent] == [
        ("user", "wait for it"), ("assistant", ""), ("tool", INTERRUPTED_RESULT), ("user", "go on")]
    assert_paired(sent)
    assert gone(docker_client, left.id)


# -- Ctrl-C and SIGTERM ------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_mid_run_saves_the_session_and_removes_the_container(
    signum: signal.Signals, workdir: Path, model_server: ModelServer, docker_client: Any,
    started: list[subprocess.Popen[str]],
) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply(tool_calls=[Call("write_file", {"path": "a.txt", "content": "written\n"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "a.txt"})])
    model_server.hang(HANG)
    proc = start(ask_args(root, model_server, "--session", "s1", "write then read"))
    started.append(proc)
    wait_requests(model_server, 3, proc)
    box = container(docker_client, session(root).header.container)
    assert box is not None and box.status == "running"

    proc.send_signal(signum)
    _, err = proc.communicate(timeout=RUN_TIMEOUT)

    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert (root / "a.txt").read_text() == "written\n"
    seen = received(model_server.chat_requests[2])[1:]
    assert shape(session(root).load()) == shape(seen)
    assert [m.role for m in seen] == ["user", "assistant", "tool", "assistant", "tool"]
    assert gone(docker_client, box.id)
    ends = [r for r in audit_records(root) if r["kind"] == "run_end"]
    assert [e["status"] for e in ends] == ["interrupted"]


# -- naming and resuming mistakes ----------------------------------------------------------------


def test_same_session_name_twice_without_resume_is_refused(
    workdir: Path, model_server: ModelServer
) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply("first answer")
    assert run(ask_args(root, model_server, "--session", "s1", "first")).returncode == 0
    saved = session(root).path.read_bytes()

    again = run(ask_args(root, model_server, "--session", "s1", "second"))

    assert again.returncode == 2
    assert "already exists" in again.stderr and "--resume" in again.stderr
    assert "Traceback" not in again.stderr
    assert session(root).path.read_bytes() == saved
    assert len(model_server.chat_requests) == 1


def test_resume_of_an_unknown_session_exits_4(workdir: Path, model_server: ModelServer) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply("first answer")
    assert run(ask_args(root, model_server, "--session", "s1", "first")).returncode == 0

    missing = run(ask_args(root, model_server, "--resume", "--session", "nope", "more"))

    assert missing.returncode == 4
    assert "'nope'" in missing.stderr and "s1" in missing.stderr  # names the known sessions
    assert len(model_server.chat_requests) == 1


# -- the REPL ----------------------------------------------------------------------------------------


def test_interactive_resume_continues_in_the_repl(
    workdir: Path, model_server: ModelServer
) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply("first answer")
    assert run(ask_args(root, model_server, "--session", "s1", "first question")).returncode == 0
    model_server.reply("second answer")

    repl = run(ask_args(root, model_server, "-i", "--resume"), stdin="second question\n")

    assert repl.returncode == 0, repl.stderr
    assert repl.stdout.strip() == "second answer"
    sent = received(model_server.last_chat)[1:]
    assert [(m.role, m.content) for m in sent] == [
        ("user", "first question"), ("assistant", "first answer"), ("user", "second question")]
    assert [m.content for m in session(root).load()] == [
        "first question", "first answer", "second question", "second answer"]


# -- the context window on resume ----------------------------------------------------------------


def test_a_resumed_history_over_the_budget_is_trimmed(
    workdir: Path, model_server: ModelServer
) -> None:
    root = workdir / "proj"
    root.mkdir()
    for n in range(4):
        (root / f"big{n}.txt").write_text(f"file {n} line {{}} has some words in it\n" * 60)
    for n in range(4):
        model_server.reply(tool_calls=[Call("read_file", {"path": f"big{n}.txt"})])
    model_server.reply("read them all")
    first = run(ask_args(root, model_server, "--session", "s1", "read the big files"))
    assert first.returncode == 0, first.stderr
    history = session(root).load()
    counter = TokenCounter()
    assert counter.count_messages(history) > 2000  # the test means something
    assert len(received(model_server.last_chat)) == len(history)  # not trimmed at 8192

    model_server.reply("ok")
    resumed = run(ask_args(root, model_server, "--resume", "--max-tokens", "2000", "continue"))

    assert resumed.returncode == 0, resumed.stderr
    sent = received(model_server.last_chat)
    assert sent[0].role == "system" and sent[0].content == system_prompt(root)
    assert (sent[-1].role, sent[-1].content) == ("user", "continue")
    assert len(sent) < len(history) + 2
    assert any("omitted" in m.content for m in sent if m.role == "system")
    assert_paired([m for m in sent if m.role != "system"])
    assert counter.count_messages(sent) <= 2000


# -- the state dir from inside ---------------------------------------------------------------------


def test_the_session_file_is_not_readable_from_the_container(
    workdir: Path, model_server: ModelServer
) -> None:
    root = workdir / "proj"
    root.mkdir()
    state = sessions_dir(root)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": f"cat {state}/*"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": f"{state}/s1.ndjson"})])
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": f"cat ../..{state}/s1.ndjson "
                                                    f"{default_audit_dir(root)}/*"})])
    model_server.reply("could not")

    done = run(ask_args(root, model_server, "--session", "s1", "read your session file"))

    assert done.returncode == 0, done.stderr
    results = [r for r in audit_records(root) if r["kind"] == "tool_result"]
    assert [r["ok"] for r in results] == [False, False, False]
    header = session(root).header
    everything = b"".join(r.raw for r in model_server.chat_requests)
    for secret in (header.id, header.image_digest, "header_update", '"type": "header"'):
        assert secret.encode() not in everything
    assert session(root).path.read_text().count('"role": "tool"') == 3
