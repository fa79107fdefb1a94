"""`sandbox-agent ask`: run the agent from the command line (review is executor/cli/review.py)."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.cli.common import cli_errors, err_console, out_console, real_console
from executor.cli.flags import ASK, DELEGATION, RunFlags, run_flags
from executor.errors import (
    ConfigError,
    IncompleteRunError,
    SandboxAgentError,
    TruncatedAnswerError,
)
from executor.signals import cleaned_up_whole, interrupt_on_ending_signals
from executor.text import markup_safe

if TYPE_CHECKING:  # imported where used: `--help` loads neither pydantic nor the agent
    from executor.agent import RunResult
    from executor.cli.machine import JsonOutput
    from executor.runner import Runner
    from executor.ui import ProgressView

WARM_UP_SECONDS = 0.3
"""A one-shot ask starts the container in the background once the model has thought this long."""


def prepare(flags: RunFlags, options: dict[str, Any], *, interactive: bool
            ) -> tuple[Runner, ProgressView]:
    """The runner of a run (ask, review, improve), its progress view attached; nothing
    started."""
    from executor.cli.approve import TerminalApprover
    from executor.runner import Runner
    from executor.ui import ProgressView

    if flags.no_audit:
        options["audit"] = False
    _unset_env(flags.env or [])
    interrupt_on_ending_signals()
    stream, trace = flags.stream, flags.trace
    view = ProgressView(real_console(err_console), stream=stream is not False, trace=trace)
    approver = TerminalApprover(view) if interactive else None
    runner = Runner.build(flags.root, argv=sys.argv[1:], interactive=interactive,
                          approver=approver, **options)
    view.attach(runner.hooks)
    _trace(runner)
    view.stream = _streams_text(runner, stream)
    view.prose = runner.model.tool_protocol == "native"
    view.show_thinking = trace or stream is True or (stream is None and err_console.is_terminal)
    return runner, view


def _unset_env(names: list[str]) -> None:
    """An --env variable that is not set here passes nothing: say so (a typo, or an export
    forgotten), rather than let the sandbox go without it unseen."""
    for name in dict.fromkeys(n for n in names if n not in os.environ):
        err_console.print(f"[yellow]warning:[/] --env {markup_safe(name, line=True)} is not "
                          "set in this environment: the sandbox does not get it")


def _trace(runner: Runner) -> None:
    """OpenTelemetry traces of the run, when the person configured a collector."""
    if not (runner.settings.otel_endpoint or any(k.startswith("OTEL_EXPORTER_OTLP_")
                                                 for k in os.environ)):
        return  # the common case: no SDK import at all
    from executor import telemetry
    from executor.redact import Redactor

    redactor = Redactor.from_environ(extra_names=[runner.settings.api_key_env])
    telemetry.start(runner.hooks, configured_endpoint=runner.settings.otel_endpoint,
                    redactor=redactor, on_warning=lambda text: err_console.print(
                        f"[yellow]warning:[/] {markup_safe(text, line=True)}"))


def _query_from_stdin(command: str = "ask") -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError("no query given",
                          fix=f'pass it as an argument: sandbox-agent {command} "..."')
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the query read from stdin is not UTF-8 text (byte {data[exc.start]:#04x} at "
            f"offset {exc.start})", fix="convert it first, e.g. iconv -f LATIN1 -t UTF-8",
        ) from None


def checked_query(query: str, command: str = "ask") -> str:
    """The query without surrounding blanks; ConfigError when it is empty or not UTF-8 (the
    fix names `command`, the one that was run)."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable argv bytes arrive as lone surrogates
        raise ConfigError(
            f"the query is not UTF-8 text (an undecodable byte at character {exc.start})",
            fix="pass UTF-8 text (check your terminal's locale, e.g. LANG=C.UTF-8)",
        ) from None
    if not query.strip():
        raise ConfigError("the query is empty",
                          fix=f'say what to do: sandbox-agent {command} "..."')
    return query.strip()


STARTING = "starting the session…"


def start(runner: Runner, view: ProgressView, *, spin: bool = True) -> None:
    """Start the session (its container when a tool needs it); the session line. With `spin`,
    a spinner meanwhile (not the model's: no model is asked yet)."""
    if spin:
        view.thinking(STARTING)
    runner.start()
    view.close()
    session_line(runner)


