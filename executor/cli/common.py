"""What every command shares: the stderr console, one-line errors with exit codes, --root."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar, cast

import typer

from executor.errors import EXIT_INTERRUPTED, SandboxAgentError
from executor.text import inert, inert_json, markup_safe

if TYPE_CHECKING:
    from executor.console import InertConsole

P = ParamSpec("P")
R = TypeVar("R")


class _LazyConsole:
    """An InertConsole made on first use, so commands that print nothing rich start fast."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: InertConsole | None = None

    def real(self) -> InertConsole:
        """The console itself (for Rich objects that use it as a context manager)."""
        if self._console is None:
            from executor.console import InertConsole

            self._console = InertConsole(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)

    def __enter__(self) -> InertConsole:
        self.real().__enter__()
        return self.real()

    def __exit__(self, *exc: object) -> None:
        self.real().__exit__(*exc)


def real_console(console: InertConsole) -> InertConsole:
    """`err_console` or `out_console` as the Rich console it stands for."""
    return console.real() if isinstance(console, _LazyConsole) else console


#: Progress, tool activity and errors go to stderr; stdout carries only results. Both print
#: every string inert (executor/text.py): what they show is never interpreted by the terminal.
err_console = cast("InertConsole", _LazyConsole(stderr=True, highlight=False, soft_wrap=True))
out_console = cast("InertConsole", _LazyConsole(highlight=False, soft_wrap=True))

RootOption = Annotated[
    Path,
    typer.Option(
        "--root",
        "-r",
        help="The project's root directory.",
        file_okay=False,
        resolve_path=True,
    ),
]


def fail(error: SandboxAgentError) -> typer.Exit:
    """Print `error` as one line (plus its fix) and return the Exit to raise."""
    # Messages quote servers, files and flags: their brackets are text, not markup.
    err_console.print(f"[bold red]error:[/] {markup_safe(error.message)}", markup=True)
    from executor.cli.fixes import fix_for

    fix = fix_for(error)
    if fix:
        err_console.print(f"[dim]fix:[/] {markup_safe(fix)}", markup=True)
    return typer.Exit(error.exit_code)


def existing_root(root: Path) -> Path:
    """`root` with its links resolved; ConfigError when it is no directory (a typo: "no
    changes in ./nosuch" would read as a project with nothing pending, a traceback worse)."""
    from executor.errors import ConfigError
    from executor.state import real_root

    real = real_root(root)
    if not real.is_dir():
        raise ConfigError(f"project root {root} is not a directory",
                          fix="pass an existing --root (the project's directory)")
    return real


def echo_result(text: str, *, json_text: bool = False) -> None:
    """A result on stdout: inert for a person at a terminal, the data itself for a pipe or file."""
    if sys.stdout.isatty():
        text = inert_json(text) if json_text else inert(text)
    # Not typer.echo: click strips what looks like ANSI styling from piped output.
    sys.stdout.write(encodable(text) + "\n")
    sys.stdout.flush()


def say(line: str) -> None:
    """A plain line on stderr, inert already, without loading Rich (quick commands start
    fast)."""
    sys.stderr.write(encodable(line) + "\n")
    sys.stderr.flush()


def encodable(text: str) -> str:
    """`text` writable as UTF-8: lone surrogates (undecodable bytes) become escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def to_file(output: Path | None) -> Path | None:
    """An `--output` value: None for stdout (`-` or not given), else the file to write."""
    return None if output is None or str(output) == "-" else output


def cli_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn sandbox-agent errors into one clear line and their exit code; Ctrl-C into 130."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SandboxAgentError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            from executor.signals import ignore_from_now

            ignore_from_now()
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper
