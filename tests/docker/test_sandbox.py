"""The Docker sandbox's own behaviour: tools end to end, bad input, recovery, re-attach, errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from executor.config import OFFLINE_BASE_IMAGE
from executor.errors import EngineUnavailableError, ImageNotFoundError
from executor.protocols import Sandbox
from executor.sandbox.docker import DockerSandbox
from executor.sandbox.engine import connect
from executor.workspace.copyload import ArchiveLoader
from tests.conftest import IMAGE
from tests.docker.conftest import Observed, make_config

pytestmark = pytest.mark.docker


def test_satisfies_the_sandbox_protocol(observed: Observed):
    sandbox, _ = observed
    assert isinstance(sandbox, Sandbox)
    assert sandbox.is_alive()
    assert sandbox.info.network == "none" and sandbox.info.mount_mode == "rw"
    assert sandbox.info.image_digest.startswith("sha256:")


def test_the_six_tools_work_on_the_real_mount(sandbox: DockerSandbox, project: Path):
    read = sandbox.call("read_file", {"path": "src/app.py"})
    assert read.ok and "def add(a, b):" in read.output and "1\t" in read.output
    assert sandbox.call("write_file", {"path": "pkg/new.py", "content": "X = 1\n"}).ok
    assert (project / "pkg" / "new.py").read_text() == "X = 1\n"
    edit = sandbox.call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                      "new_text": "a - b"})
    assert edit.ok and edit.meta["sha256_before"] != edit.meta["sha256_after"]
    assert "a - b" in (project / "src" / "app.py").read_text()
    search = sandbox.call("search_files", {"pattern": "def add"})
    assert "src/app.py:1:def add(a, b):" in search.output
    listing = sandbox.call("list_files", {})
    assert "src/" in listing.output and "pkg/new.py" in listing.output
    assert ".git" not in listing.output
    run = sandbox.call("run_shell_command", {"command": "python3 hello.py; exit 3"})
    assert not run.ok and run.meta["exit_code"] == 3 and "hello" in run.output


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("read_file", {}, "path"),
        ("read_file", {"path": 5}, "path"),
        ("read_file", {"path": "hello.py", "start_line": "x"}, "start_line"),
        ("nonexistent_tool", {}, "unknown tool"),
        ("read_file", {"path": ""}, "empty"),
        ("read_file", {"path": "hel\x00lo.py"}, "NUL"),
        ("read_file", {"path": "src"}, "directory"),
        ("read_file", {"path": "missing.txt"}, "not found"),
        ("edit_file", {"path": "hello.py", "old_text": "nope", "new_text": "x"}, "0 match"),
        ("run_shell_command", {"command": 42}, "command"),
    ],
)
def test_bad_input_is_a_clear_error_result(observed: Observed, tool: str, args: dict,
                                           expected: str):
    sandbox, _ = observed
    result = sandbox.call(tool, args)
    assert not result.ok
    assert expected.lower() in result.output.lower(), result.output
    assert sandbox.call("read_file", {"path": "hello.py"}).ok


def test_big_and_odd_files(sandbox: DockerSandbox, project: Path):
    with (project / "big.log").open("w") as f:
        for i in range(1_000_000):
            f.write(f"line {i} " + "x" * 40 + "\n")
    assert (project / "big.log").stat().st_size > 50_000_000
    (project / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    (project / "blob.bin").write_bytes(b"\x00\x01\x02" * 1000)
    big = sandbox.call("read_file", {"path": "big.log"})
    assert big.ok and "line 0 " in big.output and "truncated" in big.output.lower()
    assert len(big.output) < 200_000
    tail = sandbox.call("read_file", {"path": "big.log", "start_line": 999_999, "end_line": 1_000_000})
    assert "line 999999" in tail.output
    latin = sandbox.call("read_file", {"path": "latin1.txt"})
    assert "caf" in latin.output and "utf-8" in latin.output.lower()
    blob = sandbox.call("read_file", {"path": "blob.bin"})
    assert "binary" in blob.output.lower()


def test_toolbox_death_is_noticed_and_repaired(sandbox: DockerSandbox):
    warnings: list[str] = []
    sandbox._warn = warnings.append
    died = sandbox.call("run_shell_command", {"command": "kill -9 $PPID; sleep 5"})
    assert not died.ok and "restarted" in died.output
    assert warnings and "restarting the toolbox" in warnings[0]
    assert sandbox.call("read_file", {"path": "hello.py"}).ok


def test_stuck_toolbox_hits_the_host_deadline(sandbox: DockerSandbox):
    warnings: list[str] = []
    sandbox._warn = warnings.append
    started = time.monotonic()
    stuck = sandbox.call("run_shell_command", {"command": "kill -STOP $PPID"}, timeout=2)
    assert time.monotonic() - started < 15
    assert not stuck.ok and "did not answer within 2s" in stuck.output
    assert sandbox.call("read_file", {"path": "hello.py"}).ok
    assert any("restarting" in w for w in warnings)


def in_container(box: DockerSandbox, docker_client: Any, code: str) -> str:
    """Run python3 `code` in the box's container as the toolbox's uid (not through the toolbox)."""
    container = docker_client.containers.get(box.info.container_id)
    done = container.exec_run(["python3", "-c", code], user=box.info.user)
    assert done.exit_code == 0, done.output
    return str(done.output.decode())


def alive(box: DockerSandbox, docker_client: Any, pid: int) -> bool:
    """Whether `pid` still runs in the box's container (a zombie is dead), after up to 2 s."""
    code = (f"import os, time\nfor _ in range(100):\n"
            f"    if not os.path.exists('/proc/{pid}'): break\n    time.sleep(0.02)\n"
            f"print(os.path.exists('/proc/{pid}') and open('/proc/{pid}/stat').read().split()[2])")
    return in_container(box, docker_client, code).strip() not in ("False", "Z")


