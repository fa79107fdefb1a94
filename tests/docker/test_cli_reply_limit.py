"""A model reply past SANDBOX_AGENT_MAX_REPLY_BYTES through the real CLI (red-team F8): one
error line naming the setting, exit 23, no traceback, one request, the server cut off."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docker.cli_support import ask, assert_ok, assert_user_error, explain
from tests.fakes.model_server import ModelServer

pytestmark = pytest.mark.docker

FLOOD = 64 * 1024 * 1024


@pytest.mark.parametrize(("provider", "stream"), [("ollama", "--stream"),
                                                  ("openai", "--no-stream")])
def test_a_reply_past_the_cap_is_one_error_line_and_exit_23(
        project: Path, model_server: ModelServer, provider: str, stream: str) -> None:
    model_server.flood(FLOOD, piece=16 * 1024).reply("never asked for")
    done = ask(project, model_server, provider, stream,
               env={"SANDBOX_AGENT_MAX_REPLY_BYTES": "1m"})
    line = assert_user_error(done, 23, "sent a reply longer than 1 MiB",
                             "SANDBOX_AGENT_MAX_REPLY_BYTES")
    assert "fix: raise SANDBOX_AGENT_MAX_REPLY_BYTES" in done.stderr, explain(done)
    assert "retrying" not in done.stderr and len(model_server.chat_requests) == 1, line
    assert model_server.wait_flooded()[0] < FLOOD // 4, explain(done)


def test_a_reply_under_the_cap_is_the_answer(project: Path, model_server: ModelServer) -> None:
    model_server.flood(200_000, piece=16 * 1024)
    done = ask(project, model_server, "ollama", env={"SANDBOX_AGENT_MAX_REPLY_BYTES": "1m"})
    assert_ok(done, "A" * 200_000)
