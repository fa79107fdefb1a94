"""`sandbox-agent ask -i`: several requests in one session, one container, one conversation.

At a terminal the prompt has line editing and a history kept per project in the user state dir
(prompt_toolkit; `<state>/projects/<project>/repl_history`, mode 0600). Ctrl-C cancels the
request being answered (a running command is killed) and comes back to the prompt; at an idle
prompt, Ctrl-C twice in a row (or Ctrl-D, or /exit) leaves. An empty line does nothing. With
stdin not a terminal, requests are read line by line (no prompt_toolkit) until EOF.

Slash commands are registered with `@slash_command(name, help)`; /diff and /undo in
`executor.cli.repl_workspace` (loaded by `_load`), with the code of the `diff` and `undo`
commands.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executor.cli.common import err_console
from executor.signals import Terminated
from executor.text import inert, markup_safe

if TYPE_CHECKING:
    from executor.runner import Runner
    from executor.ui import ProgressView

HISTORY_FILE = "repl_history"
PROMPT = "you> "
PLUGINS = ("executor.cli.repl_workspace",)
"""Modules that may register slash commands (loaded when they exist)."""


@dataclass(frozen=True)
class SlashCommand:
    """A REPL command: `/name [argument]`."""

    name: str
    help: str
    run: Callable[[Repl, str], None]


COMMANDS: dict[str, SlashCommand] = {}


def slash_command(name: str, help: str) -> Callable[[Callable[[Repl, str], None]], SlashCommand]:
    """Register (or replace) `/name`; the function gets the REPL and the rest of the line."""

    def register(fn: Callable[[Repl, str], None]) -> SlashCommand:
        COMMANDS[name] = SlashCommand(name, help, fn)
        return COMMANDS[name]

    return register


@dataclass
class Repl:
    """The loop: read a request, answer it, repeat."""

    runner: Runner
    view: ProgressView
    answer: Callable[[str], object]
    """Runs one request and shows its answer (the CLI's one-shot path)."""
    done: bool = False
    notes: list[str] = field(default_factory=list)

    def run(self, first: str | None) -> None:
        """Answer `first`, then every request read, until EOF, /exit or Ctrl-C twice."""
        _load()
        self.view.close()  # nothing spins behind the prompt
        at_terminal = sys.stdin.isatty() and err_console.is_terminal
        err_console.print("[dim]interactive session: /help for commands, Ctrl-D or /exit to "
                          "leave, Ctrl-C cancels a request[/]" if at_terminal else
                          "[dim]interactive session: reading requests from stdin[/]")
        self.show_last_exchange()
        if first:
            self.handle(first)
        lines = self._terminal_lines() if at_terminal else _piped_lines()
        for line in lines:
            self.handle(line)
            if self.done:
                return

    def handle(self, line: str) -> None:
        """One line: a slash command, a request, or nothing."""
        text = line.strip()
        if not text:
            return
        if text.startswith("/") and not text.startswith("//"):
            self.command(text[1:])
            return
        if text in ("exit", "quit"):  # as before slash commands existed
            self.done = True
            return
        try:
            self.answer(text)
        except Terminated:
            raise
        except KeyboardInterrupt:
            self.view.interrupted()
            self.runner.settle()
            err_console.print("[yellow]cancelled[/] [dim](the request was stopped; the "
                              "conversation goes on)[/]")

    def command(self, text: str) -> None:
        """Run `/name argument`."""
        name, _, argument = text.partition(" ")
        found = COMMANDS.get(name.lower())
        if found is None:
            err_console.print(f"unknown command /{markup_safe(name, line=True)}: /help lists "
                              "them")
            return
        found.run(self, argument.strip())

    def show_last_exchange(self) -> None:
        """On resume: the last request and its answer, so the person knows where they are."""
        agent = self.runner.agent
        messages = agent.messages if agent is not None else []
        users = [i for i, m in enumerate(messages) if m.role == "user"
                 and not m.content.startswith(("TOOL_RESULT ", "Your last reply could not"))]
        if not users:
            return
        last = users[-1]
        reply = next((m.content for m in reversed(messages[last:])
                      if m.role == "assistant" and m.content and not m.tool_calls), "")
        err_console.print("[dim]last exchange:[/]")
        err_console.print(f"[bold cyan]{PROMPT}[/]{markup_safe(messages[last].content)}")
        if reply:  # on stderr: stdout carries only this session's new answers
            err_console.print(inert(reply), markup=False, highlight=False)

    def _terminal_lines(self) -> Iterator[str]:
        """Lines typed at the prompt (prompt_toolkit), with history and line editing."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.completion import WordCompleter
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.output import create_output
        from prompt_toolkit.styles import Style

        words = [f"/{name}" for name in COMMANDS]
        session: PromptSession[str] = PromptSession(
            history=FileHistory(str(history_file(self.runner))),
            output=create_output(stdout=sys.stderr),
            completer=WordCompleter(words, sentence=True, pattern=None),
            complete_while_typing=False,
            style=Style.from_dict({"prompt": "bold ansicyan"}),
            multiline=True, key_bindings=_multi_line_keys(),
            prompt_continuation=lambda width, line, wrap: "." * (width - 1) + " ",
        )
        interrupted = False
        while True:
            try:
                line = session.prompt([("class:prompt", PROMPT)])
            except EOFError:
                return
            except Terminated:  # SIGTERM or a hang-up at the prompt ends the session
                raise
            except KeyboardInterrupt:
                if interrupted:
                    return
                interrupted = True
                err_console.print("[dim](Ctrl-C again, Ctrl-D or /exit to leave)[/]")
                continue
            interrupted = False
            yield line


def _multi_line_keys() -> Any:
    """Enter sends the request, unless the line ends in `\\` (it goes on on the next line);
    Alt-Enter (Esc, Enter) starts a new line."""
    from prompt_toolkit.key_binding import KeyBindings

    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _new_line(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("enter")
    def _send(event: Any) -> None:
        buffer = event.current_buffer
        if buffer.document.is_cursor_at_the_end and buffer.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    return keys


def _piped_lines() -> Iterator[str]:
    """Requests from a non-terminal stdin, one a line (a line ending in `\\` goes on on the
    next one), until EOF."""
    pending = ""
    while True:
        line = sys.stdin.readline()
        if not line:
            if pending:
                yield pending
            return
        if line.rstrip("\n").endswith("\\"):
            pending += line.rstrip("\n")[:-1] + "\n"
            continue
        yield pending + line
        pending = ""


def history_file(runner: Runner) -> str:
    """The project's REPL history in the user state dir: a private file we own."""
    from executor.state import ensure_project_dir, open_private

    path = ensure_project_dir(runner.options.root) / HISTORY_FILE
    with contextlib.suppress(OSError):  # a bad file only costs the history
        os.close(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
        return str(path)
    return os.devnull


def _load() -> None:
    """Import the modules that register more slash commands, where they exist."""
    for name in PLUGINS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


# -- the commands --------------------------------------------------------------------------------


@slash_command("help", "list the commands")
def _help(repl: Repl, argument: str) -> None:
    for command in sorted(COMMANDS.values(), key=lambda c: c.name):
        err_console.print(f"  [bold]/{command.name}[/]  {markup_safe(command.help)}")
    err_console.print("  [dim]anything else is a request for the agent; Ctrl-C cancels one[/]")


@slash_command("exit", "leave the session (Ctrl-D too)")
def _exit(repl: Repl, argument: str) -> None:
    repl.done = True


COMMANDS["quit"] = SlashCommand("quit", "leave the session", _exit.run)


@slash_command("usage", "tokens, model turns and tool calls of this session so far")
def _usage(repl: Repl, argument: str) -> None:
    import time

    totals = repl.view.session
    err_console.print(f"session {markup_safe(repl.runner.session_name or '?', line=True)}: "
                      + markup_safe(totals.line(time.monotonic() - totals.started)))
    approver = repl.runner.approver
    grants = getattr(approver, "grants", None)
    for grant in getattr(grants, "grants", []):
        err_console.print(f"  always allowed: {markup_safe(grant.describe(), line=True)}")


@slash_command("clear", "forget the conversation so far (same session and container)")
def _clear(repl: Repl, argument: str) -> None:
    repl.runner.clear()
    err_console.print("conversation cleared: the next request starts afresh")


@slash_command("compact", "replace the conversation so far by the model's summary of it")
def _compact(repl: Repl, argument: str) -> None:
    from executor.errors import SandboxAgentError

    try:
        summary = repl.runner.compact()
    except SandboxAgentError as exc:
        err_console.print(f"[bold red]error:[/] nothing compacted: {markup_safe(str(exc))}")
        return
    if summary is None:
        err_console.print("nothing to compact yet")
        return
    err_console.print(f"compacted; the summary the model will go on from:\n"
                      f"{markup_safe(inert(summary))}", highlight=False)


@slash_command("model", "show the model, or switch to another of the same provider: /model NAME")
def _model(repl: Repl, argument: str) -> None:
    runner = repl.runner
    protocol = runner.model.tool_protocol
    if not argument:
        err_console.print(f"model {markup_safe(runner.model.name, line=True)} "
                          f"({runner.settings.provider}, tool protocol {protocol})")
        return
    if runner.settings.provider == "embedded":
        err_console.print("the embedded model cannot be switched within a session")
        return
    name = _served(runner, argument)
    if name is not None:
        runner.switch_model(name)
        err_console.print(f"model is now {markup_safe(runner.model.name, line=True)}")


def _served(runner: Runner, name: str) -> str | None:
    """The server's name for model `name`, or None (said why) when it does not have it."""
    from executor.cli.system import available_models, missing_model, served_name
    from executor.errors import SandboxAgentError

    try:
        names = available_models(runner.settings)
    except SandboxAgentError as exc:
        err_console.print(f"[bold red]error:[/] cannot list the server's models, so {name!r} "
                          f"is not taken: {markup_safe(str(exc))}")
        return None
    found = served_name(name, names, runner.settings.provider)
    if found is None:
        error = missing_model(runner.settings, name, names)
        err_console.print(f"[bold red]error:[/] {markup_safe(error.message)} (still "
                          f"{markup_safe(runner.model.name, line=True)})")
        err_console.print(f"[dim]fix:[/] {markup_safe(error.fix or '')}")
    return found