def test_the_first_toolbox_is_the_containers_own_process(sandbox: DockerSandbox,
                                                        docker_client: Any, project: Path):
    """No exec for the first toolbox: PID 1 forks it, stays, reaps, cannot be touched, and the
    engine keeps no log of what the tools returned."""
    (project / "secret.txt").write_text("TOOL-OUTPUT-7f3a\n")
    assert "TOOL-OUTPUT-7f3a" in sandbox.call("read_file", {"path": "secret.txt"}).output
    container = docker_client.containers.get(sandbox.info.container_id)
    assert container.attrs["HostConfig"]["LogConfig"]["Type"] == "none"
    assert not container.attrs["HostConfig"]["Init"]
    assert not container.attrs.get("ExecIDs"), container.attrs.get("ExecIDs")
    assert sandbox.runtime.toolbox is not None and sandbox.runtime.toolbox.exec_id == ""
    probe = sandbox.call("run_shell_command", {"command": (
        "tr '\\0' ' ' < /proc/1/cmdline | head -c 60; echo; "
        "echo forged > /proc/1/fd/2 2>&1 || echo write-refused; "
        "kill -9 1 2>&1; kill -TERM 1 2>&1; sleep 0.2; echo still-here; "
        "(sleep 0.1 &) ; sleep 0.5; "
        "for p in /proc/[0-9]*; do grep -l '^State:.*Z' $p/status 2>/dev/null; done; echo reaped")})
    out = probe.output
    assert "python3 -I -S -u -c # sandbox-agent init" in out, out  # PID 1: toolbox_command's
    assert "write-refused" in out, out  # non-dumpable: its fds are out of reach
    assert "still-here" in out and "reaped" in out and "/status" not in out, out  # no zombie
    container.reload()
    assert container.status == "running" and sandbox.is_alive()
    logs = docker_client.api.inspect_container(container.id)["LogPath"]
    assert not logs or not Path(logs).exists() or b"TOOL-OUTPUT" not in Path(logs).read_bytes()


