"""Invariant 9 through the real CLI: a run is decided once, from the person, and holds.

A resumed session gets the sandbox this run asks for, never the one an earlier run made; a
controller that dies (a closed terminal, SIGKILL) leaves nothing running in the sandbox.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir
from tests.docker.cli_support import SANDBOX_AGENT, ask, cli_env, explain, model_args
from tests.fakes.model_server import Call, Hang, ModelServer, RecordedRequest

pytestmark = [pytest.mark.docker]

LOOP = "while true; do echo x >> grow.txt; sleep 0.2; done"


def containers(docker_client: Any, root: Path) -> list[Any]:
    """The root's containers; one removed while they are listed is not among them."""
    return list(docker_client.containers.list(
        all=True, filters={"label": f"sandbox-agent.root={root}"}, ignore_removed=True))


def records(root: Path) -> list[dict[str, Any]]:
    import json

    files = sorted(default_audit_dir(root).glob("*.ndjson"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line]


def start_loop(project: Path, server: ModelServer, *flags: str) -> subprocess.Popen[str]:
    """`ask --yes` whose model runs LOOP; returns once grow.txt grows (the loop runs)."""
    server.reply(tool_calls=[Call("run_shell_command",
                                  {"command": LOOP, "timeout_seconds": 600})])
    server.reply("never seen")
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
         "--yes", "--session", "s1", *flags, "grow it"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(), start_new_session=True)
    grow = project / "grow.txt"
    deadline = time.monotonic() + 60
    while (not grow.exists() or grow.stat().st_size < 4) and time.monotonic() < deadline:
        if run.poll() is not None:
            raise AssertionError(f"the run ended early: {run.communicate()}")
        time.sleep(0.05)
    assert grow.exists(), "the loop never ran"
    return run


def size_settles(path: Path, within: float) -> tuple[int, int]:
    """(size after `within` seconds, size 1.5 s later)."""
    time.sleep(within)
    first = path.stat().st_size
    time.sleep(1.5)
    return first, path.stat().st_size


@pytest.mark.engines
@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_a_killed_controller_stops_what_the_sandbox_runs(project: Path, model_server: ModelServer,
                                                        docker_client: Any, engine: Any,
                                                        workspace: str):
    """SIGKILL runs no handler: the toolbox sees the host's end of its requests go and kills
    every process of the tools' uid; a bind container then ends (its PID 1 exits)."""
    if workspace == "copy":
        (project / "grow.txt").write_text("")  # the copy's file: watched inside, see below
    run = start_loop(project, model_server, "--workspace", workspace) if workspace == "bind" \
        else None
    if run is None:
        run = _start_copy_loop(project, model_server, docker_client)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    if workspace == "bind":
        first, later = size_settles(project / "grow.txt", 1.0)
        assert first == later, "the loop kept writing after its controller died"
        deadline = time.monotonic() + 10
        while any(c.status == "running" for c in containers(docker_client, project)) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        left = containers(docker_client, project)
        if engine.name == "runc":  # the toolbox is PID 1's own child only there (_INIT)
            assert all(c.status != "running" for c in left), [c.status for c in left]
    else:
        [box] = containers(docker_client, project)
        sizes = []
        for _ in range(2):
            time.sleep(1.0)
            sizes.append(box.exec_run(["stat", "-c", "%s", "/workspace/grow.txt"]).output)
        assert sizes[0] == sizes[1], f"the loop kept writing in the copy: {sizes}"
        ps = box.exec_run(["python3", "-c", "import os; print(len([p for p in os.listdir("
                           "'/proc') if p.isdigit()]))"]).output.decode()
        assert int(ps) <= 2, ps  # PID 1 and this exec: the copy's files stay for --resume
    for container in containers(docker_client, project):
        container.remove(force=True)


STOPPED = ("( while true; do echo x >> grow.txt; sleep 0.2; done ) & sleep 0.3; "
           "kill -STOP $PPID; wait")
"""A command that stops its own toolbox (same uid) so the toolbox's watch cannot run."""


