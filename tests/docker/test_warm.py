"""Warm starts (executor/sandbox/warm.py): a standby is adopted only when it is exactly what
the session would make now and nothing ever ran in it, by one session only; else the session
starts cold and the standby goes. `gc` removes a standby whose maker died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from executor.sandbox import warm
from executor.sandbox.config import container_name
from executor.sandbox.docker import DockerSandbox
from executor.sandbox.gc import gc
from executor.session import NdjsonSessionStore
from tests.docker.conftest import make_config

pytestmark = [pytest.mark.docker, pytest.mark.skipif(
    bool(os.environ.get("SANDBOX_AGENT_RUNTIME")), reason="standbys are runc's quick path")]


def standby_for(config: Any, client: Any) -> warm.Standby:
    """A standby in this process's pool for `config`'s session (made now, not in background)."""
    standby = DockerSandbox(config, client=client).standby()
    warm.POOL.put("test", config.session_id, standby)
    return standby


def gone(client: Any, container_id: str) -> bool:
    import docker.errors

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def test_a_fresh_standby_is_adopted_and_works(project: Path, docker_client: Any):
    config = make_config(project)
    standby = standby_for(config, docker_client)
    made = standby.container.id
    said: list[str] = []
    with DockerSandbox(config, client=docker_client, warn=said.append) as box:
        assert box.adopted and box.info.container_id == made, said
        result = box.call("run_shell_command", {"command": "cat hello.py; echo $$"})
        assert result.ok and 'print("hello")' in result.output
        assert box.call("write_file", {"path": "new.txt", "content": "x\n"}).ok
    assert (project / "new.txt").read_text() == "x\n"
    assert gone(docker_client, made)
    assert not (project / ".sandbox-agent").exists()  # the standby's mountpoint went after


def test_a_standby_no_session_took_is_settled_with_what_it_made(project: Path,
                                                                 docker_client: Any):
    pool = warm.Pool()
    config = make_config(project)
    standby = DockerSandbox(config, client=docker_client).standby()
    assert standby is not None and (project / ".sandbox-agent").is_dir()
    pool.put("test", config.session_id, standby)
    lock = standby.lock_dir / f"{standby.name}.lock" if standby.lock_dir else None
    assert lock is not None and lock.exists()
    pool.close()
    assert gone(docker_client, standby.container.id)
    assert not (project / ".sandbox-agent").exists()
    assert not lock.exists()  # its lock file went too (gc had to sweep it)


def test_a_standby_with_another_spec_is_not_adopted(project: Path, docker_client: Any):
    config = make_config(project, memory="300m")
    standby = standby_for(config, docker_client)
    with DockerSandbox(config.model_copy(update={"memory": "400m"}),
                       client=docker_client) as box:
        assert not box.adopted and box.info.container_id != standby.container.id
        assert box.call("run_shell_command", {"command": "true"}).ok
        assert gone(docker_client, standby.container.id)
    assert not (project / ".sandbox-agent").exists()


def test_a_standby_something_was_execd_in_is_not_adopted(project: Path, docker_client: Any):
    config = make_config(project)
    standby = standby_for(config, docker_client)
    ran = standby.container.exec_run(["sh", "-c", "echo planted > /tmp/p"], user="root")
    assert ran.exit_code == 0  # it ended: the engine lists no exec any more
    standby.container.reload()
    assert not standby.container.attrs.get("ExecIDs")
    with DockerSandbox(config, client=docker_client) as box:
        assert not box.adopted
        result = box.call("run_shell_command", {"command": "cat /tmp/p || echo clean"})
        assert "clean" in result.output and "planted" not in result.output
    assert gone(docker_client, standby.container.id)


def test_a_standby_is_claimed_once(project: Path, docker_client: Any):
    config = make_config(project)
    standby = DockerSandbox(config, client=docker_client).standby()
    try:
        assert standby.why_not(_digest_of(standby), project) == ""
        assert standby.claim()
        assert not standby.claim()  # its PID 1 answers once: no second session gets it
    finally:
        standby.discard()


def _digest_of(standby: warm.Standby) -> str:
    standby.container.reload()
    return str(standby.container.labels["sandbox-agent.spec"])


def test_a_replaced_git_dir_is_not_adopted(project: Path, docker_client: Any):
    """Same paths, same spec: but the standby mounts the `.git` that is gone (round 14)."""
    config = make_config(project)
    standby = standby_for(config, docker_client)
    subprocess.run(["rm", "-rf", str(project / ".git")], check=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    with DockerSandbox(config, client=docker_client) as box:
        assert not box.adopted
        result = box.call("run_shell_command", {"command": "touch .git/x"})
        assert not result.ok or "Read-only" in result.output
    assert not (project / ".git" / "x").exists()
    assert gone(docker_client, standby.container.id)


MAKER = """
import sys, time
from pathlib import Path
from executor.sandbox.docker import DockerSandbox, SandboxConfig
config = SandboxConfig(root=Path(sys.argv[1]), session_id=sys.argv[2], image=sys.argv[3])
standby = DockerSandbox(config).standby()
print(standby.container.id, flush=True)
time.sleep(600)
"""


def test_gc_removes_a_standby_whose_maker_died(project: Path, docker_client: Any,
                                                 workdir: Path):
    from tests.conftest import IMAGE

    script = workdir / "maker.py"
    script.write_text(MAKER)
    config = make_config(project)
    maker = subprocess.Popen([sys.executable, str(script), str(project), config.session_id,
                              IMAGE], stdout=subprocess.PIPE, text=True)
    try:
        assert maker.stdout is not None
        made = maker.stdout.readline().strip()
        assert made, "the maker made no standby"
        assert container_name(config.session_id) in gc(docker_client, root=str(project)).in_use
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    deadline = time.monotonic() + 10
    while docker_client.containers.get(made).status == "running" and time.monotonic() < deadline:
        time.sleep(0.1)  # its PID 1 saw the lifeline go
    assert docker_client.containers.get(made).status != "running"
    assert container_name(config.session_id) in gc(docker_client, root=str(project)).removed
    assert gone(docker_client, made)


def test_orchestrates_children_start_in_containers_made_ahead(
        project: Path, model_server: Any, docker_client: Any):
    """Through the CLI: each read-only child adopts the standby made while the one before ran
    (the first: the orchestrator's), works in it, and none is left."""
    from tests.docker.cli_support import containers_of, explain, model_args, run_cli
    from tests.fakes.model_server import Call

    since = int(time.time()) - 1
    for _ in range(2):
        model_server.reply(tool_calls=[Call("delegate", {"task": "Read hello.py."})])
        model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
        model_server.reply("It prints hello.")
    model_server.reply("Both said hello.")
    done = run_cli("orchestrate", "--root", project, *model_args(model_server, "ollama"),
                   "--no-confirm-delegation", "--json", "ask twice")
    assert done.returncode == 0, explain(done)
    reads = [c for c in json.loads(done.stdout)["tool_calls"] if c["tool"] == "read_file"]
    assert len(reads) == 2 and all(c["ok"] and c["child_session"] for c in reads)
    children = [NdjsonSessionStore.open(project, c["child_session"]).header.container
                for c in reads]
    created = [e for e in docker_client.events(since=since, until=int(time.time()) + 1,
                                               decode=True, filters={"event": "create"})
               if e.get("Type") == "container"]
    for name in children:  # one container each, and it was a standby: no cold one after it
        made = [e for e in created if e["Actor"]["Attributes"].get("name") == name]
        assert len(made) == 1, (name, made)
        assert warm.LABEL_STANDBY in made[0]["Actor"]["Attributes"], done.stderr
    assert containers_of(docker_client, project) == []



_HOLD = ("import sys; from pathlib import Path; from executor.sandbox import rootlock; "
         "from executor.sandbox.config import default_lock_dir; "
         "default_lock_dir().mkdir(parents=True, exist_ok=True); "
         "rootlock.hold(default_lock_dir(), Path(sys.argv[1]), 'other', wait=False); "
         "print('held', flush=True); sys.stdin.read()")


def test_no_standby_is_made_while_another_process_holds_the_root(project: Path,
                                                                docker_client: Any):
    """Its walk and its mounts are a start's: no other process's bind sandbox may race them
    (rootlock.py); once made, it gives the root back (its session takes it at its start)."""
    from executor.errors import SandboxError
    from executor.state import real_root

    def other_process() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", _HOLD, str(real_root(project))],
                                cwd=Path(__file__).parents[2], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    config = make_config(project)
    holder = other_process()
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(SandboxError, match="in use by bind session other"):
            DockerSandbox(config, client=docker_client).standby()
    finally:
        holder.communicate("")
    standby = DockerSandbox(config, client=docker_client).standby()
    assert standby is not None
    try:
        after = other_process()
        assert after.stdout is not None and after.stdout.readline() == "held\n"  # given back
        after.communicate("")
    finally:
        standby.discard()


# -- a standby left for the next process (SANDBOX_AGENT_WARM) --------------------------------


@pytest.fixture
def settled(project: Path, docker_client: Any) -> Any:
    """The standby the last run of a test left goes with the test (as `gc --force` does)."""
    yield
    gc(docker_client, root=str(project), force=True)


def warm_ask(project: Path, model_server: Any, *flags: str, ttl: str = "120",
             env: dict[str, str] | None = None) -> Any:
    """One `ask` with a read_file call, with the warm setting; its run_start/sandbox_start."""
    from tests.docker.cli_support import ask
    from tests.fakes.model_server import Call

    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("It prints hello.")
    return ask(project, model_server, "ollama", "--json", *flags,
               env={"SANDBOX_AGENT_WARM": ttl, **(env or {})})


def started(project: Path, done: Any) -> dict[str, Any]:
    """The `sandbox_start` record of the run `done` (its session, from --json)."""
    from tests.docker.cli_support import explain
    from tests.docker.test_sessions_e2e import audit_records

    assert done.returncode == 0, explain(done)
    session = json.loads(done.stdout)["session"]
    (record,) = [r for r in audit_records(project)
                 if r["kind"] == "sandbox_start" and r["session"] == session]
    return record


def left_standby(docker_client: Any, project: Path) -> Any:
    """The running standby a run left on `project`."""
    found = docker_client.containers.list(
        filters={"label": [f"sandbox-agent.root={project}", warm.LABEL_STANDBY]})
    assert len(found) == 1, found
    return found[0]


def test_the_next_ask_adopts_the_container_the_last_one_left(
        project: Path, model_server: Any, docker_client: Any, settled: Any):
    first = warm_ask(project, model_server)
    assert started(project, first).get("adopted") is None, first.stderr  # nothing was left
    waiting = left_standby(docker_client, project)
    second = warm_ask(project, model_server)
    record = started(project, second)
    adopted = record.get("adopted")
    assert adopted and adopted["made_by_session"] == json.loads(first.stdout)["session"]
    assert record["container_id"] == waiting.id and adopted["made_at"].endswith("Z")
    assert [c["ok"] for c in json.loads(second.stdout)["tool_calls"]] == [True]
    assert left_standby(docker_client, project).id != waiting.id  # and it left the next one


def _exec_in(docker_client: Any, project: Path) -> None:
    assert left_standby(docker_client, project).exec_run(["true"]).exit_code == 0


def _new_git(docker_client: Any, project: Path) -> None:
    subprocess.run(["rm", "-rf", str(project / ".git")], check=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)


def _linked_record(docker_client: Any, project: Path) -> None:
    from executor.sandbox.config import default_lock_dir

    folder = default_lock_dir() / warm.LEFT
    (record,) = [p for p in folder.iterdir()
                 if str(project) in p.read_text(errors="replace")]
    aside = project.parent / "aside.json"
    record.rename(aside)
    record.symlink_to(aside)  # the very bytes we wrote, but through a link


def _expired(docker_client: Any, project: Path) -> None:
    standby = left_standby(docker_client, project)
    deadline = time.monotonic() + 30
    while standby.status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)  # its PID 1 ends it at its TTL
        standby.reload()
    assert standby.status != "running"


