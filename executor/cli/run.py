"""`sandbox-agent ask` and `sandbox-agent review`: run the agent from the command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.markup import escape
from rich.prompt import Confirm

from executor.agent import RunResult
from executor.cli.common import RootOption, cli_errors, err_console
from executor.cli.workspace import run_apply
from executor.config import Provider, ToolProtocol, WorkspaceMode
from executor.errors import ConfigError, SandboxAgentError
from executor.policy import Decision
from executor.runner import Runner
from executor.tools import Tool
from executor.ui import ProgressView
from executor.workspace.apply import pending
from executor.workspace.render import summary

# -- options shared by ask and review ------------------------------------------------------------

ProviderOpt = Annotated[
    Provider | None,
    typer.Option(
        "--provider",
        "-p",
        help="Model provider: ollama (default), openai or embedded.",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="Model name (provider default when omitted).", show_default=False
    ),
]
HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="Model server URL (Ollama: else $OLLAMA_HOST, else http://localhost:11434).",
        show_default=False,
    ),
]
ProtocolOpt = Annotated[
    ToolProtocol | None,
    typer.Option(
        "--tool-protocol",
        help="How tools are offered: native, json or constrained.",
        show_default=False,
    ),
]
StreamOpt = Annotated[
    bool | None,
    typer.Option("--stream/--no-stream", help="Stream model tokens to stderr.", show_default=False),
]
TraceOpt = Annotated[
    bool, typer.Option("--trace", help="Print every model reply and tool call in full on stderr.")
]
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-turns", min=1, help="Model turns before giving up. [default: 20]", show_default=False
    ),
]
ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image", help="Sandbox image (any image with python3 >= 3.9).", show_default=False
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=1,
        help="Seconds to wait for one model response. [default: 300]",
        show_default=False,
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=256,
        help="Context budget in tokens (default: the model's, else 8192).",
        show_default=False,
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        help="Policy TOML (default: <root>/.sandbox-agent/policy.toml).",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
]
DenyToolOpt = Annotated[
    list[str] | None,
    typer.Option("--deny-tool", help="Remove this tool (repeatable).", show_default=False),
]
DenyPrefixOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--deny-prefix",
        help="Remove tools whose name starts with this (repeatable).",
        show_default=False,
    ),
]
NoAuditOpt = Annotated[bool, typer.Option("--no-audit", help="Write no audit log for this run.")]
AuditRequiredOpt = Annotated[
    bool,
    typer.Option(
        "--audit-required", help="Stop before a tool call whose audit record cannot be written."
    ),
]
AuditPromptsOpt = Annotated[
    bool, typer.Option("--audit-prompts", help="Record whole prompts in the audit log.")
]
WorkspaceOpt = Annotated[
    WorkspaceMode | None,
    typer.Option(
        "--workspace",
        help="bind: the sandbox writes into the project as it goes; copy: it works on a copy "
        "and its changes wait for `sandbox-agent diff` / `apply` (docs/WORKSPACES.md). "
        "[default: bind]",
        show_default=False,
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        help="Leave paths matching this gitignore-style pattern out of a copy (repeatable).",
        show_default=False,
    ),
]
CopyLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--copy-limit",
        metavar="SIZE",
        help="Refuse to copy a project bigger than this, e.g. 2g. [default: 1g]",
        show_default=False,
    ),
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="Pass this host environment variable into the sandbox (repeatable).",
        show_default=False,
    ),
]


def _settings(**values: Any) -> dict[str, Any]:
    """Only the flags that were given: the rest comes from SANDBOX_AGENT_* or the defaults."""
    return {k: v for k, v in values.items() if v is not None and v != []}


def _interrupt_on_sigterm() -> None:
    """SIGTERM cleans up like Ctrl-C: the session is saved and the container removed."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class TerminalApprover:
    """Asks the person at the terminal, showing the diff or the command."""

    def __init__(self, view: ProgressView) -> None:
        self.view = view

    def __call__(self, tool: Tool, args: BaseModel, decision: Decision) -> bool:
        """y/n on stderr; anything but yes declines."""
        self.view.close()
        err_console.rule(
            f"[bold]{escape(tool.name)}[/] needs approval [dim]({escape(decision.rule)})[/]"
        )
        err_console.print(tool.describe(args), markup=False, highlight=False)
        try:
            return Confirm.ask("Allow this call?", console=err_console, default=False)
        except EOFError:
            return False