@pytest.mark.engines("runc", "podman")
def test_a_command_that_stops_its_toolbox_still_ends_with_its_controller(
        project: Path, model_server: ModelServer, docker_client: Any, engine: Any):
    """Red-team round 14: SIGSTOP of the toolbox kept its watch from running, and the loop
    outlived the SIGKILLed controller. PID 1, which no command can signal, watches the host's
    lifeline FIFO and ends the container. (gVisor has no FIFO channel: a known limit there.)"""
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": STOPPED, "timeout_seconds": 600})])
    model_server.reply("never seen")
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(model_server, "ollama"),
         "--yes", "grow it"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=cli_env(), start_new_session=True)
    grow = project / "grow.txt"
    deadline = time.monotonic() + 60
    while (not grow.exists() or grow.stat().st_size < 8) and time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # the toolbox is stopped by now
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    first, later = size_settles(grow, 1.0)
    assert first == later, "the loop kept writing after its controller died"
    for container in containers(docker_client, project):
        container.remove(force=True)


def _start_copy_loop(project: Path, server: ModelServer, docker_client: Any
                     ) -> subprocess.Popen[str]:
    server.reply(tool_calls=[Call("run_shell_command",
                                  {"command": LOOP, "timeout_seconds": 600})])
    server.reply("never seen")
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
         "--yes", "--session", "s1", "--workspace", "copy", "grow it"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(), start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        boxes = [c for c in containers(docker_client, project) if c.status == "running"]
        if boxes and boxes[0].exec_run(["test", "-s", "/workspace/grow.txt"]).exit_code == 0:
            return run
        assert run.poll() is None, run.communicate()
        time.sleep(0.1)
    raise AssertionError("the loop never ran in the copy")


def test_the_next_run_says_what_a_killed_controller_left(project: Path,
                                                         model_server: ModelServer,
                                                         docker_client: Any):
    run = start_loop(project, model_server)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    model_server.reply("Resumed.")
    done = ask(project, model_server, "ollama", "--session", "s1", "--resume", query="go on")
    assert done.returncode == 0, explain(done)
    [lost] = [r for r in records(project) if r["kind"] == "run_abandoned"]
    assert lost["session"] == "s1" and lost["calls_without_result"] == [
        {"tool": "run_shell_command", "call_id": lost["calls_without_result"][0]["call_id"]}]
    assert "without its controller" in done.stderr, explain(done)
    assert containers(docker_client, project) == []


def killed_after(project: Path, server: ModelServer, command: str,
                 env: dict[str, str] | None = None) -> None:
    """`ask --yes` whose model runs `command` (which touches `made` when done), SIGKILLed once
    `made` is there: a controller that died mid-command."""
    server.reply(tool_calls=[Call("run_shell_command",
                                  {"command": command, "timeout_seconds": 600})])
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
         "--yes", "plant it"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=cli_env(**(env or {})), start_new_session=True)
    deadline = time.monotonic() + 60
    while not (project / "made").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGKILL)
    run.communicate()
    assert (project / "made").exists(), "the command never ran"


def settle(project: Path, server: ModelServer, settler: str) -> subprocess.CompletedProcess[str]:
    """The dead run settled by `gc`, or by the next `ask` (its first tool call starts its
    sandbox, which settles the dead run first)."""
    if settler == "gc":
        return subprocess.run([str(SANDBOX_AGENT), "gc", "--root", str(project)], env=cli_env(),
                              capture_output=True, text=True, timeout=120)
    server.reply(tool_calls=[Call("read_file", {"path": "made"})])
    server.reply("Fine.")
    return ask(project, server, "ollama", "--yes", query="look")