def test_an_idle_toolbox_that_dies_is_seen_and_replaced(sandbox: DockerSandbox,
                                                        docker_client: Any):
    """Its stream stays open (PID 1 lives): PID 1's word on stderr is what tells the host."""
    old = sandbox.runtime.toolbox.pid if sandbox.runtime.toolbox else None
    assert old and sandbox.is_alive()
    in_container(sandbox, docker_client, f"import os; os.kill({old}, 9)")
    deadline = time.monotonic() + 5
    while sandbox.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sandbox.is_alive()
    started = time.monotonic()
    again = sandbox.call("read_file", {"path": "hello.py"})
    assert time.monotonic() - started < 10  # not the host's deadline for a stuck call
    assert not again.ok and "restarted" in again.output  # the call had no result, said so
    assert sandbox.call("read_file", {"path": "hello.py"}).ok
    assert sandbox.runtime.toolbox is not None and sandbox.runtime.toolbox.exec_id  # an exec this time


@pytest.mark.parametrize("owner", ["root", "1234:2345"])
def test_a_stopped_toolbox_is_killed_for_real(project: Path, docker_client: Any, owner: str):
    if owner != "root":
        os.chown(project, 1234, 2345)
    warnings: list[str] = []
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append) as box:
        old = box.runtime.toolbox.pid if box.runtime.toolbox else None
        assert old and alive(box, docker_client, old)
        in_container(box, docker_client, f"import os, signal; os.kill({old}, signal.SIGSTOP)")

        stuck = box.call("read_file", {"path": "hello.py"}, timeout=2)

        assert not stuck.ok and "did not answer within 2s" in stuck.output
        assert not alive(box, docker_client, old)
        assert box.runtime.toolbox and box.runtime.toolbox.pid != old
        assert box.call("read_file", {"path": "hello.py"}).ok
    assert [w for w in warnings if "restarting the toolbox" in w] == [
        "read_file did not answer within 2s; restarting the toolbox"]
    assert not [w for w in warnings if "could not kill" in w], warnings


def test_a_busy_toolbox_dies_with_the_command_it_was_running(sandbox: DockerSandbox,
                                                             docker_client: Any):
    old = sandbox.runtime.toolbox.pid if sandbox.runtime.toolbox else None
    busy = sandbox.call("run_shell_command", {"command": "echo $$ > /tmp/shell.pid; sleep 600",
                                              "timeout_seconds": 600}, timeout=3)
    assert not busy.ok and "did not answer within 3s" in busy.output
    shell_pid = int(in_container(sandbox, docker_client, "print(open('/tmp/shell.pid').read())"))
    assert old and not alive(sandbox, docker_client, old)
    assert not alive(sandbox, docker_client, shell_pid)
    commands = in_container(sandbox, docker_client, (
        "import contextlib, os\nfor p in filter(str.isdigit, os.listdir('/proc')):\n"
        "    with contextlib.suppress(OSError): print(repr(open(f'/proc/{p}/cmdline').read()))"))
    assert "sleep\\x00600" not in commands
    assert "# sandbox-agent init" in commands  # the container's first process (PID 1) stays
    assert sandbox.is_alive()


def test_a_toolbox_that_cannot_be_killed_is_a_warning(project: Path, docker_client: Any):
    os.chown(project, 1234, 2345)
    warnings: list[str] = []
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append) as box:
        container = docker_client.containers.get(box.info.container_id)
        container.exec_run(["sleep", "300"], user="0:0", detach=True)  # another uid's process
        root_sleep = int(in_container(box, docker_client, (
            "import os\nprint(*[p for p in os.listdir('/proc') if p.isdigit() and "
            "os.stat('/proc/' + p).st_uid == 0 and b'300' in open(f'/proc/{p}/cmdline', 'rb')"
            ".read()])")))
        box._recovery.kill_in_container(root_sleep)
    [warning] = warnings
    assert warning.startswith(f"could not kill the stuck toolbox (pid {root_sleep}): exit 1: ")
    assert "Operation not permitted" in warning


def test_a_copy_session_re_attaches_to_its_left_container(project: Path, docker_client: Any):
    config = make_config(project, workspace="copy")
    first = DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader())
    first.start()
    first.call("run_shell_command", {"command": "echo kept > /tmp/marker"})
    container_id = first.info.container_id
    first.detach()  # as if the controller had crashed
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader()) as second:
        assert second.reattached and second.info.container_id == container_id
        assert "kept" in second.call("run_shell_command", {"command": "cat /tmp/marker"}).output
    assert not docker_client.containers.list(all=True, filters={"id": container_id})


