"""DESIGN.md's security invariants 1-7, each shown against a real container."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.config import default_cpus
from executor.errors import ConfigError, SandboxError, ToolboxError
from executor.sandbox import seccomp
from executor.sandbox.config import GVISOR_PIDS_FACTOR
from executor.sandbox.docker import DockerSandbox
from executor.sandbox.fifos import channel_dir as channel_of
from executor.sandbox.gc import gc
from executor.sandbox.probes.lab import listener
from executor.sandbox.signals import Signals
from executor.toolbox.wire import signals_of
from executor.workspace.copyload import ArchiveLoader
from tests.conftest import Engine
from tests.docker.conftest import SECRET, Observed, make_config

pytestmark = [pytest.mark.docker, pytest.mark.engines]


def shell(box: DockerSandbox, command: str, timeout: int = 20) -> Any:
    """Run a shell command in the sandbox and return the result."""
    return box.call("run_shell_command", {"command": command, "timeout_seconds": timeout})


def tree_digest(root: Path) -> str:
    """A hash over every path, mode and byte under `root` (.git included).

    The host's own state dir is left out: the controller creates it before the container starts.
    """
    entries: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) != root / ".sandbox-agent"]
        entries += [Path(dirpath, name) for name in dirnames + filenames]
    digest = hashlib.sha256()
    for path in sorted(entries):
        stat = path.lstat()
        digest.update(f"{path.relative_to(root)}|{stat.st_mode}|".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


# -- 1. nothing outside the root -------------------------------------------------------------


@pytest.mark.parametrize("path", ["../secret.txt", "../../secret.txt", "/etc/passwd", "SECRET_ABS"])
def test_paths_outside_the_root_are_refused(observed: Observed, path: str):
    sandbox, project = observed
    if path == "SECRET_ABS":
        path = str(project.parent / "secret.txt")
    for tool, args in [("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
                       ("list_files", {"path": path}), ("search_files", {"pattern": "SECRET",
                                                                           "path": path})]:
        result = sandbox.call(tool, args)
        assert not result.ok, (tool, path, result.output)
        assert "outside the project root" in result.output
        assert SECRET not in result.output
    assert (project.parent / "secret.txt").read_text() == SECRET + "\n"


def test_symlinks_resolve_inside_the_container(sandbox: DockerSandbox, project: Path):
    (project / "link-rel").symlink_to("../secret.txt")
    (project / "link-abs").symlink_to(project.parent / "secret.txt")
    (project / "link-dir").symlink_to(project.parent)
    for path in ["link-rel", "link-abs", "link-dir/secret.txt"]:
        result = sandbox.call("read_file", {"path": path})
        assert not result.ok and "outside the project root" in result.output, result.output
    # Even a shell that follows the links itself sees the container's filesystem, not the host's.
    result = shell(sandbox, "cat link-rel link-abs link-dir/secret.txt; cat ../secret.txt; "
                            f"cat {project.parent}/secret.txt; "
                            "grep -r -D skip --exclude-dir=proc TOP-SECRET / 2>/dev/null; "
                            "echo grep-exit=$?")
    assert SECRET not in result.output
    assert "grep-exit=" in result.output, result.output  # the walk ended within the timeout
    search = sandbox.call("search_files", {"pattern": "TOP-SECRET"})
    assert SECRET not in search.output


# -- 2. read-only mounts -----------------------------------------------------------------------


def test_read_only_run_cannot_change_a_byte(project: Path, docker_client: Any):
    (project / "data.txt").write_text("keep me\n")
    before = tree_digest(project)
    with DockerSandbox(make_config(project, read_only=True), client=docker_client) as box:
        assert box.info.mount_mode == "ro"
        assert not box.call("write_file", {"path": "new.txt", "content": "x"}).ok
        edit = box.call("edit_file", {"path": "data.txt", "old_text": "keep", "new_text": "lose"})
        assert not edit.ok and "read-only" in edit.output
        result = shell(box, "echo x > data.txt; touch new; rm -f hello.py; mkdir d; "
                            "chmod 777 hello.py; mv src moved; git init -q again; "
                            "echo hook > .git/hooks/pre-commit; echo done")
        assert "Read-only file system" in result.output
        assert shell(box, "python3 -c \"open('x.txt','w')\"").meta["exit_code"] != 0
    assert tree_digest(project) == before


# -- 3. no network, no capabilities, limits -----------------------------------------------------


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP server on the host's loopback that records whether anyone connected."""
    with listener() as (port, hits):  # the doctor's probe uses the same server
        yield port
    assert not hits, "something inside the sandbox reached the host's loopback"


