"""Any Docker Engine API endpoint: a second dockerd, started here, that cannot see this
machine's project trees (tests/docker/second_engine.py). The image is shipped to it with
`sandbox-agent image copy`; copy sessions run on it; bind sessions fail early, in one line,
suggesting --workspace copy; nothing is left on either engine."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _unavailable
from tests.docker.cli_support import ask, assert_ok, assert_user_error, explain, run_cli
from tests.docker.second_engine import SecondEngine
from tests.fakes.model_server import Call, ModelServer

# one worker for the whole file: its module-scoped engine is started once
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("second-engine")]


def _can_start_an_engine() -> None:
    """A second dockerd needs root, dockerd, unshare and nsenter (CI has them: never skipped)."""
    missing = [tool for tool in ("dockerd", "unshare", "nsenter", "openssl")
               if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        _unavailable(f"a second Docker engine needs root and {', '.join(missing) or 'dockerd'}")


@pytest.fixture(scope="module")
def blind_engine(tmp_path_factory: pytest.TempPathFactory, default_docker_client: Any
                 ) -> Iterator[SecondEngine]:
    """The second engine, blind to every test's directories, with the sandbox image."""
    _can_start_an_engine()
    with SecondEngine(tmp_path_factory.getbasetemp()) as second:
        shipped = run_cli("image", "copy", "--to", second.url, timeout=600)
        assert shipped.returncode == 0, explain(shipped)
        assert f"{second.url} has sandbox-agent" in shipped.stderr, explain(shipped)
        yield second
        pid = second.proc.pid if second.proc else None
    assert pid is not None and not os.path.exists(f"/proc/{pid}/cmdline")  # stopped for real


@pytest.fixture(autouse=True)
def _nothing_left_there(blind_engine: SecondEngine) -> Iterator[None]:
    yield
    assert blind_engine.containers() == []


def on(blind_engine: SecondEngine) -> dict[str, str]:
    return {"DOCKER_HOST": blind_engine.url}


def test_doctor_names_the_engine_and_finds_the_image(blind_engine: SecondEngine):
    done = run_cli("doctor", env=on(blind_engine))
    lines = done.stdout.splitlines()
    assert lines[0].startswith("✓ Docker engine") and f"at {blind_engine.url}" in lines[0], lines
    assert lines[1].startswith("✓ sandbox image"), lines


def test_a_copy_session_runs_on_an_engine_that_cannot_see_the_project(
        blind_engine: SecondEngine, project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                                      "new_text": "a - b"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo made > made.txt"})])
    model_server.reply("done")
    since = int(time.time()) - 1

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy",
               env=on(blind_engine))

    assert_ok(done, "done")
    events = blind_engine.client().events
    created = list(events(since=since, until=int(time.time()) + 1, decode=True,
                          filters={"type": "container", "event": "create"}))
    assert [e["Actor"]["Attributes"]["sandbox-agent.root"] for e in created] == [str(project)]
    assert not (project / "made.txt").exists()
    applied = run_cli("apply", "--root", project, "--yes")
    assert applied.returncode == 0, explain(applied)
    assert (project / "made.txt").read_text() == "made\n"
    assert "a - b" in (project / "src" / "app.py").read_text()


def test_bind_mode_fails_early_when_the_engine_lacks_the_path(
        blind_engine: SecondEngine, project: Path, model_server: ModelServer):
    done = ask(project, model_server, "ollama", "--yes", env=on(blind_engine))

    line = assert_user_error(done, 15, "cannot see this machine's disk", blind_engine.url)
    assert "--workspace copy" in done.stderr.splitlines()[-1], line
    assert model_server.chat_requests == []


def test_bind_mode_detects_another_directory_of_the_same_name(
        blind_engine: SecondEngine, project: Path, model_server: ModelServer):
    blind_engine.make_dir(project / ".git")  # the engine has these paths too: directories of its own

    done = ask(project, model_server, "ollama", "--yes", env=on(blind_engine))

    assert_user_error(done, 15, "mounted another directory", str(project))
    assert model_server.chat_requests == []


@pytest.fixture(scope="module")
def tls_engine(tmp_path_factory: pytest.TempPathFactory, default_docker_client: Any
               ) -> Iterator[SecondEngine]:
    """Another engine, on 127.0.0.1 over TCP with mutual TLS (DOCKER_TLS_VERIFY and
    DOCKER_CERT_PATH name its certificates), with the image shipped over TLS."""
    _can_start_an_engine()
    with SecondEngine(tmp_path_factory.getbasetemp(), tls=True) as second:
        tls_only = {k: v for k, v in second.env.items() if k != "DOCKER_HOST"}
        shipped = run_cli("image", "copy", "--to", second.url, env=tls_only, timeout=600)
        assert shipped.returncode == 0, explain(shipped)
        yield second


def test_a_copy_session_runs_over_tcp_and_tls(tls_engine: SecondEngine, project: Path,
                                              model_server: ModelServer):
    command = "head -c 600000 /dev/zero | tr '\\0' x; echo; echo made > made.txt"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("done")

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy", "--apply",
               env=tls_engine.env)

    assert_ok(done, "done")
    assert (project / "made.txt").read_text() == "made\n"
    assert tls_engine.containers() == []