def _prepare(
    root: Path, options: dict[str, Any], *, stream: bool | None, trace: bool, audit: bool,
    interactive: bool,
) -> tuple[Runner, ProgressView]:
    """The runner for `ask` / `review`, with its progress view attached (nothing started)."""
    if not audit:
        options["audit"] = False
    _interrupt_on_sigterm()
    view = ProgressView(err_console, stream=stream is not False, trace=trace)
    approver = TerminalApprover(view) if interactive else None
    runner = Runner.build(root, argv=sys.argv[1:], interactive=interactive, approver=approver,
                          **options)
    view.attach(runner.hooks)
    view.stream = _streams_text(runner, stream)
    return runner, view


def _query_from_stdin() -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError("no query given", fix='pass it as an argument: sandbox-agent ask "..."')
    query = sys.stdin.read().strip()
    if not query:
        raise ConfigError("the query read from stdin is empty")
    return query


def _start(runner: Runner, view: ProgressView) -> None:
    view.thinking()
    runner.start()
    info = runner.sandbox.info if runner.sandbox else None
    err_console.print(
        f"[dim]session {runner.session_name} · container "
        f"{info.container_name if info else '?'} · "
        f"{'read-only' if runner.options.read_only else 'read-write'} · "
        f"{info.workspace if info else '?'} workspace · model {escape(runner.model.name)}[/]"
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
    stream: StreamOpt = None,
    trace: TraceOpt = False,
    max_turns: MaxTurnsOpt = None,
    image: ImageOpt = None,
    timeout: TimeoutOpt = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive", "-i", help="A REPL: several requests in one session and one container."
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
        typer.Option("--resume", help="Continue --session, or this root's most recent session."),
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
            help="Deny shell commands starting with this (repeatable).",
            show_default=False,
        ),
    ] = None,
    env: EnvOpt = None,
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
) -> None:
    """Ask the agent to do something in DIR; every tool call runs in a sandbox container.

    The final answer goes to stdout; progress and tool activity to stderr. Writes and shell
    commands ask y/n at a terminal; without one they are denied unless --yes (fail closed).
    """
    if query is None and not interactive:
        query = _query_from_stdin()
    at_terminal = bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)
    options = _settings(
        provider=provider,
        model=model,
        host=host,
        tool_protocol=tool_protocol,
        stream=stream,
        max_turns=max_turns,
        image=image,
        timeout=timeout,
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
    ) | {
        "read_only": read_only,
        "yes": yes,
        "resume": resume,
        "context_summarize": context_summarize,
        "audit_required": audit_required,
        "audit_prompts": audit_prompts,
    }
    if allow_git_writes:
        options["allow_git_writes"] = True
    runner, view = _prepare(root, options, stream=stream, trace=trace, audit=not no_audit,
                            interactive=at_terminal)
    check_apply(runner, apply)
    try:
        with runner:
            _start(runner, view)
            if interactive:
                _repl(runner, view, query)
            else:
                _answer(runner.run(query or ""), view)
    finally:
        show_changes(runner)
    if apply and runner.changes is not None:
        run_apply(runner.options.root, runner.changes, yes=yes, at_terminal=at_terminal,
                  audit=not no_audit, to_stderr=True)


def _streams_text(runner: Runner, stream: bool | None) -> bool:
    """Stream prose, not a tool protocol's JSON; off a terminal only when asked for."""
    prose = getattr(runner.model, "tool_protocol", "native") == "native"
    return prose and (stream is True or (stream is None and err_console.is_terminal))