@pytest.mark.engines("runc", "podman")
@pytest.mark.parametrize("settler", ["the-next-ask", "gc"])
def test_a_fifo_in_a_repository_a_killed_run_made_is_gone_once_it_is_settled(
        project: Path, model_server: ModelServer, docker_client: Any, engine: Any,
        settler: str):
    """Red-team round 24: settling a dead run renamed the `.git` its sandbox made aside after
    the sweep for FIFOs, which never enters a `.git`: the FIFO inside was then in a plain
    directory, and `git status` on the host blocked on it for ever."""
    import stat

    # the toolbox stopped first: it would otherwise, seeing its host go, often make its own
    # checks before PID 1 ends the container, and leave nothing for the settle to do
    killed_after(project, model_server, "mkdir -p x/.git && mkfifo x/.git/.gitignore && "
                 "kill -STOP $PPID && touch made && sleep 60")
    done = settle(project, model_server, settler)
    assert done.returncode == 0, explain(done)
    fifos = [p for p in project.rglob("*") if stat.S_ISFIFO(os.lstat(p).st_mode)]
    assert fifos == [], explain(done)
    subprocess.run(["git", "status", "--short"], cwd=project, capture_output=True, timeout=20,
                   check=True)
    assert "removed the FIFO the sandbox left at x/.git.quarantined-" in \
        done.stdout + done.stderr, explain(done)


@pytest.mark.parametrize("settler", ["the-next-ask", "gc"])
def test_a_killed_run_of_another_environment_is_settled_through_its_container(
        project: Path, model_server: ModelServer, tmp_path: Path, settler: str):
    """Red-team round 21, finding 3: a dead run's record is in the lock dir of the environment
    it ran in (`$XDG_RUNTIME_DIR`), so a next run or `gc` started with another one took the
    repository its sandbox planted for the person's, and `git status` there ran its
    fsmonitor on the host. The dead run's container names that lock dir in its labels."""
    first_env = tmp_path / "first-env"
    first_env.mkdir(mode=0o700)
    plant = ("mkdir -p x/.git/objects x/.git/refs/heads && "
             "echo 'ref: refs/heads/main' > x/.git/HEAD && "
             "printf '[core]\\n\\tfsmonitor = touch fsmonitor-ran\\n' > x/.git/config")
    killed_after(project, model_server,  # its toolbox stopped first
                 f"kill -STOP $PPID && {plant} && touch made && sleep 60",
                 env={"XDG_RUNTIME_DIR": str(first_env)})
    assert (project / "x" / ".git" / "config").is_file()
    done = settle(project, model_server, settler)
    assert done.returncode == 0, explain(done)
    assert not (project / "x" / ".git").exists(), explain(done)
    assert [p.name for p in (project / "x").iterdir() if p.name.startswith(".git.")], \
        explain(done)
    subprocess.run(["git", "status", "--short"], cwd=project / "x", capture_output=True,
                   timeout=20, check=True)
    assert not (project / "x" / "fsmonitor-ran").exists(), explain(done)
    assert not list((first_env / "sandbox-agent-locks" / "runs").iterdir()), explain(done)


@pytest.mark.parametrize("name", ["SIGHUP", "SIGQUIT", "SIGTERM"])
def test_a_hang_up_ends_a_run_like_sigterm(project: Path, model_server: ModelServer,
                                           docker_client: Any, name: str):
    run = start_loop(project, model_server)
    run.send_signal(getattr(signal, name))
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    first, later = size_settles(project / "grow.txt", 0.5)
    assert first == later
    assert containers(docker_client, project) == []
    kinds = [r["kind"] for r in records(project)]
    assert kinds.count("tool_call") == kinds.count("tool_result") == 1, kinds
    [end] = [r for r in records(project) if r["kind"] == "run_end"]
    assert end["status"] == "interrupted"


# -- a resumed session gets the sandbox it asks for ---------------------------------------------


def _first_run(project: Path, server: ModelServer, *flags: str,
               env: dict[str, str] | None = None) -> None:
    """A run that leaves its container behind (its controller killed while idle)."""
    asked = threading.Event()

    def hang(request: RecordedRequest) -> Hang:
        asked.set()
        return Hang(120)

    server.reply(tool_calls=[Call("run_shell_command", {"command": "echo kept > /tmp/mark"})])
    server.respond(hang)
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
         "--yes", "--session", "s1", *flags, "first"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env(**(env or {})), start_new_session=True)
    try:
        assert asked.wait(60), "the first run never got as far as its second request"
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()