def session_line(runner: Runner) -> None:
    """`session NAME · container NAME · mode · workspace · model NAME` on stderr."""
    from executor.sandbox.docker import container_name

    sandbox = container_name(runner.sandbox_id) if runner.sandbox else "?"
    if not runner.sandbox_started:
        sandbox += " (starts when a tool needs it)"
    err_console.print(
        f"[dim]session {runner.session_name} · container {sandbox} · "
        f"{'read-only' if runner.options.read_only else 'read-write'} · "
        f"{runner.workspace_mode} workspace · model {markup_safe(runner.model.name, line=True)}[/]"
    )


# -- ask -----------------------------------------------------------------------------------------


QueryArgument = Annotated[
    str | None,
    typer.Argument(help="The request; read from stdin when omitted.", show_default=False),
]


@run_flags(ASK, hidden=DELEGATION)
@cli_errors
def ask(query: QueryArgument = None, *, flags: RunFlags) -> None:
    """Ask the agent to do something in the project (--root); every tool call runs in a
    sandbox container.

    The final answer goes to stdout; progress and tool activity to stderr. Writes and shell
    commands ask at a terminal (y, n, a: always allow for this session, r: no and say why,
    v: view all of it); without one they are denied unless --yes (fail closed).
    """
    _ask(query, flags, orchestrator=False)


@run_flags(ASK)
@cli_errors
def orchestrate(query: QueryArgument = None, *, flags: RunFlags) -> None:
    """Ask with delegation: the model may hand self-contained sub-tasks to child sessions.

    Each child is an ordinary session with its own container, read-only unless the delegate
    call asks for writes and your approval covers them (its writes ask like yours). A delegate
    call asks for approval first (high risk) unless --no-confirm-delegation; children do not
    delegate further, and one session starts at most --max-delegations of them.
    """
    _ask(query, flags, orchestrator=True)


def _ask(query: str | None, flags: RunFlags, *, orchestrator: bool) -> None:
    """flags -> options -> Runner -> the answer (or the REPL), then --apply."""
    from executor.cli.machine import JsonOutput, reporting

    output = JsonOutput(stream=flags.json_stream, prints=flags.as_json)
    flags = _decided(query, flags, prints=output.prints)
    if query is not None or not flags.interactive:
        command = "orchestrate" if orchestrator else "ask"
        query = checked_query(query if query is not None else _query_from_stdin(command),
                              command)
    at_terminal = _person_at_terminal()
    options = flags.options(orchestrator=orchestrator)
    # The container starts when a tool first needs it (a REPL warms it up at once): an answer
    # that needs no tool never waits for one. A resumed session re-attaches its container first.
    if not options["resume"]:
        options["sandbox_warm_up"] = 0.0 if flags.interactive else WARM_UP_SECONDS
    with reporting(output):
        runner, view = prepare(flags, options, interactive=at_terminal)
        check_apply(runner, flags.apply)
        output.attach(runner.hooks, session=lambda: runner.session_name)
        try:
            result = _run(runner, view, query, repl=flags.interactive)
        except KeyboardInterrupt:  # the session is closed by now: named only when it was kept
            _how_to_resume(runner)
            raise
        finally:
            view.close()
            show_changes(runner)
    if result is None:
        _how_to_resume(runner)
        return
    _finish(result, view, output, flags.fail_on_denied)
    if flags.apply and runner.changes is not None:
        from executor.cli.workspace import run_apply

        run_apply(runner.options.root, runner.changes, yes=flags.yes, at_terminal=at_terminal,
                  audit=not flags.no_audit, to_stderr=True, settings=runner.settings)


def _decided(query: str | None, flags: RunFlags, *, prints: bool) -> RunFlags:
    """The flags as the person meant them: --resume picks a session at a terminal; `ask`
    with no query at a terminal is the REPL."""
    changes: dict[str, Any] = {}
    if flags.resume and not flags.continue_ and flags.session is None and not prints \
            and _person_at_terminal():
        from executor.cli.picker import pick_session

        changes["session"] = pick_session(flags.root)
    if query is None and not prints and _person_at_terminal():
        changes["interactive"] = True  # `sandbox-agent ask` alone, at a terminal: the REPL
    if prints and (flags.interactive or changes.get("interactive")):
        raise ConfigError("--json and --json-stream print one run: they do not go with -i",
                          fix="drop -i, or drop --json/--json-stream")
    return dataclasses.replace(flags, **changes)


