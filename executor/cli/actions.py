"""Under GitHub Actions, no line the model wrote runs as a workflow command.

The Actions runner reads both stdout and stderr of a step and obeys any line that starts with
`::` once leading blanks are trimmed (`::add-mask::`, `::error file=…::`, `::stop-commands::`;
a line ends at LF or at a lone CR), and the older `##[command]` form anywhere in a line.
Model text reaches both streams: the answer, streamed tokens and thinking, tool output, the
review report. With GITHUB_ACTIONS=true the CLI wraps `sys.stdout` and `sys.stderr` in a
`CommandGuard`, which puts a zero-width space (U+200B, not blank to the runner, invisible to a
person) into each such marker; the few commands sandbox-agent means to give (review's
annotations and its stop-commands fence) go through `workflow_command`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

ZWSP = "\u200b"
_START, _COLON, _MIDDLE = 0, 1, 2


class CommandGuard:
    """A text stream that passes everything on except the markers of workflow commands."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._state = _START
        self._hashes = 0

    def write(self, text: str) -> int:
        """Write `text` with `::` at a line's start and `##[` broken by a zero-width space."""
        self.stream.write(self._filter(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def raw(self, text: str) -> None:
        """Write `text` as it is (a command sandbox-agent gives); it must end a line."""
        self.stream.write(text)
        self._state, self._hashes = _START, 0

    def _filter(self, text: str) -> str:
        out = []
        for char in text:
            if char in "\r\n":  # the runner reads a lone CR as a line's end too
                self._state, self._hashes = _START, 0
                out.append(char)
                continue
            if self._state == _START:
                if char == ":":
                    self._state = _COLON
                elif not char.isspace():
                    self._state = _MIDDLE
            elif self._state == _COLON:
                if char == ":":
                    out.append(ZWSP)
                self._state = _MIDDLE
            if char == "[" and self._hashes >= 2:
                out.append(ZWSP)
            self._hashes = self._hashes + 1 if char == "#" else 0
            out.append(char)
        return "".join(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def under_actions() -> bool:
    """Whether this runs as a GitHub Actions step."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def guard_streams() -> None:
    """Under Actions, wrap stdout and stderr (once)."""
    if not under_actions():
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, CommandGuard):
            setattr(sys, name, CommandGuard(stream))


def workflow_command(line: str, *, stderr: bool = False) -> None:
    """Give the runner one command line sandbox-agent means (its data already escaped)."""
    stream = sys.stderr if stderr else sys.stdout
    if isinstance(stream, CommandGuard):
        stream.raw(line + "\n")
    else:
        stream.write(line + "\n")
    stream.flush()
