"""`ask --json` and `ask --json-stream`: the run as JSON on stdout (docs/CLI_JSON.md).

Progress stays on stderr; stdout carries only JSON: one object when the run ends (`--json`),
or one event a line as it happens and that same object as the last line (`--json-stream`).
The object is printed whatever way the run ends, so a script always has something to parse;
the exit code is the one the run would have without these flags.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from executor.cli.common import encodable
from executor.errors import CallsDeniedError, SandboxAgentError
from executor.hooks import Event, HookBus
from executor.runreport import RunRecorder, RunReport, ToolCallReport, stream_event
from executor.text import inert_json, inert_line


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
        self._session: Callable[[], str | None] | None = None
        self._early: list[dict[str, Any]] | None = []
        """Lines of events before `start` (the instructions read while starting), held so
        the stream begins with `start`; None once it has."""

    def attach(self, hooks: HookBus, session: Callable[[], str | None] | None = None) -> None:
        """Record the run (and stream its events, with --json-stream). `session` tells the
        session's name when the run ends (None: it was removed, the model never replied)."""
        self.recorder.attach(hooks)
        self._session = session
        if self.stream:
            hooks.subscribe(self._emit)

    def _emit(self, event: Event) -> None:
        line = stream_event(event)
        if line is None:
            return
        if self._early is not None and line["type"] != "start":
            self._early.append(line)
            return
        write_json_line(line)
        self._flush_early()

    def _flush_early(self) -> None:
        for line in self._early or []:
            write_json_line(line)
        self._early = None

    def finish(self, *, answer: str | None = None, turns: int | None = None,
               error: BaseException | None = None, fail_on_denied: bool = False,
               unfinished: str | None = None, truncated: str | None = None) -> RunReport:
        """Print the result object; returns it. With `fail_on_denied` a run with denied
        calls has status `denied` and the CallsDeniedError it then raises as its error;
        `unfinished` (why no change was made) makes its status `incomplete`, else
        `truncated` (why the answer was cut) makes it `truncated`."""
        report = self._report(answer, turns, error, unfinished, truncated)
        denied = denied_error(report) if fail_on_denied and error is None else None
        if denied is not None:
            report = self._report(answer, turns, denied)
        if self.prints:
            self._flush_early()
            write_json_line(report.model_dump(mode="json"))
        if denied is not None:
            raise denied
        return report

    def _report(self, answer: str | None, turns: int | None, error: BaseException | None,
                unfinished: str | None = None, truncated: str | None = None) -> RunReport:
        report = self.recorder.report(answer=answer, turns=turns, error=error,
                                      unfinished=unfinished, truncated=truncated, **self.facts)
        if self._session is not None:
            report.session = self._session()
        return report


@contextmanager
def reporting(output: JsonOutput) -> Iterator[None]:
    """Print the failure object when the run fails (then the error goes on as usual)."""
    try:
        yield
    except (SandboxAgentError, KeyboardInterrupt) as exc:
        output.finish(error=exc)
        raise


def denied_error(report: RunReport) -> CallsDeniedError | None:
    """`--fail-on-denied`: the CallsDeniedError naming the denied calls, when there are any."""
    denied = report.denied
    if not denied:
        return None
    names = ", ".join(_denied_call(c) for c in denied[:5])
    return CallsDeniedError(
        f"{len(denied)} tool call(s) were denied: {names}",
        fix="approve them up front (--yes or a policy rule), or drop --fail-on-denied",
    )


def _denied_call(call: ToolCallReport) -> str:
    """`tool (reason)`, the reason shortened at a word, one inert line; the child named."""
    reason = textwrap.shorten(inert_line(call.reason or call.rule), 80, placeholder=" …")
    child = f" in child session {inert_line(call.child_session)}" if call.child_session else ""
    return f"{call.tool}{child} ({reason})"