def test_no_network(sandbox: DockerSandbox, host_listener: int, docker_client: Any):
    probe = (
        "import socket\n"
        f"for host in ['127.0.0.1', '172.17.0.1', '10.0.2.2', 'host.docker.internal']:\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try:\n"
        f"        s.connect((host, {host_listener})); print('CONNECTED', host)\n"
        "    except Exception as e: print('blocked', host, type(e).__name__)\n"
    )
    sandbox.call("write_file", {"path": "probe.py", "content": probe})
    result = shell(sandbox, "python3 probe.py; ls /sys/class/net")
    assert "CONNECTED" not in result.output
    assert result.output.count("blocked") == 4
    assert "lo" in result.output and "eth0" not in result.output
    attrs = docker_client.api.inspect_container(sandbox.info.container_id)
    assert attrs["HostConfig"]["NetworkMode"] == "none"


# What Podman's inspect lists for CapDrop: its default set, each dropped (Docker says "ALL").
PODMAN_DEFAULT_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                       "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                       "SYS_CHROOT"}


def test_hardening_flags(observed: Observed, docker_client: Any,
                        engine: Engine):
    sandbox, _ = observed
    host = docker_client.api.inspect_container(sandbox.info.container_id)["HostConfig"]
    dropped = PODMAN_DEFAULT_CAPS if engine.name == "podman" else {"ALL"}
    assert set(host["CapDrop"]) == dropped and not host["CapAdd"]  # and CapEff is 0, below
    assert "no-new-privileges" in host["SecurityOpt"]
    [profile] = [o.removeprefix("seccomp=") for o in host["SecurityOpt"] if o.startswith("seccomp=")]
    if engine.name == "podman":  # it takes a path on its host, not the JSON
        profile = Path(profile).read_text()
    assert json.loads(profile) == seccomp.profile()  # ours, not Docker's default
    assert host["ReadonlyRootfs"] is True
    assert host["PidsLimit"] == 256 * (GVISOR_PIDS_FACTOR if engine.runtime == "runsc" else 1)
    assert host.get("Runtime") == {"runsc": "runsc", "podman": "oci"}.get(engine.name, "runc")
    assert host["Memory"] == 512 * 1024**2 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == int(default_cpus() * 1e9) > 0
    assert "size=64m" in host["Tmpfs"]["/tmp"]
    assert host["Privileged"] is False
    status = shell(sandbox, "grep -E '^(CapEff|CapPrm|CapBnd|Seccomp)' /proc/self/status; "
                            "python3 -c 'import ctypes; print(\"nnp\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'")
    for line in status.output.splitlines()[1:]:
        if line.startswith("Cap"):
            assert line.split()[-1] == "0000000000000000", line
    # 2: a filter (gVisor's /proc has no NoNewPrivs line: prctl(PR_GET_NO_NEW_PRIVS) asks)
    assert "nnp 1" in status.output and "Seccomp:\t2" in status.output


@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_the_toolbox_channel_gives_a_command_nothing_to_open(project: Path, docker_client: Any,
                                                             engine: Engine, workspace: str):
    """Tool calls go over two FIFOs the host makes in a directory of its own, mounted
    read-only; once the toolbox has them their names are gone, so a command finds nothing to
    open or replace there. gVisor opens no host FIFO: the engine's stream carries the calls."""
    for path in [project, *project.rglob("*")]:  # tools of uid 0 would own a copy's top
        os.lchown(path, 1000, 1000)
    config = make_config(project, workspace=workspace)
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader()) as box:
        toolbox = box.runtime.toolbox
        assert toolbox is not None
        if engine.runtime == "runsc":
            assert toolbox.ready["channel"] == "stdio"
            assert shell(box, "ls -A /run/sandbox-agent || echo none").output.count("none")
            return
        assert toolbox.ready["channel"] == "fifo", toolbox.ready
        channel_dir = channel_of(box.deployment.lock_path.parent, box.deployment.name)
        assert channel_dir.is_dir() and not os.listdir(channel_dir)
        result = shell(box, "ls -A /run/sandbox-agent; echo listed; "
                            "touch /run/sandbox-agent/in 2>&1; mkdir /run/sandbox-agent/x 2>&1; "
                            "ln -s /workspace /run/sandbox-agent/out 2>&1; echo done")
        assert result.output.split("stdout:\n", 1)[1].startswith("listed"), result.output
        assert result.output.count("Read-only file system") == 3, result.output
        assert not os.listdir(channel_dir)
        assert box.call("read_file", {"path": "hello.py"}).ok  # and the calls still go
    assert not channel_dir.exists()  # gone with the container


def test_root_filesystem_read_only_and_tmp_capped(sandbox: DockerSandbox):
    result = shell(sandbox, "touch /etc/x /usr/x 2>&1; echo ok > /tmp/ok && cat /tmp/ok; "
                            "head -c 80M /dev/zero > /tmp/big; echo rc=$?")
    assert result.output.count("Read-only file system") == 2
    assert "ok" in result.output
    assert "No space left on device" in result.output and "rc=1" in result.output


