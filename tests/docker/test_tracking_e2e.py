"""What a shell command does to the project, through the real CLI and a real container.

Files a command creates, changes or deletes are reported (and reach the audit trail), a git
repository made inside the sandbox is disabled before git on the host can run its hooks, and a
command filling the disk is stopped while the session goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from executor.sandbox.docker import DockerSandbox
from tests.docker.cli_support import ask, assert_ok, explain, run_cli, tool_exchanges
from tests.docker.conftest import make_config
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker


def shell_calls(server: ModelServer, *commands: str) -> None:
    """Script one run_shell_command per model turn, then a final answer."""
    for command in commands:
        server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    server.reply("done")


def results(server: ModelServer) -> list[str]:
    """The tool results the model received, in order."""
    return [result for _, _, result in tool_exchanges(server.last_chat)]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_disk_filling_command_is_stopped_and_the_session_goes_on(project: Path,
                                                                   model_server: ModelServer):
    shell_calls(model_server,
                "head -c 200M /dev/zero > big.bin",
                "for i in 1 2 3 4 5 6; do head -c 20M /dev/zero > f$i; sleep 0.3; done",
                "rm -f f*; echo still-working")

    done = ask(project, model_server, "ollama", "--yes", "--disk-budget", "50m")

    assert_ok(done, "done")
    one_file, many_files, after = results(model_server)
    assert "disk budget" in one_file and one_file.startswith(("exit_code: 153", "disk budget")), \
        one_file
    assert (project / "big.bin").stat().st_size <= 60_000_000
    assert many_files.startswith("disk budget exceeded: the project grew by "), many_files
    assert "(budget 50.0 MB); the command was killed" in many_files
    assert len(list(project.glob("f*"))) == 0
    assert after.startswith("exit_code: 0") and "still-working" in after, after


def test_a_repository_made_in_the_sandbox_is_disabled(project: Path, model_server: ModelServer):
    shell_calls(model_server, "git init -q sub && echo '#!/bin/sh' > sub/.git/hooks/pre-commit "
                              "&& chmod +x sub/.git/hooks/pre-commit && echo made")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "done")
    names = os.listdir(project / "sub")
    assert ".git" not in names, names
    [moved] = [name for name in names if name.startswith(".git.quarantined-")]
    assert (project / "sub" / moved / "hooks" / "pre-commit").read_text() == "#!/bin/sh\n"
    [result] = results(model_server)
    assert "made" in result
    assert ("new git repositories inside the project are not allowed in the sandbox; sub/.git "
            f"was disabled (renamed to sub/{moved})") in result
    top = subprocess.run(["git", "-C", str(project / "sub"), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert top == str(project)  # git on the host sees no repository in sub/


def audit_records(root: Path) -> list[dict[str, Any]]:
    """The root's audit trail, read through the CLI."""
    exported = run_cli("audit", "export", "--root", root, "--format", "jsonl")
    assert exported.returncode == 0, explain(exported)
    return [json.loads(line) for line in exported.stdout.splitlines()]


def test_shell_changes_reach_the_model_and_the_audit_trail(project: Path,
                                                           model_server: ModelServer):
    shell_calls(model_server, "echo made > made.txt && printf 'x' >> hello.py && rm -r src")

    assert_ok(ask(project, model_server, "ollama", "--yes"), "done")

    [result] = results(model_server)
    assert result.startswith("exit_code: 0\nfiles changed: 1 created, 1 modified, 2 deleted")
    records = audit_records(project)
    [record] = [r for r in records if r["kind"] == "tool_result" and r["tool"] == "run_shell_command"]
    changes = {r["path"]: r for r in records if r["kind"] == "write"}
    assert set(changes) == {"made.txt", "hello.py", "src", "src/app.py"}
    assert {(r["tool"], r["source"], r["call_id"]) for r in changes.values()} == {
        ("run_shell_command", "command", record["call_id"])}
    assert changes["made.txt"]["change"] == "created"
    assert changes["made.txt"]["sha256_after"] == sha256(b"made\n")
    assert changes["hello.py"]["change"] == "modified"
    assert changes["hello.py"]["sha256_before"] == sha256(b'print("hello")\n')
    assert changes["hello.py"]["sha256_after"] == sha256(b'print("hello")\nx')
    assert changes["src/app.py"]["change"] == "deleted"
    assert record["meta"]["changes_total"] == 4