def _run(runner: Runner, view: ProgressView, query: str | None, *, repl: bool
         ) -> RunResult | None:
    """The session: one request (its result), or the REPL until the person leaves (None)."""
    with cleaned_up_whole(runner):
        start(runner, view, spin=not repl)  # the REPL's first lines: the session, its header
        if repl:
            from executor.cli.repl import Repl

            Repl(runner, view, lambda text: _answer(runner, view, text, keep_going=True)
                 ).run(query)
            return None
        view.begin()
        try:
            return runner.run(runner.attach_mentions(query or ""))
        except KeyboardInterrupt:
            view.interrupted()
            raise


def _finish(result: RunResult, view: ProgressView, output: JsonOutput,
            fail_on_denied: bool) -> None:
    """The answer (or the JSON object) on stdout; exit 32 for denied calls when asked."""
    from executor.ui import show_answer

    if not output.prints:
        show_answer(result.answer, real_console(out_console))
    err_console.print(f"[dim]done · {markup_safe(view.summary())}[/]")
    output.finish(answer=result.answer, turns=result.turns, fail_on_denied=fail_on_denied,
                  unfinished=result.unfinished, truncated=result.truncated)
    if result.unfinished:
        raise IncompleteRunError(f"the run answered, but {result.unfinished}",
                                 fix="say more precisely what to change, or use a more "
                                     "capable model (--provider ollama)")
    if result.truncated:
        raise TruncatedAnswerError(f"the run answered, but {result.truncated}",
                                   fix="ask for a shorter answer, or use a more capable "
                                       "model (the embedded model's reply limit is "
                                       "SANDBOX_AGENT_EMBEDDED_MAX_REPLY_TOKENS)")


def _say_unfinished(result: RunResult) -> None:
    """A run whose changes all failed, or whose answer was cut, says so under its answer (the
    model may claim the changes)."""
    for why in (result.unfinished, result.truncated):
        if why:
            err_console.print(f"[yellow]warning:[/] {markup_safe(why)}")


def _person_at_terminal() -> bool:
    return bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)


def _how_to_resume(runner: Runner) -> None:
    """After the REPL or an interrupted run: the command that continues this session (when
    one was kept)."""
    import shlex

    name = runner.session_name
    if name is None:
        return
    command = (f"sandbox-agent ask --root {shlex.quote(str(runner.options.root))} --resume "
               f"--session {shlex.quote(name)}")
    err_console.print(f"[dim]session {markup_safe(name, line=True)} kept; continue it with:[/] "
                      f"{markup_safe(command, line=True)}")


def _streams_text(runner: Runner, stream: bool | None) -> bool:
    """Stream prose, not a tool protocol's JSON; off a terminal only when asked for."""
    prose = runner.model.tool_protocol == "native"
    return prose and (stream is True or (stream is None and err_console.is_terminal))


def _answer(runner: Runner, view: ProgressView, query: str, *,
            keep_going: bool = False) -> RunResult | None:
    """Run one request; the answer on stdout, then the request's figures on stderr.

    With `keep_going` (the REPL) a failed request is one error line and the session goes on.
    """
    from executor.ui import show_answer

    view.begin()
    try:
        result = runner.run(runner.attach_mentions(query))
    except SandboxAgentError as exc:
        view.close()
        if not keep_going:
            raise
        err_console.print(f"[bold red]error:[/] {markup_safe(str(exc))}")
        return None
    view.close()
    show_answer(result.answer, real_console(out_console))
    _say_unfinished(result)
    err_console.print(f"[dim]done · {markup_safe(view.summary())}[/]")
    return result


# -- copy workspace ------------------------------------------------------------------------------


def check_apply(runner: Runner, apply: bool) -> None:
    """--apply needs a read-write copy workspace: say so before anything runs."""
    if apply and (runner.settings.workspace != "copy" or runner.options.read_only):
        raise ConfigError("--apply applies a copy workspace's changes",
                          fix="add --workspace copy (and drop --read-only)")


def show_changes(runner: Runner) -> None:
    """After a copy session: what changed, and how to review and apply it (on stderr)."""
    from executor.cli.workspace import reviewed
    from executor.workspace.apply import pending
    from executor.workspace.render import reader, summary
    from executor.workspace.store import BlobStore

    changes = runner.changes
    if changes is None:
        return
    root = runner.options.root
    todo = reviewed(root, pending(root, changes), reader(BlobStore.for_root(root)))
    for line in summary(changes, todo, root=str(runner.options.root)):
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
