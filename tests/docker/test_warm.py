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
    pool.close()
    assert gone(docker_client, standby.container.id)
    assert not (project / ".sandbox-agent").exists()


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
