"""`sandbox-agent ask` at a terminal (a pseudo-terminal): writes and commands ask y/n, showing
the diff or the command, and only a yes lets them run."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.docker.cli_support import (
    RUN_TIMEOUT,
    SANDBOX_AGENT,
    cli_env,
    model_args,
    tool_exchanges,
)
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

PROMPT = b"Allow this call?"


def _converse(argv: list[str], answers: list[bytes]) -> tuple[int, str, str]:
    """Run `argv` with stdin and stderr on a pty; answer each approval prompt in turn.

    Returns the exit code, stdout (a pipe) and everything the terminal showed.
    """
    master, slave = pty.openpty()
    run = subprocess.Popen(argv, stdin=slave, stderr=slave, stdout=subprocess.PIPE,
                           env=cli_env(COLUMNS="100"))
    os.close(slave)
    shown, pending = b"", list(answers)
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while chunk := _read(master, deadline):
            shown += chunk
            if pending and shown.count(PROMPT) == len(answers) - len(pending) + 1:
                os.write(master, pending.pop(0))
        assert run.stdout is not None
        out = run.stdout.read().decode()
        return run.wait(timeout=30), out, shown.decode(errors="replace").replace("\r\n", "\n")
    finally:
        os.close(master)
        if run.poll() is None:
            run.kill()
            run.wait()


def _read(fd: int, deadline: float) -> bytes:
    """The next output of the terminal; b"" once the child closed it."""
    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    assert ready, "the CLI neither printed nor exited in time"
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: every writer closed the terminal
        return b""


def test_a_person_approves_an_edit_and_declines_a_command(project: Path,
                                                          model_server: ModelServer):
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                                      "new_text": "a - b"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    model_server.reply("Edited; the command was declined.")

    code, out, shown = _converse(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(model_server, "ollama"),
         "change add"], [b"y\n", b"n\n"])

    assert code == 0, shown
    assert out == "Edited; the command was declined.\n"
    assert shown.count("Allow this call?") == 2
    assert "edit_file needs approval" in shown and "run_shell_command needs approval" in shown
    assert "\n-a + b\n+a - b\n" in shown  # the diff, one line per side
    assert "$ touch made.txt" in shown
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (project / "made.txt").exists()
    [(_, _, edited), (_, _, declined)] = tool_exchanges(model_server.last_chat)
    assert edited.startswith("edited")
    assert declined.startswith("Denied:") and "declined by the user" in declined
