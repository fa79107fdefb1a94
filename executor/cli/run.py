"""`sandbox-agent ask`: run the agent from the command line (review is executor/cli/review.py)."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.cli.common import RootOption, cli_errors, err_console, out_console, real_console
from executor.cli.options import (
    AllowHostOpt,
    AuditPromptsOpt,
    AuditRequiredOpt,
    CopyLimitOpt,
    DenyPrefixOpt,
    DenyToolOpt,
    EnvOpt,
    ExcludeOpt,
    HostOpt,
    ImageOpt,
    MaxRetriesOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    ModelOpt,
    NetworkOpt,
    NoAuditOpt,
    NoInstructionsOpt,
    PolicyOpt,
    ProjectSkillsOpt,
    ProtocolOpt,
    ProviderOpt,
    RuntimeOpt,
    SkillOpt,
    SkillsExcludeOpt,
    SkillsIncludeOpt,
    SkillsOpt,
    StreamOpt,
    SystemPromptFileOpt,
    ThinkOpt,
    TimeoutOpt,
    TraceOpt,
    WorkspaceOpt,
    prompt_options,
    skill_options,
)
from executor.errors import ConfigError, IncompleteRunError, SandboxAgentError
from executor.signals import cleaned_up_whole, interrupt_on_ending_signals
from executor.text import markup_safe

if TYPE_CHECKING:  # imported where used: `--help` loads neither pydantic nor the agent
    from executor.agent import RunResult
    from executor.cli.machine import JsonOutput
    from executor.runner import Runner
    from executor.ui import ProgressView

WARM_UP_SECONDS = 0.3
"""A one-shot ask starts the container in the background once the model has thought this long."""


def _settings(**values: Any) -> dict[str, Any]:
    """Only the flags that were given: the rest comes from SANDBOX_AGENT_* or the defaults."""
    return {k: v for k, v in values.items() if v is not None and v != []}


def _prepare(
    root: Path, options: dict[str, Any], *, stream: bool | None, trace: bool, audit: bool,
    interactive: bool,
) -> tuple[Runner, ProgressView]:
    """The runner for `ask` / `review`, with its progress view attached (nothing started)."""
    from executor.cli.approve import TerminalApprover
    from executor.runner import Runner
    from executor.ui import ProgressView

    if not audit:
        options["audit"] = False
    interrupt_on_ending_signals()
    view = ProgressView(real_console(err_console), stream=stream is not False, trace=trace)
    approver = TerminalApprover(view) if interactive else None
    runner = Runner.build(root, argv=sys.argv[1:], interactive=interactive, approver=approver,
                          **options)
    view.attach(runner.hooks)
    _trace(runner)
    view.stream = _streams_text(runner, stream)
    view.prose = runner.model.tool_protocol == "native"
    view.show_thinking = trace or stream is True or (stream is None and err_console.is_terminal)
    return runner, view


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
                        f"[yellow]warning:[/] {markup_safe(text)}"))


def _query_from_stdin() -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError("no query given", fix='pass it as an argument: sandbox-agent ask "..."')
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the query read from stdin is not UTF-8 text (byte {data[exc.start]:#04x} at "
            f"offset {exc.start})", fix="convert it first, e.g. iconv -f LATIN1 -t UTF-8",
        ) from None


def checked_query(query: str) -> str:
    """The query without surrounding blanks; ConfigError when it is empty or not UTF-8."""
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable argv bytes arrive as lone surrogates
        raise ConfigError(
            f"the query is not UTF-8 text (an undecodable byte at character {exc.start})",
            fix="pass UTF-8 text (check your terminal's locale, e.g. LANG=C.UTF-8)",
        ) from None
    if not query.strip():
        raise ConfigError("the query is empty", fix='say what to do: sandbox-agent ask "..."')
    return query.strip()


def _start(runner: Runner, view: ProgressView) -> None:
    view.thinking()
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


@cli_errors
def ask(
    query: Annotated[
        str | None,
        typer.Argument(help="The request; read from stdin when omitted.", show_default=False),
    ] = None,
    root: RootOption = Path("."),
    provider: ProviderOpt = None,
    model: ModelOpt = None,
    host: HostOpt = None,
    tool_protocol: ProtocolOpt = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Mount the project read-only; no write tools.")
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Approve writes and commands up front (policy denials still apply)."
        ),
    ] = False,
    auto_edit: Annotated[
        bool,
        typer.Option("--auto-edit", help="Approve file writes and edits up front (they stay in "
                     "the project); shell commands still ask. Audited as --auto-edit."),
    ] = False,
    stream: StreamOpt = None,
    think: ThinkOpt = None,
    trace: TraceOpt = False,
    max_turns: MaxTurnsOpt = None,
    image: ImageOpt = None,
    runtime: RuntimeOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: MaxRetriesOpt = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive", "-i",
            help="A REPL: several requests in one session and one container (line editing, "
            "history, /help for its commands; Ctrl-C cancels a request).",
        ),
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            "-s",
            help="Name the session (or pick the one to --resume).",
            show_default=False,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue --session, or this root's most recent session "
                     "(never a delegated child's)."),
    ] = False,
    continue_: Annotated[
        bool,
        typer.Option("--continue", "-c", help="Continue this root's most recent session (as "
                     "--resume); with no query at a terminal, in the REPL."),
    ] = False,
    max_tokens: MaxTokensOpt = None,
    context_summarize: Annotated[
        bool,
        typer.Option(
            "--context-summarize", help="Summarize dropped context instead of dropping it."
        ),
    ] = False,
    policy: PolicyOpt = None,
    deny_tool: DenyToolOpt = None,
    deny_prefix: DenyPrefixOpt = None,
    deny_command: Annotated[
        list[str] | None,
        typer.Option(
            "--deny-command",
            metavar="PROGRAM",
            help="Deny shell commands running this program (and these words), however they are "
            "spelled; commands that cannot be checked are denied too (repeatable).",
            show_default=False,
        ),
    ] = None,
    env: EnvOpt = None,
    allow_host: AllowHostOpt = None,
    network: NetworkOpt = None,
    allow_git_writes: Annotated[
        bool,
        typer.Option(
            "--allow-git-writes",
            help="Mount .git read-write (hooks planted there run on the host later).",
        ),
    ] = False,
    disk_budget: Annotated[
        str | None,
        typer.Option(
            "--disk-budget",
            metavar="SIZE",
            help="How much the project may grow in this session, e.g. 500m or 2g; 0: no "
            "limit. [default: 1g]",
            show_default=False,
        ),
    ] = None,
    no_audit: NoAuditOpt = False,
    audit_required: AuditRequiredOpt = False,
    audit_prompts: AuditPromptsOpt = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object with the answer, tool calls, changes "
                     "and usage when the run ends (docs/CLI_JSON.md)."),
    ] = False,
    json_stream: Annotated[
        bool,
        typer.Option("--json-stream", help="Print one JSON event a line as the run goes, the "
                     "--json object last."),
    ] = False,
    fail_on_denied: Annotated[
        bool,
        typer.Option("--fail-on-denied", help="Exit 32 when any tool call was denied."),
    ] = False,
    system_prompt_file: SystemPromptFileOpt = None,
    no_project_instructions: NoInstructionsOpt = False,
    skill: SkillOpt = None,
    skills: SkillsOpt = None,
    skills_include: SkillsIncludeOpt = None,
    skills_exclude: SkillsExcludeOpt = None,
    project_skills: ProjectSkillsOpt = None,
    workspace: WorkspaceOpt = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Copy workspace: apply the changes at the end (asks at a terminal; without "
            "one it needs --yes); files changed on the host meanwhile are refused (exit 61).",
        ),
    ] = False,
    exclude: ExcludeOpt = None,
    copy_limit: CopyLimitOpt = None,
    # orchestrate's own flags: hidden here, shown in its help (_ORCHESTRATE_ONLY)
    no_confirm_delegation: Annotated[
        bool, typer.Option("--no-confirm-delegation", hidden=True)] = False,
    max_delegations: Annotated[
        int | None, typer.Option("--max-delegations", min=0, hidden=True)] = None,
    orchestrate: Annotated[bool, typer.Option("--orchestrate", hidden=True)] = False,
) -> None:
    """Ask the agent to do something in the project (--root); every tool call runs in a
    sandbox container.

    The final answer goes to stdout; progress and tool activity to stderr. Writes and shell
    commands ask at a terminal (y, n, a: always allow for this session, r: no and say why,
    v: view all of it); without one they are denied unless --yes (fail closed).
    """
    from executor.cli.machine import JsonOutput, reporting

    output = JsonOutput(stream=json_stream, prints=as_json)
    if resume and not continue_ and session is None and not output.prints \
            and _person_at_terminal():
        from executor.cli.picker import pick_session

        session = pick_session(root)
    resume = resume or continue_
    if query is None and not output.prints and _person_at_terminal():
        interactive = True  # `sandbox-agent ask` alone, at a terminal: the REPL
    if output.prints and interactive:
        raise ConfigError("--json and --json-stream print one run: they do not go with -i",
                          fix="drop -i, or drop --json/--json-stream")
    if query is not None or not interactive:
        query = checked_query(query if query is not None else _query_from_stdin())
    at_terminal = bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)
    options = _settings(
        provider=provider,
        model=model,
        host=host,
        tool_protocol=tool_protocol,
        stream=stream,
        max_turns=max_turns,
        image=image,
        runtime=runtime,
        timeout=timeout,
        max_retries=max_retries,
        think=think,
        max_tokens=max_tokens,
        env_allow=env,
        deny_tools=deny_tool,
        deny_prefixes=deny_prefix,
        deny_commands=deny_command,
        policy_file=policy,
        session=session,
        disk_budget=disk_budget,
        workspace=workspace,
        copy_exclude=exclude,
        copy_limit=copy_limit,
        allow_host_flags=allow_host,
        network_flags=network,
    ) | {
        "read_only": read_only,
        "yes": yes,
        "auto_edit": auto_edit,
        "resume": resume,
        "context_summarize": context_summarize,
        "audit_required": audit_required,
        "audit_prompts": audit_prompts,
    } | prompt_options(root, system_prompt_file, no_project_instructions) | skill_options(
        skill, skills, skills_include, skills_exclude, project_skills) | delegation_options(
        orchestrate, no_confirm_delegation, max_delegations)
    if allow_git_writes:
        options["allow_git_writes"] = True
    # The container starts when a tool first needs it (a REPL warms it up at once): an answer
    # that needs no tool never waits for one. A resumed session re-attaches its container first.
    if not resume:
        options["sandbox_warm_up"] = 0.0 if interactive else WARM_UP_SECONDS
    left_repl = False
    with reporting(output):
        runner, view = _prepare(root, options, stream=stream, trace=trace, audit=not no_audit,
                                interactive=at_terminal)
        check_apply(runner, apply)
        output.attach(runner.hooks, session=lambda: runner.session_name)
        try:
            with cleaned_up_whole(runner):
                _start(runner, view)
                if interactive:
                    from executor.cli.repl import Repl

                    repl = Repl(runner, view,
                                lambda text: _answer(runner, view, text, keep_going=True))
                    repl.run(query)
                    left_repl = True
                else:
                    view.begin()
                    try:
                        result = runner.run(runner.attach_mentions(query or ""))
                    except KeyboardInterrupt:
                        view.interrupted()
                        raise
        finally:
            view.close()
            show_changes(runner)
    if left_repl:
        _how_to_resume(runner)
        return
    _finish(result, view, output, fail_on_denied)
    if apply and runner.changes is not None:
        from executor.cli.workspace import run_apply

        run_apply(runner.options.root, runner.changes, yes=yes, at_terminal=at_terminal,
                  audit=not no_audit, to_stderr=True, settings=runner.settings)


def _finish(result: RunResult, view: ProgressView, output: JsonOutput,
            fail_on_denied: bool) -> None:
    """The answer (or the JSON object) on stdout; exit 32 for denied calls when asked."""
    from executor.ui import show_answer

    if not output.prints:
        show_answer(result.answer, real_console(out_console))
    err_console.print(f"[dim]done · {markup_safe(view.summary())}[/]")
    output.finish(answer=result.answer, turns=result.turns, fail_on_denied=fail_on_denied,
                  unfinished=result.unfinished)
    if result.unfinished:
        raise IncompleteRunError(f"the run answered, but {result.unfinished}",
                                 fix="say more precisely what to change, or use a more "
                                     "capable model (--provider ollama)")


def _say_unfinished(result: RunResult) -> None:
    """A run whose changes all failed says so under its answer (the model may claim them)."""
    if result.unfinished:
        err_console.print(f"[yellow]warning:[/] {markup_safe(result.unfinished)}")


def _person_at_terminal() -> bool:
    return bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)


def _how_to_resume(runner: Runner) -> None:
    """After the REPL: the command that continues this session (when one was kept)."""
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


@functools.wraps(ask, assigned=("__module__", "__annotations__"))  # ask's options (signature)
def orchestrate(**options: Any) -> None:
    """Ask with delegation: the model may hand self-contained sub-tasks to child sessions.

    Each child is an ordinary session with its own container, read-only unless the delegate
    call asks for writes and your approval covers them (its writes ask like yours). A delegate
    call asks for approval first (high risk) unless --no-confirm-delegation; children do not
    delegate further, and one session starts at most --max-delegations of them.
    """
    ask(**{**options, "orchestrate": True})


_ORCHESTRATE_ONLY: dict[str, Any] = {
    "no_confirm_delegation": Annotated[
        bool, typer.Option("--no-confirm-delegation", help="Run delegate calls without asking "
                           "(a policy deny still wins).")],
    "max_delegations": Annotated[
        int | None, typer.Option("--max-delegations", min=0, help="Child sessions one session "
                                 "may start. [default: 3]", show_default=False)],
}


def _orchestrate_signature() -> inspect.Signature:
    """ask's parameters, with the delegation flags shown (ask hides them: they are refused)."""
    signature = inspect.signature(ask, eval_str=True)
    return signature.replace(parameters=[
        p.replace(annotation=_ORCHESTRATE_ONLY.get(p.name, p.annotation))
        for p in signature.parameters.values()])


orchestrate.__signature__ = _orchestrate_signature()  # type: ignore[attr-defined]


def delegation_options(orchestrator: bool, no_confirm: bool, max_delegations: int | None
                       ) -> dict[str, Any]:
    """RunOptions for delegation; its flags are refused on a plain `ask`."""
    if not orchestrator and (no_confirm or max_delegations is not None):
        raise ConfigError("--no-confirm-delegation and --max-delegations are for orchestrate",
                          fix="run `sandbox-agent orchestrate ...`, or drop them")
    options: dict[str, Any] = {"orchestrator": orchestrator, "confirm_delegation": not no_confirm}
    if max_delegations is not None:
        options["max_delegations"] = max_delegations
    return options


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