def _answer(result: RunResult, view: ProgressView) -> None:
    view.close()
    err_console.print(
        f"[dim]done in {result.turns} turn(s), {len(result.tool_calls)} tool call(s)[/]"
    )
    if not (view.last_reply_streamed and sys.stdout.isatty()):  # already on this screen
        typer.echo(result.answer)


def _prompt() -> str:
    """The REPL prompt, shown only to a person (piped input gets none)."""
    return "[bold cyan]you>[/] " if sys.stdin.isatty() else ""


def _repl(runner: Runner, view: ProgressView, first: str | None) -> None:
    """Read requests until EOF or 'exit'; one session, one container, one conversation."""
    err_console.print("[dim]interactive session: empty line or Ctrl-D to leave[/]")
    pending = first
    while True:
        if pending is None:
            try:
                pending = err_console.input(_prompt()).strip()
            except EOFError:
                return
        if pending in ("", "exit", "quit"):
            return
        try:
            _answer(runner.run(pending), view)
        except SandboxAgentError as exc:  # one failed request does not end the session
            view.close()
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        pending = None


# -- review --------------------------------------------------------------------------------------


class ReportFormat(StrEnum):
    """Formats of the review report."""

    markdown = "markdown"
    json = "json"


REVIEW_PROMPT = (
    "Review the code of this project{scope}. Inspect the relevant files with the tools first. "
    "Then answer with a code review: a one-paragraph summary, then a list of findings, each "
    "with file:line, severity (high, medium or low) and a concrete suggestion. Only report "
    "problems you have seen in the code."
)
MAX_DIFF_CHARS = 60_000


@cli_errors
def review(
    root: RootOption = Path("."),
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the report here (default: stdout).",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        ReportFormat, typer.Option("--format", "-f", help="Report format.")
    ] = ReportFormat.markdown,
    diff_base: Annotated[
        str | None,
        typer.Option(
            "--diff-base", help="Review only the changes since this git ref.", show_default=False
        ),
    ] = None,
    provider: ProviderOpt = None,
    model: ModelOpt = None,
    host: HostOpt = None,
    tool_protocol: ProtocolOpt = None,
    stream: StreamOpt = None,
    trace: TraceOpt = False,
    max_turns: MaxTurnsOpt = None,
    image: ImageOpt = None,
    timeout: TimeoutOpt = None,
    max_tokens: MaxTokensOpt = None,
    policy: PolicyOpt = None,
    deny_tool: DenyToolOpt = None,
    deny_prefix: DenyPrefixOpt = None,
    no_audit: NoAuditOpt = False,
    audit_required: AuditRequiredOpt = False,
    workspace: WorkspaceOpt = None,
    exclude: ExcludeOpt = None,
) -> None:
    """Review DIR read-only and non-interactively (for CI): writes a report, exit 0 on success.

    The container mounts the project read-only and no write or shell tool is offered.
    """
    root = root.resolve()
    _check_output(output)
    query = _review_query(root, diff_base)
    options = _settings(
        provider=provider,
        model=model,
        host=host,
        tool_protocol=tool_protocol,
        stream=stream,
        max_turns=max_turns,
        image=image,
        timeout=timeout,
        max_tokens=max_tokens,
        deny_tools=deny_tool,
        deny_prefixes=deny_prefix,
        policy_file=policy,
        workspace=workspace,
        copy_exclude=exclude,
    ) | {"read_only": True, "audit_required": audit_required}
    runner, view = _prepare(root, options, stream=stream, trace=trace, audit=not no_audit,
                            interactive=False)
    meta = {
        "root": str(root),
        "diff_base": diff_base,
        "provider": runner.settings.provider,
        "model": runner.model.name,
    }
    try:
        with runner:
            _start(runner, view)
            result = runner.run(query)
            view.close()
    except SandboxAgentError as exc:
        _write_report(_error_report(meta, runner, exc), fmt, output)
        raise
    _write_report(_report(meta, runner, result), fmt, output)