def test_runs_as_the_owner_of_the_root_without_capabilities(project: Path, docker_client: Any):
    os.chown(project, 1234, 2345)
    with DockerSandbox(make_config(project), client=docker_client) as box:
        assert box.info.user == "1234:2345"
        assert shell(box, "id -u; id -g").output.split()[-2:] == ["1234", "2345"]
        assert box.call("write_file", {"path": "made.txt", "content": "mine"}).ok
    stat = (project / "made.txt").stat()
    assert (stat.st_uid, stat.st_gid) == (1234, 2345)


def test_uid_zero_still_has_no_capabilities(sandbox: DockerSandbox, project: Path):
    assert project.stat().st_uid == os.getuid()
    result = shell(sandbox, "id -u; chown 1:1 hello.py; echo rc=$?; "
                            "mount -t tmpfs x /mnt; echo mount=$?")
    assert "Operation not permitted" in result.output
    assert "mount=" in result.output and "mount=0" not in result.output


# -- 4. environment ---------------------------------------------------------------------------


def test_host_environment_does_not_enter(project: Path, docker_client: Any, monkeypatch):
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "host-only-value-123")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-the-container-456")
    monkeypatch.setenv("ALLOWED_VAR", "allowed-789")
    from executor.sandbox.environment import sandbox_environment

    env = sandbox_environment(["ALLOWED_VAR", "OPENAI_API_KEY"], secret_names=["OPENAI_API_KEY"])
    with DockerSandbox(make_config(project, env=env), client=docker_client) as box:
        result = shell(box, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert "host-only-value-123" not in result.output
    assert "sk-never-in-the-container-456" not in result.output
    assert "ALLOWED_VAR=allowed-789" in result.output


# -- 5. state dir and .git --------------------------------------------------------------------


def test_state_dir_hidden_and_git_read_only(project: Path, docker_client: Any):
    state = project / ".sandbox-agent"
    state.mkdir()
    (state / "audit").mkdir()
    (state / "audit" / "2026-01-01.ndjson").write_text('{"seq": 0}\n')
    hook = project / ".git" / "hooks" / "pre-commit"
    before = tree_digest(project)
    with DockerSandbox(make_config(project), client=docker_client) as box:
        for tool, args in [("read_file", {"path": ".sandbox-agent/audit/2026-01-01.ndjson"}),
                           ("list_files", {"path": ".sandbox-agent"}),
                           ("write_file", {"path": ".sandbox-agent/audit/x", "content": "x"}),
                           ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}),
                           ("edit_file", {"path": ".git/config", "old_text": "[core]",
                                          "new_text": "[core]\n\thooksPath = /tmp"})]:
            result = box.call(tool, args)
            assert not result.ok, (tool, result.output)
        listing = shell(box, "ls -A .sandbox-agent; cat .sandbox-agent/audit/*; "
                             "echo x > .sandbox-agent/forged; echo '#!/bin/sh' > .git/hooks/pre-commit;"
                             " git config core.hooksPath /tmp; echo end")
        assert '"seq"' not in listing.output
        assert listing.output.count("Read-only file system") >= 2
        assert box.call("write_file", {"path": "ok.txt", "content": "fine"}).ok
    (project / "ok.txt").unlink()
    assert not hook.exists()
    assert tree_digest(project) == before


def test_nested_git_repositories_are_read_only_too(project: Path, docker_client: Any):
    nested = project / "vendor" / "lib"
    nested.mkdir(parents=True)
    os.system(f"git init -q {nested}")
    with DockerSandbox(make_config(project), client=docker_client) as box:
        result = shell(box, "echo x > vendor/lib/.git/hooks/post-checkout; echo rc=$?")
    assert "Read-only file system" in result.output
    assert not (nested / ".git" / "hooks" / "post-checkout").exists()


def test_git_writes_allowed_when_asked(project: Path, docker_client: Any):
    with DockerSandbox(make_config(project, allow_git_writes=True), client=docker_client) as box:
        result = shell(box, "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x "
                            "&& git log --oneline | wc -l")
    assert result.ok, result.output
    assert "1" in result.output


# -- 6. runaway commands ----------------------------------------------------------------------


RUNAWAYS = {
    "fork bomb": ("bomb() { bomb | bomb & }; bomb", 5),
    "bash fork bomb": ("bash -c ':(){ :|:& };:'", 5),
    "python fork loop": ("python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'",
                         5),
    "memory bomb": ("python3 -c \"x = []\nwhile True: x.append(' ' * 10**7)\"", 30),
    "endless output": ("yes 'all work and no play'", 20),
    "sleep": ("sleep 10000", 2),
    "setsid escape": ("setsid sleep 10000 & sleep 10000", 2),
}


@pytest.mark.engines("runc", "podman")
@pytest.mark.parametrize("name", list(RUNAWAYS))
def test_runaway_commands_end_cleanly(sandbox: DockerSandbox, name: str):
    command, timeout = RUNAWAYS[name]
    result = shell(sandbox, command, timeout=timeout)
    assert not result.ok
    text = result.output.lower()
    assert any(word in text for word in ("timed out", "limit", "killed", "memory")), result.output
    assert len(result.output) < 100_000
    _still_usable(sandbox)


