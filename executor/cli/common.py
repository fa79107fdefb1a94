"""What every command shares: the stderr console, one-line errors with exit codes, --root."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from executor.errors import EXIT_INTERRUPTED, SandboxAgentError

P = ParamSpec("P")
R = TypeVar("R")

#: Progress, tool activity and errors go to stderr; stdout carries only results.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)

RootOption = Annotated[
    Path,
    typer.Option(
        "--root",
        "-r",
        help="Project root (mounted at /workspace in the sandbox).",
        file_okay=False,
        resolve_path=True,
    ),
]


def fail(error: SandboxAgentError) -> typer.Exit:
    """Print `error` as one line (plus its fix) and return the Exit to raise."""
    # Messages quote servers, files and flags: their brackets are text, not markup.
    err_console.print(f"[bold red]error:[/] {escape(error.message)}", markup=True)
    if error.fix:
        err_console.print(f"[dim]fix:[/] {escape(error.fix)}", markup=True)
    return typer.Exit(error.exit_code)


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn sandbox-agent errors into one clear line and their exit code; Ctrl-C into 130."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SandboxAgentError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper
