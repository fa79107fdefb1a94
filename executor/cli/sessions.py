"""`sandbox-agent sessions`: list, show and remove the saved sessions of a project."""


import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.cli.common import (
    RootOption,
    cli_errors,
    echo_result,
    err_console,
    out_console,
    say,
)
from executor.cli.listing import TITLES, cells, plain_table
from executor.text import inert, inert_line

if TYPE_CHECKING:  # imported where used, so that `--help` loads neither pydantic nor Rich
    from rich.table import Table
    from rich.text import Text

    from executor.messages import Message
    from executor.session import Entry, SessionContents

app = typer.Typer(
    help="List, show and remove the saved sessions of a project (newest first).",
    invoke_without_command=True,
    no_args_is_help=False,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print a JSON array, not a table.")]
FullOption = Annotated[bool, typer.Option("--full", help="Do not shorten tool results.")]
NameArgument = Annotated[str, typer.Argument(help="Session name (see `sandbox-agent sessions`).")]

SHORT_LINES = 12
SHORT_CHARS = 1200


def _root(ctx: typer.Context, root: Path) -> Path:
    """`--root` of the subcommand, else the one given before it (`sessions --root D show X`)."""
    parent = ctx.parent.params.get("root") if ctx.parent else None
    source = ctx.get_parameter_source("root")
    if getattr(source, "name", None) == "DEFAULT" and parent is not None:
        return Path(parent)
    return root


@app.callback()
@cli_errors
def sessions(ctx: typer.Context, root: RootOption = Path("."), as_json: JsonOption = False) -> None:
    """List the sessions of --root, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    rows = _listing(root)
    if not rows and not root.is_dir():  # a typo, not a project without sessions
        from executor.errors import ConfigError

        raise ConfigError(f"project root {root} is not a directory",
                          fix="pass the --root the sessions ran on")
    if as_json:
        dump = json.dumps(rows, indent=2, ensure_ascii=False)
        echo_result(dump, json_text=True)  # an escaped surrogate is still valid JSON
    elif not rows:
        say(f"no sessions in {inert_line(str(root))}")
    else:
        shown = cells(rows)
        plain = plain_table(shown)
        if plain is not None:
            sys.stdout.write(plain)
        else:
            out_console.print(_table(shown))


def _listing(root: Path) -> list[dict[str, Any]]:
    """The sessions of `root`, newest first (`SessionSummary`'s fields), read without
    pydantic: the header and the tail of each file (executor/session_index.py)."""
    from executor.session_index import summary_rows

    return summary_rows(root)


_STATUS_STYLES = {"ok": "green", "error": "red", "max_turns": "yellow", "incomplete": "yellow",
                  "truncated": "yellow", "interrupted": "yellow",
                  "unfinished": "yellow", "unreadable": "red"}


def _table(rows: list[tuple[str, ...]]) -> "Table":
    from rich.table import Table
    from rich.text import Text

    # At a terminal it fills the width; in a pipe it is as wide as its cells (no padding).
    table = Table(box=None, header_style="bold", pad_edge=False, expand=out_console.is_terminal)
    for title in TITLES[:-1]:
        table.add_column(title, no_wrap=True, justify="right" if title == "turns" else "left")
    # Expanded, the ratio column gets what is left of the width: the others are never squeezed.
    table.add_column(TITLES[-1], overflow="ellipsis", no_wrap=True, ratio=1, min_width=8)
    for row in rows:
        table.add_row(*(Text(cell, style=_STATUS_STYLES.get(cell, "")) if i == 3 else Text(cell)
                        for i, cell in enumerate(row)))
    return table


@app.command("show")
@cli_errors
def show(
    ctx: typer.Context, name: NameArgument, root: RootOption = Path("."), full: FullOption = False
) -> None:
    """Print the transcript of a session: messages, tool calls and (shortened) results."""
    from executor.session import NdjsonSessionStore, SessionWarning

    store = NdjsonSessionStore.open(_root(ctx, root), name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)  # printed below as one clean line
        contents = store.read()
    for note in contents.warnings:
        err_console.print(f"warning: {inert_line(note)}", style="yellow", markup=False)
    out_console.print(_heading(contents))
    for entry in contents.entries:
        if entry.event != "header_update":  # already folded into the heading
            out_console.print(_entry(entry, full))


@app.command("rm")
@cli_errors
def rm(
    ctx: typer.Context,
    name: NameArgument,
    root: RootOption = Path("."),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a session file (asks first at a terminal, unless --yes)."""
    from executor.session import remove_session

    root = _root(ctx, root)
    if not yes and sys.stdin.isatty() and not _confirm(root, name):
        err_console.print(f"kept session {inert_line(name)}", markup=False)
        return
    path = remove_session(root, name)
    err_console.print(f"removed session {inert_line(name)} ({inert_line(str(path))})",
                      markup=False)


def _confirm(root: Path, name: str) -> bool:
    """y/yes at the terminal; anything else keeps the session."""
    from rich.text import Text

    from executor.session import NdjsonSessionStore, SessionWarning

    store = NdjsonSessionStore.open(root, name)  # SessionNotFoundError before asking
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)
        count = len(store.read().messages)
    prompt = f"delete session {inert_line(name)} ({count} messages)? [y/N] "
    try:
        answer = err_console.input(Text(prompt)).strip().lower()
    except EOFError:
        return False
    return answer in ("y", "yes")


# --- transcript ---------------------------------------------------------------------------------
# Everything a session file holds was chosen by the model, the repository or the sandbox: it is
# shown inert (escape sequences and bidi characters visible, never interpreted).


def _heading(contents: "SessionContents") -> "Text":
    from rich.text import Text

    h = contents.header
    text = Text(f"session {inert_line(h.name)}", style="bold")
    facts = {
        "model": f"{h.model} ({h.provider})" if h.provider else h.model,
        "started": h.started_at,
        "root": h.root,
        "image": f"{h.image} {h.image_digest[:19]}".strip(),
        "mount": h.mount_mode,
        "container": h.container,
    }
    text.append("".join(f"\n  {key} {inert_line(str(value))}" for key, value in facts.items()
                        if value), "dim")
    return text


def _shorten(text: str, full: bool) -> str:
    lines = text.removesuffix("\n").split("\n")  # a CR in tool output is shown, not obeyed
    if full or (len(lines) <= SHORT_LINES and len(text) <= SHORT_CHARS):
        return text
    kept = "\n".join(lines[:SHORT_LINES])[:SHORT_CHARS]
    rest = len(lines) - kept.count("\n") - 1
    return f"{kept}\n… {rest} more lines, {len(text) - len(kept)} more chars (--full shows all)"


def _entry(entry: "Entry", full: bool) -> "Text":
    from rich.text import Text

    time = Text(f"[{entry.ts[11:19]}] ", style="dim")
    if entry.message is None:
        return time + Text(f"— {_event(entry)}", style="dim italic")
    return time + _message(entry.message, full)


def _event(entry: "Entry") -> str:
    """An event in words: how a run ended, a resume, a repair (inert, one line)."""
    data = entry.data
    if entry.event == "run_end":
        turns = f" after {data['turns']} turn(s)" if isinstance(data.get("turns"), int) else ""
        error = f": {data['error']}" if data.get("error") else ""
        return inert_line(f"run ended: {data.get('status', '?')}{turns}{error}")
    if entry.event == "resumed":
        return inert_line(f"resumed with model {data.get('model', '?')}")
    facts = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in data.items())
    return inert_line(f"{entry.event} {facts}".strip())


ROLE_STYLES = {"system": "magenta", "user": "bold green", "assistant": "bold cyan", "tool": "blue"}


def _message(message: "Message", full: bool) -> "Text":
    """One message as a person reads it (inert), tool results shortened unless `full`."""
    from rich.text import Text

    text = Text(message.role, style=ROLE_STYLES[message.role])
    if message.role == "tool":
        text.append(f" {inert_line(f'{message.name} ({message.tool_call_id})')}", style="blue")
    for call in message.tool_calls:
        shown = inert_line(f"{call.name}({_arguments(call.arguments, full)})")
        text.append(f"\n  → {shown}", style="cyan")
    if message.content:
        short = message.role in ("tool", "system")
        body = inert(_shorten(message.content, full or not short))
        text.append("\n" + "\n".join("  " + line for line in body.removesuffix("\n").split("\n")))
    return text


def _arguments(arguments: dict[str, object], full: bool) -> str:
    parts = [f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()]
    joined = ", ".join(parts)
    return joined if full or len(joined) <= 300 else joined[:299] + "…"