def test_a_bind_session_never_re_uses_a_left_container(project: Path, docker_client: Any):
    """Red-team round 14: a protected directory the person replaced on the host after the
    container was made (`rm -rf .git && git init`) is no longer mounted in it, though the
    paths, and so the spec, are the same. Only a new container mounts the tree as it is (the
    dead run's checks run first; whether they see the replacement depends on the new `.git`
    getting another inode than the old one)."""
    config = make_config(project)
    first = DockerSandbox(config, client=docker_client)
    first.start()
    first.call("run_shell_command", {"command": "echo kept > /tmp/marker"})
    container_id = first.info.container_id
    first.detach()  # as if the controller had crashed
    shutil.rmtree(project / ".git")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    warnings: list[str] = []
    with DockerSandbox(config, client=docker_client, warn=warnings.append) as second:
        assert not second.reattached and second.info.container_id != container_id
        shown = second.call("run_shell_command", {"command": "cat /tmp/marker; "
                                                  "mkdir -p .git/hooks && touch .git/hooks/x"})
        assert "kept" not in shown.output, shown.output
    assert not (project / ".git" / "hooks" / "x").exists()  # git on the host finds nothing
    assert not docker_client.containers.list(all=True, filters={"id": container_id})
    assert any("ended without its controller" in w for w in warnings), warnings


@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_what_a_dead_run_left_is_gone_before_a_toolbox_starts_again(project: Path,
                                                                     docker_client: Any,
                                                                     workspace: str):
    """Red-team round 13: a controller killed mid-command left a process of the tools' uid in
    the container; on --resume it read the new toolbox's key from its stdin (before the
    toolbox was non-dumpable) and answered in its place. What is left is killed first now."""
    for path in [project, *project.rglob("*")]:
        os.lchown(path, 1000, 1000)
    config = make_config(project, workspace=workspace)
    first = DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader())
    first.start()
    container = docker_client.containers.get(first.info.container_id)
    container.exec_run(["sleep", "1000"], user="1000:1000", detach=True)  # a survivor
    first.detach()  # as if the controller had been killed
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader()) as second:
        # a copy re-attaches (its changes are there); a bind session gets a new container
        assert second.reattached == (workspace == "copy")
        assert (second.info.container_id == container.id) == (workspace == "copy")
        left = second.call("run_shell_command", {"command": "cat /proc/[0-9]*/cmdline | "
                                                            "tr '\\0' ' '"}).output
        assert "sleep 1000" not in left, left


def test_any_image_with_python3_works(project: Path, docker_client: Any):
    try:
        docker_client.images.get(OFFLINE_BASE_IMAGE)
    except Exception:
        pytest.skip(f"{OFFLINE_BASE_IMAGE} not built here (registry machines use python:3.12-slim)")
    with DockerSandbox(make_config(project, image=OFFLINE_BASE_IMAGE), client=docker_client) as box:
        assert box.call("read_file", {"path": "hello.py"}).ok


def test_missing_image_is_a_clear_error(project: Path, docker_client: Any):
    box = DockerSandbox(make_config(project, image="sandbox-agent-missing:nope"), client=docker_client)
    with pytest.raises(ImageNotFoundError) as info:
        box.start()
    assert "image build" in str(info.value)


def test_unreachable_engine_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailableError) as info:
        connect(timeout=5)
    assert "make engine" in str(info.value)


def test_a_gone_image_falls_back_with_a_warning(project: Path, docker_client: Any):
    gone = "sha256:" + "0" * 64
    warnings: list[str] = []
    config = make_config(project, image=gone, fallback_image=IMAGE)
    with DockerSandbox(config, client=docker_client, warn=warnings.append) as box:
        assert box.info.image == IMAGE
        assert box.call("read_file", {"path": "hello.py"}).ok
    assert warnings == [f"image {gone[:19]} is gone; using {IMAGE}"]
    with pytest.raises(ImageNotFoundError):  # without a fallback it stays an error
        DockerSandbox(make_config(project, image=gone), client=docker_client).start()