@pytest.mark.engines("runc", "podman")
def test_a_process_that_sheds_the_calls_marks_still_ends_with_it(sandbox: DockerSandbox):
    """`env -i` drops the environment token, setsid the process group, the subshell the parent:
    only the sweep of everything our uid started during the call finds it. It must be on for
    the first toolbox too, which `_INIT` forked (its ppid is 1, not 0 as for an exec)."""
    escape = shell(sandbox, "(env -i setsid sh -c 'sleep 7777 & sleep 1' </dev/null >/dev/null "
                            "2>&1 &); sleep 0.3; echo left")
    assert escape.ok and "left" in escape.output and "killed" in escape.output, escape.output
    after = shell(sandbox, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
    assert "sleep 7777" not in after.output, after.output


ZOMBIE_LEADER = """\
import ctypes, os, threading, time
for fd in (0, 1, 2):
    os.close(fd)
os.setsid()
def work():
    time.sleep(1.5)
    with open("/workspace/late.txt", "w") as f:
        f.write("written after the call")
    time.sleep(3600)
threading.Thread(target=work).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: only the leader ends; /proc/PID/stat says Z
"""


def test_a_process_whose_leader_exited_alone_still_ends_with_the_call(
        sandbox: DockerSandbox, project: Path, engine: Engine):
    """Red-team round 7: a thread-group leader that exits by itself shows `Z` while its other
    threads run on; the sweep skipped every `Z`, so the process outlived its call and wrote to
    the project after the last check, with no record. (gVisor may refuse the thread here.)"""
    (project / "z.py").write_text(ZOMBIE_LEADER)
    escape = shell(sandbox, "cp z.py /tmp/z.py; rm z.py; python3 /tmp/z.py & sleep 0.5; echo left")
    assert escape.ok and "left" in escape.output, escape.output
    assert engine.name == "runsc" or "killed" in escape.output, escape.output
    time.sleep(2.5)
    assert not (project / "late.txt").exists()
    after = shell(sandbox, "cat /proc/[0-9]*/task/*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert "/tmp/z.py" not in after.output, after.output


FORK_HOPPER = base64.b64decode(
    "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAeABAAAAAAABAAAAAAAAAAKgBAAAAAAAAAAAAAEAAOAAB"
    "AEAABAADAAEAAAAFAAAAeAAAAAAAAAB4AEAAAAAAAHgAQAAAAAAAEAEAAAAAAAAQAQAAAAAAAAEA"
    "AAAAAAAAuDkAAAAPBUiFwA+FnAAAALhwAAAADwUx/7gDAAAADwX/x4P/A3LySIPsEOimAAAASYnE"
    "uDkAAAAPBUiFwA+PigAAAHXu6IwAAABMKeBIg/gEcuBIxwQkAgAAAEjHRCQIAAAAAEiJ5zH2uCMA"
    "AAAPBUiNPXsAAAC+AQQAALgCAAAADwWJx0iNNXYAAAC6DgAAALgBAAAADwVIxwQkEA4AAEiJ5zH2"
    "uCMAAAAPBUiD7BBIxwQkAAAAAEjHRCQIgPD6AkiJ5zH2uCMAAAAPBTH/uOcAAAAPBUiD7BC/AQAA"
    "AEiJ5rjkAAAADwVIiwQkSIPEEMMvd29ya3NwYWNlL2EucHkAaG9wcGVkID0gVHJ1ZQoALnNoc3Ry"
    "dGFiAC50ZXh0AC5yb2RhdGEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAALAAAAAQAAAAYAAAAAAAAAeABAAAAAAAB4"
    "AAAAAAAAAPIAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAEQAAAAEAAAACAAAAAAAAAGoB"
    "QAAAAAAAagEAAAAAAAAeAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAEAAAADAAAAAAAA"
    "AAAAAAAAAAAAAAAAAIgBAAAAAAAAGQAAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAA="
)
"""tests/docker/hopper.S, assembled (`as` + `ld -static -nostdlib -s -n`): x86-64 code."""
CLONE_HOPPER = base64.b64decode(
    "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAsABAAAAAAABAAAAAAAAAADACAAAAAAAAAAAAAEAAOAAC"
    "AEAABQAEAAEAAAAFAAAAsAAAAAAAAACwAEAAAAAAALAAQAAAAAAAYQEAAAAAAABhAQAAAAAAAAEA"
    "AAAAAAAAAQAAAAYAAAAAAAAAAAAAAAAgQAAAAAAAACBAAAAAAAAAAAAAAAAAAAAgEAAAAAAAABAA"
    "AAAAAAC4OQAAAA8FSIXAD4XtAAAAuHAAAAAPBTH/uAMAAAAPBf/Hg/8DcvLo+wAAAEiJBR0fAAD/"
    "BSMfAAD3BRkfAAD/AwAAdRLo3QAAAEgrBf8eAABIg/gEc0eLBfseAAD/wCX/AAAAiQXuHgAA/8BI"
    "weAMSI012S4AAEgBxr8AAQAAMdJFMdJFMcC4OAAAAA8FSIXAdKB4njH/uDwAAAAPBUiD7BBIxwQk"
    "AgAAAEjHRCQIAAAAAEiJ5zH2uCMAAAAPBUiNPX0AAAC+AQQAALgCAAAADwWJx0iNNXgAAAC6DgAA"
    "ALgBAAAADwVIxwQkEA4AAEiJ5zH2uCMAAAAPBeshSIPsEEjHBCQAAAAASMdEJAiA8PoCSInnMfa4"
    "IwAAAA8FMf+45wAAAA8FSIPsEL8BAAAASInmuOQAAAAPBUiLBCRIg8QQwy93b3Jrc3BhY2UvYS5w"
    "eQBob3BwZWQgPSBUcnVlCgAuc2hzdHJ0YWIALnRleHQALnJvZGF0YQAuYnNzAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACwAA"
    "AAEAAAAGAAAAAAAAALAAQAAAAAAAsAAAAAAAAABDAQAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAA"
    "AAAAABEAAAABAAAAAgAAAAAAAADzAUAAAAAAAPMBAAAAAAAAHgAAAAAAAAAAAAAAAAAAAAEAAAAA"
    "AAAAAAAAAAAAAAAZAAAACAAAAAMAAAAAAAAAACBAAAAAAAAAEAAAAAAAAAAgEAAAAAAAAAAAAAAA"
    "AAAAEAAAAAAAAAAAAAAAAAAAAQAAAAMAAAAAAAAAAAAAAAAAAAAAAAAAEQIAAAAAAAAeAAAAAAAA"
    "AAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAA=="
)
"""tests/docker/clonehop.S, assembled the same way: each generation a clone(CLONE_VM)."""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the hoppers are x86-64 machine code")
@pytest.mark.parametrize("hopper", ["fork", "clone"])
def test_a_hopper_ends_with_its_call(sandbox: DockerSandbox, project: Path, hopper: str,
                                     engine: Engine, request: pytest.FixtureRequest):
    """Red-team round 8: a process that forks (or clones) and exits in a loop is gone from
    /proc before the sweep reads its entry, so listing processes never caught it; it wrote to
    the project after the last call, with no record. The sweep's kill(-1) reaches it in one
    kernel pass (runc, Podman); gVisor's misses a clone(CLONE_VM) generation born during the
    pass, so kill(-1) is repeated while /proc lists anything of ours."""
    if engine.name == "runsc":  # seen 2 runs in 4 on a quiet machine: docs/SECURITY.md
        request.applymarker(pytest.mark.xfail(strict=False, reason=(
            "known limit under gVisor: a fast hopper now and then outlives the repeated kill(-1)")))
    (project / "a.py").write_text("x = 1\n")
    (project / "hop").write_bytes(FORK_HOPPER if hopper == "fork" else CLONE_HOPPER)
    escape = shell(sandbox, "chmod +x hop; ./hop; rm hop; echo started")
    # the hopper started; on a busy machine it can outrun the sweep to the process limit,
    # and then the call says so (everything it started was killed): both end it with the call
    assert "started" in escape.output and (escape.ok or "process limit hit" in escape.output), \
        escape.output
    time.sleep(9)  # it hops for 3 to 4 s, then writes 2 s later
    assert (project / "a.py").read_text() == "x = 1\n"
    after = shell(sandbox, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert "./hop" not in after.output, after.output


PY_HOPPER = """\
import os, time
os.setsid()
end = time.time() + 20
while time.time() < end:
    if os.fork():
        os._exit(0)
    for name in ("in", "out"):
        try:
            os.open("/run/sandbox-agent/" + name, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        with open("/workspace/grabbed.txt", "a") as f:
            f.write(name + "\\n")
"""


@pytest.mark.engines("runc", "podman")
def test_a_hopper_does_not_outlive_a_toolbox_restart(sandbox: DockerSandbox, project: Path):
    """Red-team round 12: hoppers started in the background, then the toolbox killed by its
    own command; the restart's kill script listed /proc once, the hoppers outlived it and
    opened the next toolbox's FIFOs before their names were gone. It now repeats kill(-1)."""
    (project / "h.py").write_text(PY_HOPPER)
    (project / "a.txt").write_text("a\n")
    killed = shell(sandbox, "cp h.py /tmp/h.py; rm h.py; for i in 1 2 3 4 5; do "
                            "python3 /tmp/h.py </dev/null >/dev/null 2>&1 & done; sleep 1; "
                            "kill -9 $PPID")
    assert killed.meta.get("toolbox_restarted"), killed.output
    for _ in range(5):
        assert sandbox.call("read_file", {"path": "a.txt"}).ok
    time.sleep(1)
    assert not (project / "grabbed.txt").exists(), (project / "grabbed.txt").read_text()
    after = shell(sandbox, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert "/tmp/h.py" not in after.output, after.output


KILL_SCRIPT_STOPPER = """\
import os, signal, time
os.setsid()
seen, end = set(os.listdir("/proc")), time.time() + 60
while time.time() < end:
    for p in os.listdir("/proc"):
        if p.isdigit() and p not in seen:
            try:
                cmd = open("/proc/" + p + "/cmdline", "rb").read()
            except OSError:
                continue
            if cmd and b"runc" not in cmd:
                seen.add(p)
                if b"Kills a stuck toolbox" in cmd:  # the host's kill script (boot/kill.py)
                    os.kill(int(p), signal.SIGSTOP)
    time.sleep(0.0005)
"""


@pytest.fixture
def kill_wait(monkeypatch: pytest.MonkeyPatch) -> float:
    """The host's bound on the kill script, cut from 15 s: what a paused script costs is
    the point, not its length (8 s still outlasts a script that runs: 5 s, then 2 s)."""
    from executor.sandbox import runtime

    monkeypatch.setattr(runtime, "_KILL_TIMEOUT", 8.0)
    return 8.0


@pytest.mark.engines("runc", "podman")
@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_a_kill_script_stopped_by_a_command_does_not_hang_the_host(project: Path,
                                                                   docker_client: Any,
                                                                   workspace: str,
                                                                   kill_wait: float):
    """Red-team round 13: a process of the tools' uid SIGSTOPped the kill script the host runs
    when a toolbox must be replaced, and the host waited on it for ever. It waits 15 s now
    (`kill_wait` here);
    then a bind session gets a new container. A copy session ends: a new toolbox beside the
    survivor could be paused and answered for (red-team round 17)."""
    for path in [project, *project.rglob("*")]:  # tools of uid 0 would own a copy's top
        os.lchown(path, 1000, 1000)
    (project / "st.py").write_text(KILL_SCRIPT_STOPPER)
    warnings: list[str] = []
    config = make_config(project, workspace=workspace)
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader(),
                       warn=warnings.append) as box:
        started = time.monotonic()
        stopper = "python3 st.py </dev/null >/dev/null 2>&1 & sleep 0.5; kill -9 $PPID"
        if workspace == "copy":
            with pytest.raises(ToolboxError, match="could not be stopped; the copy session"):
                shell(box, stopper)
            assert box.runtime.toolbox is None  # none started beside the survivor
        else:
            killed = shell(box, stopper)
            assert killed.meta.get("toolbox_restarted"), killed.output
            assert box.call("read_file", {"path": "hello.py"}).ok
            assert box.runtime.toolbox is not None and box.runtime.toolbox.ready["channel"] == "fifo"
        assert time.monotonic() - started < 60
        assert any(f"did not finish in {kill_wait:.0f} s" in w for w in warnings), warnings


@pytest.mark.engines("runc", "podman")
@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_a_ctrl_c_during_a_paused_kill_still_counts_it_failed(project: Path, docker_client: Any,
                                                              workspace: str, kill_wait: float):
    """Red-team round 18: Ctrl-C stops a call, the kill script is paused by the command, and a
    second Ctrl-C cuts the 15 s wait short; the next request started a toolbox in the same
    container, beside the process that paused it (which then took the toolbox's key)."""
    for path in [project, *project.rglob("*")]:
        os.lchown(path, 1000, 1000)
    (project / "st.py").write_text(KILL_SCRIPT_STOPPER)
    config = make_config(project, workspace=workspace)
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader(),
                       warn=lambda m: None) as box:
        first = box.info.container_id
        for delay in (3.0, 6.0):  # during the command, then during the kill's wait
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            try:
                shell(box, "python3 st.py </dev/null >/dev/null 2>&1 & sleep 30")
            except KeyboardInterrupt:
                time.sleep(8)  # where the second Ctrl-C lands if the kill was not paused
                raise
        if workspace == "copy":
            with pytest.raises(SandboxError, match="could not be stopped"):
                shell(box, "true")
            assert box.runtime.toolbox is None  # none started beside the survivor
        else:
            after = shell(box, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            assert box.info.container_id != first
            assert "st.py" not in after.output, after.output


@pytest.mark.engines("runc", "podman")
def test_a_kill_script_that_says_done_is_checked_against_the_hosts_kernel(
        project: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch):
    """Red-team round 19: a survivor ptraced the kill script into exit 0 and the host believed
    it. Whether PID 1 is alone is now asked of the host's /proc; here the script lies."""
    from executor.sandbox.runtime import Runtime

    warnings: list[str] = []
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append) as box:
        first = box.info.container_id
        monkeypatch.setattr(Runtime, "kill_in_container", lambda *args: True)
        stuck = box.call("run_shell_command", {"command": "sleep 60"}, timeout=3)
        assert not stuck.ok and stuck.meta.get("toolbox_restarted"), stuck.output
        monkeypatch.undo()
        assert any("besides PID 1 still run" in w for w in warnings), warnings
        assert shell(box, "echo fresh").ok and box.info.container_id != first


def _still_usable(sandbox: DockerSandbox) -> None:
    follow_up = shell(sandbox, "echo still-alive; python3 -c \"import os; "
                               "print(sum(p.isdigit() for p in os.listdir('/proc')))\"")
    assert follow_up.ok and "still-alive" in follow_up.output, follow_up.output
    assert int(follow_up.output.split()[-1]) < 10, "processes survived the call"
    assert sandbox.is_alive()


GVISOR_DOWN = ("fork bomb", "memory bomb")
"""Under Debian's runsc (ptrace platform) these take the whole gVisor sandbox down: a fork bomb
exhausts the host pids its stub processes need, a memory bomb gets the sentry OOM-killed."""


@pytest.mark.engines("runsc")
@pytest.mark.parametrize("name", [*GVISOR_DOWN, "endless output", "setsid escape"])
def test_runaway_commands_under_gvisor(project: Path, docker_client: Any, name: str):
    command, timeout = RUNAWAYS[name]
    # A sandbox that went down is noticed when the engine says so (at most at the deadline).
    with DockerSandbox(make_config(project, tool_timeout=5), client=docker_client) as sandbox:
        result = shell(sandbox, command, timeout=min(timeout, 10))
        _check_gvisor_runaway(sandbox, name, result)


def _check_gvisor_runaway(sandbox: DockerSandbox, name: str, result: Any) -> None:
    text = result.output.lower()
    if name in GVISOR_DOWN and "the toolbox was restarted" in text:
        assert not result.ok  # the host's limits held; the sandbox was started again, and said so
    elif name == "fork bomb" and "cannot fork" in text:
        pass  # gVisor's own process limit held first: the bomb burnt out inside it (timing)
    else:
        assert not result.ok
        assert "timed out" in text or "limit" in text, result.output
    _still_usable(sandbox)


# -- 7. labels and gc -------------------------------------------------------------------------


def test_container_labelled_and_removed_at_end(project: Path, docker_client: Any):
    config = make_config(project)
    with DockerSandbox(config, client=docker_client) as box:
        container = docker_client.containers.get(box.info.container_id)
        assert container.labels["sandbox-agent.session"] == config.session_id
        assert container.labels["sandbox-agent.root"] == str(project)
        assert container.name == f"sandbox-agent-{config.session_id}"
        assert gc(docker_client, root=str(project)).removed == []  # in use: left alone
    assert not docker_client.containers.list(all=True, filters={"name": container.name})


def test_gc_removes_containers_of_a_killed_controller(project: Path, docker_client: Any, tmp_path):
    import subprocess
    import sys

    config = make_config(project)
    script = (
        "import os, sys, time\n"
        "from executor.sandbox.docker import DockerSandbox, SandboxConfig\n"
        f"box = DockerSandbox(SandboxConfig.model_validate_json({config.model_dump_json()!r}))\n"
        "box.start(); print('started', flush=True); time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        name = f"sandbox-agent-{config.session_id}"
        assert name in gc(docker_client, root=str(project)).in_use
        child.kill()
        child.wait()
        # kept for --resume (its PID 1 may have ended it already: its controller is gone)
        assert docker_client.containers.get(name).status in ("running", "exited")
        result = gc(docker_client, root=str(project))
        assert name in result.removed
        assert not docker_client.containers.list(all=True, filters={"name": name})
    finally:
        if child.poll() is None:
            child.kill()


def test_secret_never_in_container_metadata(observed: Observed,
                                            docker_client: Any):
    sandbox, _ = observed
    attrs = docker_client.api.inspect_container(sandbox.info.container_id)
    assert SECRET not in json.dumps(attrs)


def test_no_network_still_has_loopback_and_localhost(sandbox: DockerSandbox, docker_client: Any):
    """Created with the engine's networking off (a faster start): lo is up, localhost
    resolves, and nothing else is there."""
    probe = ("import os, socket\n"
             "s = socket.socket(); s.bind(('localhost', 0)); s.listen()\n"
             "c = socket.create_connection(s.getsockname(), timeout=5)\n"
             "print('LOOPBACK', s.getsockname()[0], socket.gethostname())\n"
             "print('NETS', sorted(os.listdir('/sys/class/net')))\n")
    sandbox.call("write_file", {"path": "lo.py", "content": probe})
    result = shell(sandbox, "python3 lo.py")
    assert result.ok, result.output
    assert "LOOPBACK 127.0.0.1 sandbox" in result.output and "NETS ['lo']" in result.output
    host = docker_client.api.inspect_container(sandbox.info.container_id)["HostConfig"]
    assert host["NetworkMode"] == "none"


@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_a_process_that_cannot_be_stopped_costs_the_session_its_container(
        project: Path, docker_client: Any, workspace: str):
    """When the toolbox says a command left a process it could not stop (processes_unstopped,
    signalled as `unstoppable`),
    only a new container ends it for sure: the host makes one (bind). A copy workspace would
    lose its changes with its container, so there the person is told to review the diff."""
    warnings: list[str] = []
    config = make_config(project, workspace=workspace)
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader(),
                       warn=warnings.append) as sandbox:
        assert shell(sandbox, "echo mark > /tmp/mark; echo kept > kept.txt").ok
        old = sandbox.info.container_id
        toolbox = sandbox.runtime.toolbox
        assert toolbox is not None
        real = toolbox.call

        def unstopped(*args: Any) -> dict[str, Any]:
            reply = real(*args)
            reply["meta"]["processes_unstopped"] = True
            reply["signals"] = signals_of(reply["meta"])  # as the toolbox derives them
            return reply

        toolbox.call = unstopped  # type: ignore[method-assign]
        shell(sandbox, "true")
        if workspace == "copy":
            assert sandbox.info.container_id == old
            assert warnings and "review its diff before applying it" in warnings[-1]
            return
        assert sandbox.info.container_id != old
        assert not docker_client.containers.list(all=True, filters={"id": old})
        assert warnings and "could not be stopped; restarting the sandbox" in warnings[-1]
        assert shell(sandbox, "cat kept.txt").output.endswith("kept")
        assert "No such file" in shell(sandbox, "cat /tmp/mark").output


def test_a_replacement_container_that_cannot_be_made_still_gets_the_end_checks(
        project: Path, docker_client: Any):
    """Red-team round 9: replacing the container drops the old one first; when working out the
    new one's protections then failed (a tree the session left can make it fail), stop() found
    no container and skipped the end-of-session checks (new repositories renamed, replaced
    protected files found). They now run right there."""
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n")
    config = make_config(project)
    sandbox = DockerSandbox(config, client=docker_client)
    ran: list[str] = []
    with sandbox:
        real = sandbox._bind.after

        def after() -> None:
            ran.append("after")
            real()

        sandbox._bind.after = after  # type: ignore[method-assign]
        os.link(hook, project / "second-name")  # the walk now refuses the tree
        with pytest.raises(ConfigError, match="has 2 names"):
            sandbox._restarts.react(Signals(unstoppable=True), False)
        assert ran == ["after"]
    assert ran == ["after"]  # not twice


def test_no_replacement_container_while_a_protected_path_is_not_in_its_place(
        project: Path, docker_client: Any):
    """Red-team round 10: a replacement container protected the paths where they were then;
    the original hooks, moved away before, were left writable and could be edited and moved
    back unnoticed (same inode). The session now ends instead, with the end checks."""
    import subprocess

    (project / "tools" / "git" / "hooks").mkdir(parents=True)
    (project / "tools" / "git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nmake check\n")
    subprocess.run(["git", "config", "core.hooksPath", "tools/git/hooks"], cwd=project, check=True)
    warnings: list[str] = []
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append) as box:
        os.rename(project / "tools" / "git", project / "tools" / "git_old")  # as a command could
        with pytest.raises(SandboxError, match="not where they were at the start"):
            box._restarts.react(Signals(remount=("vendor/lib/.git",)), False)
    assert any("tools/git/hooks is protected (git on the host runs it) and is gone" in w
               for w in warnings), warnings


def test_a_tree_too_big_to_walk_still_gets_its_protected_paths_checked(
        project: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch):
    """Red-team round 11: past 2,000,000 entries the end-of-session walk gave up, and with it
    the check of the protected paths, so a hook planted where the hooks path was missing at
    the start stayed. The protected paths are checked first, apart from the walk."""
    import subprocess

    import executor.gitsafety.aftercheck as aftercheck  # (was in sandbox/docker.py)

    subprocess.run(["git", "config", "core.hooksPath", "tools/git/hooks"], cwd=project, check=True)
    warnings: list[str] = []

    def too_big(*args: Any) -> Any:
        raise ConfigError("the project has more than 2,000,000 files")

    monkeypatch.setattr(aftercheck, "sweep", too_big)
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append):
        (project / "tools" / "git" / "hooks").mkdir(parents=True, exist_ok=True)  # as planted
        (project / "tools" / "git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nid\n")
    assert not (project / "tools" / "git" / "hooks").exists()
    assert any("could not check the whole project" in w for w in warnings), warnings
    assert any("tools/git/hooks is protected (git runs it) but was replaced" in w
               for w in warnings), warnings
