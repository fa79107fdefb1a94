"""Under GitHub Actions no line the model wrote is a workflow command (executor/cli/actions.py).
The runner trims leading blanks, reads `::` at a line's start (a line ends at LF or a lone CR)
and `##[` anywhere; the guard breaks each with a zero-width space, however the text is cut."""

from __future__ import annotations

import io

import pytest

from executor.cli.actions import ZWSP, CommandGuard


def runner_commands(text: str) -> list[str]:
    """The lines the Actions runner would take for commands."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return [line for line in lines if line.lstrip().startswith("::") or "##[" in line]


FORGED = [
    "::add-mask::secret", "  ::error file=a.py,line=1::forged", "ok\n::set-output name=x::1",
    "a\r::stop-commands::tok", "\t::warning::w", "x ##[error]old style", "##[add-mask]s",
]


@pytest.mark.parametrize("text", FORGED)
@pytest.mark.parametrize("cut", [1, 2, 3, 1000])
def test_no_forged_command_survives_however_the_text_arrives(text: str, cut: int):
    out = io.StringIO()
    guard = CommandGuard(out)
    for start in range(0, len(text), cut):  # streamed tokens split anywhere
        guard.write(text[start:start + cut])
    assert runner_commands(text)  # the text is a command as it stands
    assert runner_commands(out.getvalue()) == []
    assert out.getvalue().replace(ZWSP, "") == text  # a person reads the same text


def test_ordinary_text_passes_unchanged():
    text = "a: b\nhttp://x:8080/y\n#include <x>\nitem::method()\n  - a: 1\n"
    out = io.StringIO()
    CommandGuard(out).write(text)
    assert out.getvalue() == text


def test_the_commands_sandbox_agent_means_pass_raw():
    out = io.StringIO()
    guard = CommandGuard(out)
    guard.write("::")  # a model's half line
    guard.write("\n")
    guard.raw("::error file=a.py,line=2::Return a + b.\n")
    assert runner_commands(out.getvalue()) == ["::error file=a.py,line=2::Return a + b."]