def test_a_dead_bind_runs_checks_run_before_the_next_run_looks_at_the_tree(project: Path,
                                                                          docker_client: Any):
    """Red-team round 14: a repository the sandbox made was left in place when its controller
    died (no end-of-session sweep), and the next run took it for the person's: `git status` on
    the host ran its fsmonitor. The dead run's start is on disk; the next run finishes it."""
    for path in [project, *project.rglob("*")]:
        os.lchown(path, 1000, 1000)
    config = make_config(project)
    first = DockerSandbox(config, client=docker_client)
    first.start()
    container = docker_client.containers.get(first.info.container_id)
    planted = container.exec_run(["sh", "-c", "mkdir -p sub/.git/hooks sub/.git/objects "
                                  "sub/.git/refs && echo 'ref: refs/heads/x' > sub/.git/HEAD"],
                                 user="1000:1000", workdir="/workspace")
    assert planted.exit_code == 0, planted.output
    first.detach()  # the controller dies: no end-of-session checks
    assert (project / "sub" / ".git").is_dir()
    warnings: list[str] = []
    other = make_config(project)  # another session on the same root
    with DockerSandbox(other, client=docker_client, warn=warnings.append):
        assert not (project / "sub" / ".git").exists(), warnings
        assert any("ended without its controller" in w for w in warnings), warnings
        assert any("sub/.git" in w for w in warnings), warnings
    assert not docker_client.containers.list(all=True, filters={"id": container.id})


def _a_dead_run_that_planted_a_repository(project: Path, docker_client: Any) -> Any:
    """A bind session's sandbox plants `sub/.git`, then its controller dies (no checks ran)."""
    for path in [project, *project.rglob("*")]:
        os.lchown(path, 1000, 1000)
    first = DockerSandbox(make_config(project), client=docker_client)
    first.start()
    container = docker_client.containers.get(first.info.container_id)
    planted = container.exec_run(["sh", "-c", "mkdir -p sub/.git/objects sub/.git/refs && "
                                  "echo 'ref: refs/heads/x' > sub/.git/HEAD"],
                                 user="1000:1000", workdir="/workspace")
    assert planted.exit_code == 0, planted.output
    first.detach()
    return container


def test_gc_runs_the_checks_a_dead_bind_run_skipped(project: Path, docker_client: Any):
    from executor.sandbox.gc import gc

    container = _a_dead_run_that_planted_a_repository(project, docker_client)
    result = gc(docker_client, root=str(project))
    assert result.removed == [container.name]
    assert not (project / "sub" / ".git").exists()
    assert any("sub/.git" in note for note in result.notes), result.notes


def test_gc_runs_the_checks_of_a_dead_bind_run_whose_container_is_gone(
        project: Path, docker_client: Any):
    """Red-team round 21: `gc` looked only at containers, so after a `docker rm` of a killed
    controller's container the run's checks never ran and a planted repository stayed live."""
    from executor.sandbox.gc import gc

    container = _a_dead_run_that_planted_a_repository(project, docker_client)
    container.remove(force=True)  # and someone removes its container by hand
    result = gc(docker_client, root=str(project))
    assert result.removed == []
    assert not (project / "sub" / ".git").exists()
    assert any("sub/.git" in note for note in result.notes), result.notes


def test_a_repository_made_past_the_walks_cap_is_disabled_after_its_command(project: Path,
                                                                           docker_client: Any):
    """Red-team round 14: in a tree of more than 200,000 entries the walk after a command
    stops at its cap, so a `.git` made past it stayed until the session's end, or for good if
    the controller died first. Past the cap, every `.git` that is not one of the start's
    read-only mounts is the command's."""
    many = project / "node_modules"
    many.mkdir()
    for i in range(205_000):
        os.close(os.open(many / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    (project / "zz").mkdir()  # walked last
    with DockerSandbox(make_config(project), client=docker_client) as box:
        done = box.call("run_shell_command", {"command": "git init -q zz/deep && "
                                              "mkdir -p zz/bare/objects zz/bare/refs && "
                                              "echo 'ref: refs/heads/x' > zz/bare/HEAD"})
        assert "zz/deep/.git was disabled" in done.output, done.output
        assert not (project / "zz" / "deep" / ".git").exists()
        assert not (project / "zz" / "bare" / "HEAD").exists()
        assert (project / ".git").is_dir()  # the person's own is left alone
