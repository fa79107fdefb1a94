"""`ask --json` and `ask --json-stream`: the run as JSON on stdout (docs/CLI_JSON.md).

Progress stays on stderr; stdout carries only JSON: one object when the run ends (`--json`),
or one event a line as it happens and that same object as the last line (`--json-stream`).
The object is printed whatever way the run ends, so a script always has something to parse;
the exit code is the one the run would have without these flags.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from executor.cli.common import encodable
from executor.errors import CallsDeniedError, SandboxAgentError
from executor.hooks import Event, HookBus
from executor.runreport import RunRecorder, RunReport, stream_event
from executor.text import inert_json


def write_json_line(data: Any) -> None:
    """One JSON document on one stdout line (inert at a terminal, the data itself in a pipe)."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    if sys.stdout.isatty():
        text = inert_json(text)
    sys.stdout.write(encodable(text) + "\n")
    sys.stdout.flush()


class JsonOutput:
    """The machine-readable output of one `ask` run."""

    def __init__(self, *, stream: bool = False, prints: bool = True) -> None:
        self.stream = stream
        self.prints = prints or stream
        """Whether to print anything (without, it only records, e.g. for --fail-on-denied)."""
        self.recorder = RunRecorder()
        self.facts: dict[str, Any] = {}

    def attach(self, hooks: HookBus) -> None:
        """Record the run (and stream its events, with --json-stream)."""
        self.recorder.attach(hooks)
        if self.stream:
            hooks.subscribe(self._emit)

    def _emit(self, event: Event) -> None:
        line = stream_event(event)
        if line is not None:
            write_json_line(line)

    def finish(self, *, answer: str | None = None, turns: int | None = None,
               error: BaseException | None = None) -> RunReport:
        """Print the result object; returns it."""
        report = self.recorder.report(answer=answer, turns=turns, error=error, **self.facts)
        if self.prints:
            write_json_line(report.model_dump(mode="json"))
        return report


@contextmanager
def reporting(output: JsonOutput) -> Iterator[None]:
    """Print the failure object when the run fails (then the error goes on as usual)."""
    try:
        yield
    except (SandboxAgentError, KeyboardInterrupt) as exc:
        output.finish(error=exc)
        raise


def check_denied(report: RunReport, describe: Callable[[str], str] = str) -> None:
    """`--fail-on-denied`: CallsDeniedError naming the denied calls, when there are any."""
    denied = report.denied
    if not denied:
        return
    names = ", ".join(f"{c.tool} ({describe(c.reason or c.rule)})" for c in denied[:5])
    raise CallsDeniedError(
        f"{len(denied)} tool call(s) were denied: {names}",
        fix="approve them up front (--yes or a policy rule), or drop --fail-on-denied",
    )