def test_the_budget_is_each_files_size_limit_in_the_container(project: Path, docker_client: Any):
    config = make_config(project, disk_budget=8 * 1024 * 1024)
    with DockerSandbox(config, client=docker_client) as box:
        host = docker_client.api.inspect_container(box.info.container_id)["HostConfig"]
        fsize = [u for u in host["Ulimits"] if u["Name"] == "fsize"]  # nofile, nproc beside it
        assert fsize == [{"Name": "fsize", "Soft": 8 << 20, "Hard": 8 << 20}]
        # /tmp is outside the project: only the file size limit can stop this one
        in_tmp = box.call("run_shell_command", {"command": "head -c 9M /dev/zero > /tmp/x.bin"})
        result = box.call("run_shell_command", {"command": "head -c 9M /dev/zero > x.bin"})
    assert not in_tmp.ok
    assert in_tmp.output.startswith("exit_code: 153 (file size limit exceeded (the disk budget))")
    assert not result.ok
    # In the project the disk watch may see the 8 MiB before the shell's exit is read: either
    # report is true, and the file stops at the limit.
    assert result.output.startswith((
        "exit_code: 153 (file size limit exceeded (the disk budget))",
        "disk budget exceeded: the project grew by 8.0 MB (budget 8.0 MB)")), result.output
    assert (project / "x.bin").stat().st_size == 8 << 20


def test_a_repository_made_on_the_host_is_mounted_read_only_before_the_next_command(
        project: Path, docker_client: Any):
    warnings: list[str] = []
    with DockerSandbox(make_config(project), client=docker_client, warn=warnings.append) as box:
        first = box.info.container_id
        assert box.call("run_shell_command", {"command": "true"}).ok  # the project's .git is fine
        subprocess.run(["git", "init", "-q", str(project / "sub")], check=True)
        result = box.call("run_shell_command", {"command": "touch ran; touch sub/.git/x"})
        assert box.info.container_id != first  # a new container, with sub/.git read-only
    assert "Read-only file system" in result.output and (project / "ran").exists()
    assert "remount_needed" not in result.meta and not (project / "sub" / ".git" / "x").exists()
    assert any("sub/.git" in w and "read-only" in w for w in warnings), warnings


def test_set_id_bits_never_stay_on_a_file_in_the_project(project: Path, docker_client: Any):
    with DockerSandbox(make_config(project), client=docker_client) as box:
        result = box.call("run_shell_command", {"command": "cp /bin/true tool; chmod 4755 tool"})
    assert not (project / "tool").stat().st_mode & 0o6000  # removed, or refused by the kernel
    if result.meta.get("setid_cleared"):
        assert result.meta["setid_cleared"][0]["path"] == "tool"
        assert "removed set-uid bit from ./tool" in result.output


def test_a_directory_made_unreadable_still_shows_what_it_holds(project: Path, docker_client: Any):
    """In the container even the owner (root in CI, without capabilities) cannot list a 000
    directory: the toolbox opens it for its walk, so nothing hides from the audit."""
    with DockerSandbox(make_config(project), client=docker_client) as box:
        made = box.call("run_shell_command", {
            "command": "mkdir -p d/e && echo x > d/e/install.sh && chmod 000 d/e d"})
        hidden = box.call("run_shell_command", {"command": "true"})
    assert {c["path"] for c in made.meta["changes"]} == {"d", "d/e", "d/e/install.sh"}
    assert made.meta["changes_incomplete"] is False and hidden.meta["changes"] == []
    assert (project / "d").stat().st_mode & 0o777 == 0
