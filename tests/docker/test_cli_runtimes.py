"""Choosing the OCI runtime through the CLI: where it goes, what is recorded, and the one clear
line when the engine cannot give it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from executor.state import project_dir
from tests.conftest import PODMAN_HOST, Engine
from tests.docker.cli_support import ask, assert_ok, assert_user_error, explain, run_cli
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker


def sandbox_start(root: Path) -> dict[str, Any]:
    """What the audit log says about the container the run started (run_start, or
    sandbox_start when the container was started lazily, at the first tool call)."""
    lines = [json.loads(line) for day in sorted((project_dir(root) / "audit").glob("*.ndjson"))
             for line in day.read_text().splitlines()]
    [record] = [r for r in lines if r.get("kind") in ("run_start", "sandbox_start")
                and r.get("container_id")]
    return record


@pytest.mark.engines
def test_the_runtime_runs_the_sandbox_and_is_recorded(project: Path, model_server: ModelServer,
                                                      engine: Engine):
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "uname -r"})])
    model_server.reply("Looked.")

    done = ask(project, model_server, "ollama", "--yes")  # the runtime from the environment

    assert_ok(done, "Looked.")
    record = sandbox_start(project)
    expected = {"runc": ("Docker", "runc"), "runsc": ("Docker", "runsc"),
                "podman": ("Podman", "oci")}[engine.name]
    assert (record["engine"], record["runtime"]) == expected, record
    kernel = model_server.last_chat.body["messages"][-1]["content"]
    assert ("4.4.0" in kernel) == (engine.runtime == "runsc"), kernel  # gVisor's own kernel


def test_the_runtime_flag_beats_the_environment(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("list_files", {})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--runtime", "runsc",
               env={"SANDBOX_AGENT_RUNTIME": "runc"})

    assert_ok(done, "Done.")
    assert sandbox_start(project)["runtime"] == "runsc"


def test_the_user_config_file_sets_the_runtime(project: Path, model_server: ModelServer):
    config = Path(os.environ["SANDBOX_AGENT_CONFIG_DIR"])  # this test's own
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text('runtime = "runsc"\n')
    model_server.reply(tool_calls=[Call("list_files", {})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama")

    assert_ok(done, "Done.")
    assert sandbox_start(project)["runtime"] == "runsc"


def test_an_engine_without_the_runtime_is_one_line_with_the_fix(project: Path,
                                                                model_server: ModelServer):
    model_server.reply(tool_calls=[Call("list_files", {})])  # the sandbox starts here

    done = ask(project, model_server, "ollama", "--runtime", "kata")

    line = assert_user_error(done, 16, "no OCI runtime 'kata'", "runc", "runsc")
    assert "make engine" in done.stderr.split(line, 1)[1]


def test_podman_would_ignore_the_runtime_so_it_is_refused(project: Path,
                                                          model_server: ModelServer,
                                                          docker_client: Any):
    model_server.reply(tool_calls=[Call("list_files", {})])

    done = ask(project, model_server, "ollama", "--runtime", "runsc",
               env={"DOCKER_HOST": PODMAN_HOST})

    assert_user_error(done, 16, "Podman's Docker-compatible API ignores the runtime")
    assert "containers.conf" in done.stderr


def test_doctor_lists_the_runtimes_and_checks_the_one_asked_for(model_server: ModelServer):
    # the model `ask` would use is checked too: the stand-in server's
    model = ("--model", model_server.model)
    done = run_cli("doctor", "--runtime", "runsc", "--host", model_server.url, *model)

    assert done.returncode == 0, explain(done)
    listed = re.search(r"runtimes: (.*); default (\S+)\)", done.stdout.splitlines()[0])
    assert listed, explain(done)
    assert {"runc", "runsc"} <= set(listed[1].split(", ")) and listed[2] == "runc"
    assert done.stdout.splitlines()[2].startswith("✓ runtime runsc: offered (/usr/bin/runsc)")
    missing = run_cli("doctor", "--runtime", "kata", "--host", model_server.url, *model)
    assert missing.returncode == 1 and "✗ runtime kata: the engine has no runtime" in missing.stdout
    podman = run_cli("doctor", "--host", model_server.url, *model,
                     env={"DOCKER_HOST": PODMAN_HOST})
    assert podman.returncode == 0, explain(podman)
    assert podman.stdout.startswith("✓ Docker engine: Podman ")


@pytest.mark.parametrize("command", ["review", "improve", "orchestrate"])
def test_every_command_that_starts_a_sandbox_takes_the_runtime(project: Path,
                                                               model_server: ModelServer,
                                                               command: str):
    extra = ["--yes"] if command == "improve" else []
    query = [] if command in ("review", "improve") else ["look around"]
    done = run_cli(command, "--root", project, "--provider", "ollama", "--host",
                   model_server.url, "--model", "m", "--runtime", "kata", *extra, *query)

    line = assert_user_error(done, 16, "no OCI runtime 'kata'")
    assert "make engine" in done.stderr.split(line, 1)[1]
    assert model_server.chat_requests == []  # refused before the model was asked