COLD = {  # what happens between the runs, the second run's flags and env, the TTL
    "exec": (_exec_in, (), {}, "120"),
    "git-replaced": (_new_git, (), {}, "120"),
    "read-only": (None, ("--read-only",), {}, "120"),
    "env": (None, ("--env", "WARM_PROBE"), {"WARM_PROBE": "1"}, "120"),
    "memory": (None, (), {"SANDBOX_AGENT_MEMORY": "300m"}, "120"),
    "record-linked": (_linked_record, (), {}, "120"),
    "ttl-passed": (_expired, (), {}, "3"),
}


@pytest.mark.parametrize("case", list(COLD))
def test_the_next_ask_starts_cold_when_the_left_container_is_not_its_own(
        case: str, project: Path, model_server: Any, docker_client: Any, settled: Any):
    between, flags, env, ttl = COLD[case]
    warm_ask(project, model_server, ttl=ttl)
    waiting = left_standby(docker_client, project)
    if between is not None:
        between(docker_client, project)
    second = warm_ask(project, model_server, *flags, ttl=ttl, env=env)
    record = started(project, second)
    assert record.get("adopted") is None and record["container_id"] != waiting.id, case
    assert [c["ok"] for c in json.loads(second.stdout)["tool_calls"]] == [True]
    if case in ("exec", "git-replaced"):
        assert gone(docker_client, waiting.id)  # looked at and refused: it went


