"""Retries through the CLI: `SANDBOX_AGENT_MAX_RETRIES=0`, `--max-retries 0` and the user config
file's `max_retries = 0` each mean one attempt; the default retries a 503."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.docker.cli_support import ask, assert_ok, assert_user_error, explain
from tests.fakes.model_server import ModelServer

pytestmark = pytest.mark.docker


def _one_attempt(done: subprocess.CompletedProcess[str], server: ModelServer) -> None:
    assert_user_error(done, 23, "503")
    assert "retrying" not in done.stderr, explain(done)
    assert len(server.chat_requests) == 1 and server.pending == 1, explain(done)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_max_retries_zero_in_the_environment_is_one_attempt(
        project: Path, model_server: ModelServer, provider: str):
    model_server.error(503).reply("never sent")
    done = ask(project, model_server, provider, env={"SANDBOX_AGENT_MAX_RETRIES": "0"})
    _one_attempt(done, model_server)


def test_the_flag_beats_the_environment(project: Path, model_server: ModelServer):
    model_server.error(503).reply("never sent")
    done = ask(project, model_server, "ollama", "--max-retries", "0",
               env={"SANDBOX_AGENT_MAX_RETRIES": "5"})
    _one_attempt(done, model_server)


def test_max_retries_zero_in_the_user_config_is_one_attempt(
        project: Path, model_server: ModelServer, _private_state: Path):
    config = _private_state / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text("max_retries = 0\n")
    model_server.error(503).reply("never sent")
    _one_attempt(ask(project, model_server, "ollama"), model_server)


def test_by_default_a_503_is_retried(project: Path, model_server: ModelServer):
    model_server.error(503).reply("Second time lucky.")
    done = ask(project, model_server, "ollama")
    assert_ok(done, "Second time lucky.")
    assert "retrying" in done.stderr and len(model_server.chat_requests) == 2


def test_a_negative_flag_is_one_usage_error(project: Path, model_server: ModelServer):
    done = ask(project, model_server, "ollama", "--max-retries", "-1")
    assert_user_error(done, 2, "--max-retries")
    assert model_server.chat_requests == []
