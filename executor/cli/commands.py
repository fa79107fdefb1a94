"""The `sandbox-agent` app: its commands, each loaded only when it runs or a help shows it.

A command's module (and what it imports) costs start-up time for every other command, so the
top-level group holds names and where to find them; `sandbox-agent sessions` imports the
sessions module, not review's or doctor's (benchmarks/bench_startup.py has the figures).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from executor import __version__

EPILOG = (
    "Exit codes: 0 ok · 1 failed check · 2 usage or config error · 3 bad policy file · "
    "4 no such session · 10-16 sandbox (11 no Docker engine, 12 no image, 13/14 toolbox, "
    "15 engine cannot see the root, "
    "16 no such runtime) · "
    "20-25 model (21 unreachable, 22 timeout, 23 refused, 24 embedded model, 25 request "
    "longer than the model's window) · "
    "30 agent could not finish (unusable replies) · 31 max turns or no progress · "
    "32 calls denied (--fail-on-denied) · 33 review findings "
    "(--fail-on) · 34 answered but every change it tried failed · 35 answered but the "
    "answer was cut short · "
    "40/41 session file · 50/51 audit · 60-64 workspace (61 conflict: files changed on the "
    "host were not applied, 62 project too big to copy, 63 apply or undo declined, "
    "64 undo could not restore everything) · "
    "130 interrupted. "
    "See docs/EXIT_CODES.md."
)
HELP = "A coding agent whose every file and shell tool call runs in a hardened container."

COMMANDS: dict[str, tuple[str, str, bool]] = {
    "ask": ("executor.cli.run", "ask", True),
    "orchestrate": ("executor.cli.run", "orchestrate", True),
    "review": ("executor.cli.review", "review", True),
    "improve": ("executor.cli.improve", "improve", True),
    "diff": ("executor.cli.workspace", "diff_command", True),
    "apply": ("executor.cli.workspace", "apply_command", True),
    "undo": ("executor.cli.workspace", "undo_command", True),
    "doctor": ("executor.cli.system", "doctor", False),
    "gc": ("executor.cli.system", "gc", False),
    "models": ("executor.cli.system", "models", False),
    "image": ("executor.cli.system", "image_app", False),
    "sessions": ("executor.cli.sessions", "app", False),
    "audit": ("executor.cli.audit", "app", False),
    "policy": ("executor.cli.policy", "app", False),
}
"""Each command, in --help's order: (module, the function or Typer app, exit codes in its
--help)."""


def load(name: str) -> Any:
    """The click command `name`, built as the app's own (same markup mode, same epilog)."""
    module, attribute, epilog = COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False,
                         add_completion=False)
    holder.callback()(lambda: None)  # a group, whatever it holds: the command keeps its name
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name, epilog=EPILOG if epilog else None)(target)
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class _Commands(MutableMapping[str, Any]):
    """The group's commands by name; each built on first use."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*COMMANDS, *(n for n in self._built if n not in COMMANDS)])

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._built))


class LazyGroup(TyperGroup):
    """The top-level group: every command listed, none imported until it is needed."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.commands = _Commands()


app = typer.Typer(
    name="sandbox-agent",
    cls=LazyGroup,
    help=HELP,
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sandbox-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """A coding agent whose every file and shell tool call runs in a hardened container."""