@pytest.mark.parametrize("then", ["next-ask", "gc"])
def test_what_the_person_did_while_a_left_standby_waited_is_theirs(
        then: str, project: Path, model_server: Any, docker_client: Any, settled: Any):
    """Red-team round 23: a left standby nobody took was settled as a dead run, against the
    tree as it was when it was made, so the person's own `git init sub` after the run was
    renamed aside ("appeared during the session") and their set-id bits cleared."""
    from tests.docker.cli_support import explain

    warm_ask(project, model_server, ttl="3")
    waiting = left_standby(docker_client, project)
    subprocess.run(["git", "init", "-q", str(project / "sub")], check=True)
    (project / "tool.sh").write_text("echo tool\n")
    os.chmod(project / "tool.sh", 0o4755)
    _expired(docker_client, project)
    if then == "gc":
        notes = gc(docker_client, root=str(project)).notes
        said = "\n".join(notes)
    else:
        done = warm_ask(project, model_server)
        assert done.returncode == 0, explain(done)
        said = done.stderr
    assert (project / "sub" / ".git").is_dir(), said
    assert os.stat(project / "tool.sh").st_mode & 0o4000, said
    assert "ended without its controller" not in said and "appeared" not in said, said
    assert gone(docker_client, waiting.id)
    if then == "next-ask":
        assert "never used: it is removed" in said, explain(done)


