"""A running command's output reaches the host while it runs; Ctrl-C leaves the sandbox usable."""

from __future__ import annotations

import time

import pytest

from executor.sandbox.docker import DockerSandbox

pytestmark = pytest.mark.docker


def test_output_arrives_while_the_command_runs(sandbox: DockerSandbox) -> None:
    seen: list[tuple[float, str, str]] = []
    began = time.monotonic()
    result = sandbox.call(
        "run_shell_command", {"command": "echo first; sleep 2; echo oops >&2; echo last"},
        on_output=lambda stream, text: seen.append((time.monotonic() - began, stream, text)))
    assert result.ok and "first" in result.output and "last" in result.output
    assert seen[0][1:] == ("stdout", "first\n") and seen[0][0] < 1.5  # before the sleep ended
    assert "".join(t for _, s, t in seen if s == "stdout") == "first\nlast\n"
    assert "".join(t for _, s, t in seen if s == "stderr") == "oops\n"


def test_calls_without_a_callback_get_no_progress(sandbox: DockerSandbox) -> None:
    result = sandbox.call("run_shell_command", {"command": "echo plain"})
    assert result.ok and "plain" in result.output


def test_an_interrupt_kills_the_command_and_the_next_call_works(sandbox: DockerSandbox) -> None:
    def interrupt(stream: str, text: str) -> None:
        if "started" in text:
            raise KeyboardInterrupt  # what Ctrl-C does to the main thread

    with pytest.raises(KeyboardInterrupt):
        sandbox.call("run_shell_command",
                     {"command": "echo started; sleep 60; touch never"}, on_output=interrupt)
    began = time.monotonic()
    after = sandbox.call("run_shell_command", {"command": "sleep 2; ls never || echo gone"})
    assert after.ok and "gone" in after.output and time.monotonic() - began < 30
    assert sandbox.is_alive()