def _review_query(root: Path, diff_base: str | None) -> str:
    if diff_base is None:
        return REVIEW_PROMPT.format(scope="")
    diff = git_diff(root, diff_base)
    if not diff.strip():
        raise ConfigError(f"no changes since {diff_base}: nothing to review")
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[... diff truncated at {MAX_DIFF_CHARS} characters ...]"
    return REVIEW_PROMPT.format(scope=f", focusing on these changes since {diff_base}") + (
        f"\n\n```diff\n{diff}\n```"
    )


def git_diff(root: Path, base: str) -> str:
    """`git diff BASE` of the working tree, run on the host without external diff programs."""
    command = [
        "git",
        "-C",
        str(root),
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        base,
        "--",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run git diff: {exc}") from exc
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no reason given"])[0]  # git adds usage
        raise ConfigError(
            f"git diff {base} failed: {reason[:300]}",
            fix="--diff-base needs a git repository and an existing ref",
        )
    return done.stdout


def _report(meta: dict[str, Any], runner: Runner, result: RunResult) -> dict[str, Any]:
    calls = [
        {"tool": r.call.name, "arguments": r.call.arguments, "ok": r.result.ok}
        for r in result.tool_calls
    ]
    return {
        "status": "ok",
        **meta,
        "session": runner.session_name,
        "turns": result.turns,
        "tool_calls": calls,
        "review": result.answer,
    }


def _error_report(meta: dict[str, Any], runner: Runner, exc: SandboxAgentError) -> dict[str, Any]:
    return {
        "status": "error",
        **meta,
        "session": runner.session_name,
        "error": {"type": type(exc).__name__, "message": str(exc), "exit_code": exc.exit_code},
    }


def _check_output(output: Path | None) -> None:
    """Fail before the review runs, not after, when the report cannot be written there."""
    if output is not None and not output.parent.is_dir():
        raise ConfigError(
            f"cannot write the report to {output}: {output.parent} is not a directory",
            fix="create the directory first, or pass another --output",
        )


def _write_report(report: dict[str, Any], fmt: ReportFormat, output: Path | None) -> None:
    text = (
        json.dumps(report, indent=2, ensure_ascii=False)
        if fmt is ReportFormat.json
        else _markdown(report)
    )
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {output}: {exc.strerror}") from exc
    err_console.print(f"[dim]report written to {escape(str(output))}[/]")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _markdown(report: dict[str, Any]) -> str:
    scope = f" (changes since `{report['diff_base']}`)" if report.get("diff_base") else ""
    head = f"# Code review of `{report['root']}`{scope}\n\n"
    facts = f"_model {report['model']} ({report['provider']}), session {report['session']}"
    if report["status"] != "ok":
        return head + f"**Review failed:** {report['error']['message']}\n\n{facts}_"
    tools = ", ".join(sorted({c["tool"] for c in report["tool_calls"]})) or "none"
    return (
        head
        + str(report["review"]).strip()
        + f"\n\n---\n{facts}, {_plural(report['turns'], 'turn')}, tools used: {tools}_"
    )


# -- copy workspace ------------------------------------------------------------------------------


def check_apply(runner: Runner, apply: bool) -> None:
    """--apply needs a read-write copy workspace: say so before anything runs."""
    if apply and (runner.settings.workspace != "copy" or runner.options.read_only):
        raise ConfigError("--apply applies a copy workspace's changes",
                          fix="add --workspace copy (and drop --read-only)")


def show_changes(runner: Runner) -> None:
    """After a copy session: what changed, and how to review and apply it (on stderr)."""
    changes = runner.changes
    if changes is None:
        return
    todo = pending(runner.options.root, changes)
    for line in summary(changes, todo, root=str(runner.options.root)):
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