def test_of_two_racing_runs_exactly_one_adopts(project: Path, model_server: Any,
                                               docker_client: Any, settled: Any):
    from tests.docker.cli_support import SANDBOX_AGENT, cli_env, model_args
    from tests.fakes.model_server import Call

    warm_ask(project, model_server, "--read-only")
    waiting = left_standby(docker_client, project)
    for _ in range(2):  # the first is slow: the other run's first request gets the second
        model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})], delay=2.0)
    for _ in range(2):
        model_server.reply("It prints hello.")
    command = [str(SANDBOX_AGENT), "ask", "--root", str(project),
               *model_args(model_server, "ollama"), "--json", "--read-only", "go"]
    racers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True,
                               env=cli_env(SANDBOX_AGENT_WARM="120")) for _ in range(2)]
    results = [subprocess.CompletedProcess(r.args, r.wait(120), *r.communicate())
               for r in racers]
    records = [started(project, done) for done in results]
    assert sorted(bool(r.get("adopted")) for r in records) == [False, True], records
    assert waiting.id in [r["container_id"] for r in records]


LEAVER = """
import sys, time
from pathlib import Path
from executor.sandbox.docker import DockerSandbox, SandboxConfig
config = SandboxConfig(root=Path(sys.argv[1]), session_id=sys.argv[2], image=sys.argv[3])
standby = DockerSandbox(config).standby(ttl=int(sys.argv[4]))
print(standby.container.id, flush=True)
time.sleep(600)
"""


def test_a_left_standby_outlives_its_killed_maker_until_its_ttl_then_gc_settles_it(
        project: Path, docker_client: Any, workdir: Path):
    from executor.sandbox import runrecord
    from executor.sandbox.config import default_lock_dir
    from tests.conftest import IMAGE

    script = workdir / "leaver.py"
    script.write_text(LEAVER)
    config = make_config(project)
    maker = subprocess.Popen([sys.executable, str(script), str(project), config.session_id,
                              IMAGE, "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert maker.stdout is not None
        made = maker.stdout.readline().strip()
        assert made, "the maker made no standby"
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    killed = time.monotonic()
    time.sleep(1.0)  # a maker's lifeline would have ended it by now (WATCH_SECONDS: 0.2)
    assert docker_client.containers.get(made).status == "running"
    while docker_client.containers.get(made).status == "running" \
            and time.monotonic() < killed + 30:
        time.sleep(0.2)
    assert docker_client.containers.get(made).status != "running"  # its TTL ended it
    name = container_name(config.session_id)
    assert [r.name for r in runrecord.abandoned(default_lock_dir(), project)] == [name]
    assert name in gc(docker_client, root=str(project)).removed
    assert gone(docker_client, made)
    assert runrecord.abandoned(default_lock_dir(), project) == []  # settled
    assert not (project / ".sandbox-agent").exists()
