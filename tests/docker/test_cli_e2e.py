"""`sandbox-agent ask` end to end: the real CLI, the stand-in model server, a real container.

Every test runs the console script as a subprocess without a terminal and asserts on what
really happened: the files on disk, the bytes the model server received, stdout, stderr
and the exit code.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from executor.session import sessions_dir
from executor.state import project_dir
from tests.docker.cli_support import (
    ALL_TOOLS,
    PROVIDERS,
    READ_TOOLS,
    SANDBOX_AGENT,
    ask,
    assert_ok,
    assert_user_error,
    cli_env,
    containers_of,
    explain,
    model_args,
    offered_tools,
    run_cli,
    tool_exchanges,
    tree,
)
from tests.fakes.model_server import Call, Hang, ModelServer, RecordedRequest, Reply

pytestmark = pytest.mark.docker

def _script_every_tool(server: ModelServer) -> None:
    server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    server.reply("Looking for callers.", tool_calls=[Call("search_files", {"pattern": "return a"})])
    server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                                "new_text": "a + b + 0"})])
    server.reply(tool_calls=[Call("write_file", {"path": "notes/todo.txt",
                                                 "content": "check add()\n"})])
    server.reply(tool_calls=[Call("run_shell_command",
                                  {"command": "cat notes/todo.txt && echo shell-$((6*7))"})])
    server.reply("Edited add() and left a note.")


@pytest.mark.engines
@pytest.mark.parametrize("provider", PROVIDERS)
def test_multi_step_run_through_every_tool(project: Path, model_server: ModelServer,
                                           provider: str):
    before = tree(project)
    _script_every_tool(model_server)

    done = ask(project, model_server, provider, "--yes", query="tidy up add()")

    assert_ok(done, "Edited add() and left a note.")
    after = tree(project)
    assert after == {**before, "src/app.py": b"def add(a, b):\n    return a + b + 0\n",
                     "notes/todo.txt": b"check add()\n"}
    chats = model_server.chat_requests
    assert len(chats) == 6 and model_server.pending == 0
    for request in chats:
        assert set(offered_tools(request)) == ALL_TOOLS and len(offered_tools(request)) == 6
    read_schema = next(t for t in chats[0].body["tools"] if t["function"]["name"] == "read_file")
    assert "path" in read_schema["function"]["parameters"]["required"]
    assert chats[0].body["messages"][-1] == {"role": "user", "content": "tidy up add()"}

    exchanges = tool_exchanges(model_server.last_chat)
    assert [name for name, _, _ in exchanges] == [
        "read_file", "search_files", "edit_file", "write_file", "run_shell_command"]
    results = [result for _, _, result in exchanges]
    assert results[0] == "     1\tdef add(a, b):\n     2\t    return a + b"
    assert "src/app.py:2:    return a + b" in results[1]
    assert "edited" in results[2] and "src/app.py" in results[2]
    assert "notes/todo.txt" in results[3]
    assert results[4].startswith("exit_code: 0") and "check add()\nshell-42" in results[4]
    # Each request carries exactly the results known by then: fed back in order, never lost.
    for index, request in enumerate(chats):
        assert [r for _, _, r in tool_exchanges(request)] == results[:index]


@pytest.mark.engines
def test_write_edit_and_shell_are_denied_without_a_terminal(project: Path,
                                                            model_server: ModelServer):
    before = tree(project)
    model_server.reply(tool_calls=[Call("write_file", {"path": "new.txt", "content": "x\n"})])
    model_server.reply(tool_calls=[Call("edit_file", {"path": "hello.py", "old_text": "hello",
                                                      "new_text": "bye"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    model_server.reply("I could not change anything.")

    done = ask(project, model_server, "ollama")

    assert_ok(done, "I could not change anything.")
    assert tree(project) == before
    assert not (project / "new.txt").exists() and not (project / "made.txt").exists()
    results = tool_exchanges(model_server.last_chat)
    assert [name for name, _, _ in results] == ["write_file", "edit_file", "run_shell_command"]
    for name, _, result in results:
        assert result.startswith("Denied:"), (name, result)
        assert "approval" in result.lower() and "--yes" in result, (name, result)


def test_the_same_write_runs_with_yes(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "new.txt", "content": "x\n"})])
    model_server.reply("Wrote it.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Wrote it.")
    assert (project / "new.txt").read_text() == "x\n"
    [(_, _, result)] = tool_exchanges(model_server.last_chat)
    assert not result.startswith("Denied") and "new.txt" in result
    verified = run_cli("audit", "verify", "--root", project)  # the run left an intact trail
    assert verified.returncode == 0 and verified.stdout.startswith("ok: "), explain(verified)


def test_a_policy_deny_beats_yes(project: Path, model_server: ModelServer):
    (project / "keep.txt").write_text("keep\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "rm keep.txt"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo ok; rm -f keep.txt"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo allowed"})])
    model_server.reply("Nothing removed.")

    done = ask(project, model_server, "ollama", "--yes", "--deny-command", "rm ")

    assert_ok(done, "Nothing removed.")
    assert (project / "keep.txt").read_text() == "keep\n"
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert results[0].startswith("Denied:") and "rm" in results[0]
    assert results[1].startswith("Denied:")  # a denied command hidden after `;` is still denied
    assert results[2].startswith("exit_code: 0") and "allowed" in results[2]


@pytest.mark.engines
def test_read_only_offers_no_write_tools_and_rejects_writes(project: Path,
                                                            model_server: ModelServer,
                                                            docker_client: Any):
    before = tree(project)
    model_server.reply(tool_calls=[Call("write_file", {"path": "hello.py", "content": "x"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("Read only, as asked.")

    done = ask(project, model_server, "ollama", "--read-only", "--yes")

    assert_ok(done, "Read only, as asked.")
    assert tree(project) == before
    for request in model_server.chat_requests:
        assert set(offered_tools(request)) == READ_TOOLS
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert "Unknown tool 'write_file'" in results[0]
    assert "Unknown tool 'run_shell_command'" in results[1]
    assert "print(\"hello\")" in results[2]
    assert "read-only" in model_server.chat_requests[0].body["messages"][0]["content"]
    assert "read-only" in done.stderr  # the session line says how the root is mounted
    assert containers_of(docker_client, project) == []


@pytest.mark.parametrize(("flags", "removed"), [
    (["--deny-tool", "run_shell_command"], {"run_shell_command"}),
    (["--deny-prefix", "write"], {"write_file"}),
    (["--deny-tool", "list_files", "--deny-prefix", "edit", "--deny-prefix", "write"],
     {"list_files", "edit_file", "write_file"}),
])
def test_denied_tools_are_not_offered(project: Path, model_server: ModelServer,
                                      flags: list[str], removed: set[str]):
    victim = sorted(removed)[0]
    model_server.reply(tool_calls=[Call(victim, {"path": "x.txt", "content": "x",
                                                 "command": "touch x.txt"})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes", *flags)

    assert_ok(done, "Done.")
    assert set(offered_tools(model_server.chat_requests[0])) == ALL_TOOLS - removed
    [(_, _, result)] = tool_exchanges(model_server.last_chat)
    assert f"Unknown tool '{victim}'" in result
    assert not (project / "x.txt").exists()


def test_max_turns_stops_a_model_that_keeps_calling_tools(project: Path,
                                                          model_server: ModelServer,
                                                          docker_client: Any):
    model_server.default = Reply(tool_calls=(Call("read_file", {"path": "hello.py"}),))

    done = ask(project, model_server, "ollama", "--max-turns", "2")

    line = assert_user_error(done, 31, "2 model turns")
    assert done.stdout == ""
    assert len(model_server.chat_requests) == 2, line
    assert containers_of(docker_client, project) == []


def test_unknown_tools_bad_arguments_and_failed_calls_are_results_the_model_sees(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("delete_everything", {"path": "."})])
    model_server.reply(tool_calls=[Call("read_file", {"file": "hello.py"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py", "start_line": "first"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "missing.py"})])
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "echo oops >&2; exit 3"})])
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "sleep 30", "timeout_seconds": 1})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("Recovered.")

    done = ask(project, model_server, "openai", "--yes")

    assert_ok(done, "Recovered.")
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert results[0].startswith("Unknown tool 'delete_everything'")
    assert "read_file" in results[0] and "run_shell_command" in results[0]  # what exists
    assert results[1].startswith("Invalid arguments for read_file")
    assert "path" in results[1] and "file" in results[1]
    assert results[2].startswith("Invalid arguments for read_file") and "start_line" in results[2]
    assert "missing.py" in results[3]  # failed calls are results too
    assert results[4].startswith("exit_code: 3") and "oops" in results[4]
    assert "timed out after 1s" in results[5]
    assert results[6] == '     1\tprint("hello")'


def test_a_failed_request_does_not_end_the_repl(project: Path, model_server: ModelServer):
    model_server.error(400, "first one fails")
    model_server.reply("Second works.")

    done = ask(project, model_server, "ollama", "-i", query="",
               stdin="first\nsecond\nexit\nnever read\n")

    assert done.returncode == 0, explain(done)
    assert done.stdout == "Second works.\n"
    assert "error: " in done.stderr and "first one fails" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(model_server.chat_requests) == 2  # nothing after `exit`


@pytest.mark.parametrize("provider", PROVIDERS)
def test_repl_keeps_one_session_and_one_container(project: Path, model_server: ModelServer,
                                                  provider: str, docker_client: Any):
    seen_containers: list[list[str]] = []

    def first(request: RecordedRequest) -> Reply:
        seen_containers.append([c.id for c in containers_of(docker_client, project)])
        return Reply(tool_calls=(Call("run_shell_command", {"command": "echo $$ > /tmp/pid"}),))

    def second(request: RecordedRequest) -> Reply:
        seen_containers.append([c.id for c in containers_of(docker_client, project)])
        return Reply(tool_calls=(Call("run_shell_command", {"command": "cat /tmp/pid"}),))

    model_server.respond(first).reply("First answer.")
    model_server.respond(second).reply("Second answer.")

    done = ask(project, model_server, provider, "-i", "--yes", query="",
               stdin="first request\nsecond request\n")

    assert done.returncode == 0, explain(done)
    assert done.stdout == "First answer.\nSecond answer.\n", explain(done)
    assert "Traceback" not in done.stderr
    # The REPL starts the container in the background at once: it may still be on its way
    # when the first request goes out, and then it is the one for both requests.
    assert len(seen_containers) == 2 and len(seen_containers[1]) == 1
    assert seen_containers[0] in ([], seen_containers[1])
    last = model_server.last_chat.body["messages"]
    texts = [m.get("content") for m in last]
    assert texts.index("first request") < texts.index("First answer.") < \
        texts.index("second request")
    # /tmp of the same container still holds what the first request wrote.
    [_, (_, _, pid_file)] = tool_exchanges(model_server.last_chat)
    assert pid_file.startswith("exit_code: 0") and pid_file.split("\n")[-1].isdigit()
    assert containers_of(docker_client, project) == []
    assert len(list(sessions_dir(project).glob("*.ndjson"))) == 1


@pytest.mark.engines
def test_the_api_key_reaches_the_server_and_nothing_else(project: Path, model_server: ModelServer):
    key = "sk-test-0123456789-never-leak"
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "env; tr '\\0' '\\n' < /proc/1/environ; exit 0"})])
    model_server.reply("Checked.")

    done = ask(project, model_server, "openai", "--yes", "--trace",
               env={"OPENAI_API_KEY": key})

    assert_ok(done, "Checked.")
    assert {r.headers.get("authorization") for r in model_server.requests} == {f"Bearer {key}"}
    [(_, _, shown)] = tool_exchanges(model_server.last_chat)
    assert shown.startswith("exit_code: 0") and "PATH=" in shown
    assert key not in shown  # invariant 4: credentials never enter the container
    assert key not in done.stderr + done.stdout
    for path in project_dir(project).rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_removes_its_container(project: Path, model_server: ModelServer,
                                             docker_client: Any, signal_number: int):
    asked = threading.Event()

    def hang(request: RecordedRequest) -> Hang:
        asked.set()
        return Hang(60)

    model_server.respond(hang)
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(model_server, "ollama"),
         "hello"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env())
    try:
        assert asked.wait(60), "the run never asked the model"
        # The container starts in the background while the model thinks.
        deadline = time.monotonic() + 60
        while not _running(docker_client, project) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_running(docker_client, project)) == 1
        run.send_signal(signal_number)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

    assert run.returncode == 130, err
    assert out == "" and "Traceback" not in err and "interrupted" in err
    assert containers_of(docker_client, project) == []


@pytest.mark.parametrize("signals", [
    (signal.SIGTERM, signal.SIGHUP, signal.SIGTERM),
    (signal.SIGINT, signal.SIGINT, signal.SIGINT, signal.SIGHUP),
], ids=["TERM-HUP-TERM", "INT-INT-INT-HUP"])
def test_a_second_ending_signal_does_not_cut_the_cleanup_short(
        project: Path, model_server: ModelServer, docker_client: Any,
        signals: tuple[signal.Signals, ...]):
    """A dying terminal sends SIGHUP after SIGTERM, an impatient person presses Ctrl-C again:
    a signal that came while the first was being cleaned up skipped the end-of-session sweep,
    so a repository the command made stayed for host git to honour (red-team round 14)."""
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "git init -q sub; while true; do date >> grow.txt; sleep 0.2; done",
        "timeout_seconds": 600})])
    model_server.reply("never asked")
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(model_server, "ollama"),
         "--yes", "plant it"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env())
    try:
        deadline = time.monotonic() + 60
        grow = project / "grow.txt"
        while not (grow.exists() and grow.stat().st_size) and time.monotonic() < deadline:
            assert run.poll() is None, run.communicate()
            time.sleep(0.1)
        assert (project / "sub" / ".git").is_dir(), "the command never ran"
        for number in signals:
            run.send_signal(number)
            time.sleep(0.05)
        _, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

    assert run.returncode == 130, err
    assert "Traceback" not in err
    assert not (project / "sub" / ".git").exists(), err
    assert list((project / "sub").glob(".git.quarantined-*")), err
    assert containers_of(docker_client, project) == []


def _running(docker_client: Any, root: Path) -> list[Any]:
    """Running sandbox containers of `root` (a sparse listing: one that is still being set up
    or already removed does not fail it)."""
    return list(docker_client.containers.list(
        sparse=True, filters={"label": f"sandbox-agent.root={root}", "status": "running"}))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_several_calls_in_one_reply_each_get_their_result(project: Path,
                                                          model_server: ModelServer,
                                                          provider: str):
    (project / "b.txt").write_text("bee\n")
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"}),
                                   Call("read_file", {"path": "b.txt"}),
                                   Call("list_files", {"glob": "*.txt"})])
    model_server.reply("Three at once.")

    done = ask(project, model_server, provider)

    assert_ok(done, "Three at once.")
    exchanges = tool_exchanges(model_server.last_chat)  # checks ids / names pair up
    assert [result for _, _, result in exchanges[:2]] == ['     1\tprint("hello")', "     1\tbee"]
    assert "b.txt" in exchanges[2][2] and "hello.py" not in exchanges[2][2]


@pytest.mark.engines
def test_resume_continues_the_conversation(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("It prints hello.")
    first = ask(project, model_server, "ollama", "--session", "talk", query="what does it do?")
    assert_ok(first, "It prints hello.")
    model_server.reply("You asked what hello.py does.")

    again = ask(project, model_server, "openai", "--session", "talk", "--resume",
                query="what did I ask?")
    taken = ask(project, model_server, "ollama", "--session", "talk", query="new?")

    assert_ok(again, "You asked what hello.py does.")
    messages = model_server.last_chat.body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant",
                                             "user"]
    assert messages[1]["content"] == "what does it do?"
    assert messages[3]["content"] == '     1\tprint("hello")'
    assert messages[4]["content"] == "It prints hello."
    assert messages[5]["content"] == "what did I ask?"
    assert_user_error(taken, 2, "session 'talk' already exists")
    assert "--resume" in taken.stderr


@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_an_ended_ask_leaves_no_lock_file_and_a_copy_session_still_resumes(
        project: Path, model_server: ModelServer, workdir: Path, workspace: str):
    """A session removes its lock when it lets go (a free lock and none mean the same), the
    root's too; a copy session's container, left running for `--resume`, is taken again. The
    compiled toolbox is kept in the lock dir for the next process."""
    runtime = workdir / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    locks = runtime / "sandbox-agent-locks"
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("It prints hello.")
    first = ask(project, model_server, "ollama", "--workspace", workspace, "--session", "one",
                env=env)
    assert_ok(first, "It prints hello.")
    assert sorted(p.name for p in locks.glob("*.lock")) == []
    assert len(list((locks / "bundles").glob("toolbox-*.bin"))) == 1
    if workspace == "copy":
        model_server.reply("Still here.")
        again = ask(project, model_server, "ollama", "--session", "one", "--resume", env=env)
        assert_ok(again, "Still here.")
        assert "re-used" not in again.stderr, explain(again)
        assert sorted(p.name for p in locks.glob("*.lock")) == []