def _hooks_path(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root / "sub")], check=True)
    subprocess.run(["git", "-C", str(root / "sub"), "config", "core.hooksPath", ".husky"],
                   check=True)


TOKEN = {"DEPLOY_TOKEN": "s3cr3t-deploy"}
CHANGES: dict[str, tuple[list[str], dict[str, str], list[str], dict[str, str], Any]] = {
    # (first run's flags, its environment, the resumed run's flags, its environment, between)
    # the critical one: part of the project became a repository after the first run
    "git-init": ([], {}, [], {}, _hooks_path),
    "env": (["--env", "DEPLOY_TOKEN"], TOKEN, [], TOKEN, None),
    "read-only": ([], {}, ["--read-only"], {}, None),
    "git-writes": (["--allow-git-writes"], {}, [], {}, None),
    "memory": ([], {"SANDBOX_AGENT_MEMORY": "300m"}, [], {}, None),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_resumed_session_gets_the_sandbox_this_run_asks_for(project: Path,
                                                              model_server: ModelServer,
                                                              docker_client: Any, change: str):
    first_flags, first_env, flags, env, between = CHANGES[change]
    _first_run(project, model_server, *first_flags, env=first_env)
    [old] = containers(docker_client, project)
    if between:
        between(project)
    probe = ("cat /tmp/mark; echo token=${DEPLOY_TOKEN:-none}; mkdir -p sub/.husky 2>&1;"
             " touch sub/.husky/pre-commit 2>&1; true")
    tool = ("list_files", {}) if change == "read-only" else ("run_shell_command",
                                                              {"command": probe})
    model_server.reply(tool_calls=[Call(*tool)])
    model_server.reply("Again.")
    done = ask(project, model_server, "ollama", "--yes", "--session", "s1", "--resume",
               *flags, query="again", env=env)
    assert done.returncode == 0, explain(done)
    # a bind session never re-uses a container; the dead run's is removed and its checks run
    assert "ended without its controller" in done.stderr, explain(done)
    shown = model_server.last_chat.body["messages"][-1]["content"]
    if change != "read-only":  # a read-only run has no shell: the new container is the point
        assert "kept" not in shown and "token=none" in shown, shown
    if change == "git-init":  # git on the host runs no hook the sandbox wrote
        hook = project / "sub" / ".husky" / "pre-commit"
        assert not hook.exists() or not (project / "sub" / ".git").exists(), shown
    assert old.id not in [c.id for c in containers(docker_client, project)]


def test_an_unchanged_copy_resume_re_attaches(project: Path, model_server: ModelServer,
                                              docker_client: Any):
    _first_run(project, model_server, "--workspace", "copy")
    [old] = containers(docker_client, project)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat /tmp/mark"})])
    model_server.reply("Again.")
    done = ask(project, model_server, "ollama", "--yes", "--session", "s1", "--resume",
               query="again")
    assert done.returncode == 0, explain(done)
    assert "kept" in model_server.last_chat.body["messages"][-1]["content"]
    assert "re-attached" in done.stderr, explain(done)
    assert containers(docker_client, project) == [] and old


def test_a_copy_session_made_otherwise_is_not_resumed(project: Path, model_server: ModelServer,
                                                      docker_client: Any):
    _first_run(project, model_server, "--workspace", "copy")
    [old] = containers(docker_client, project)
    done = ask(project, model_server, "ollama", "--yes", "--session", "s1", "--resume",
               query="again", env={"SANDBOX_AGENT_MEMORY": "300m"})
    assert done.returncode != 0, explain(done)
    assert "not re-used" in done.stderr and "memory limit" in done.stderr, explain(done)
    assert "Traceback" not in done.stderr
    [still] = containers(docker_client, project)
    assert still.id == old.id  # its changes are still there for a resume with the old options
    still.remove(force=True)
