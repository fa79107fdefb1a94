"""The `sandbox-agent` command line (typer + rich).

Results go to stdout, progress and errors to stderr. Every error is one line (plus its fix)
and a distinct exit code, listed in docs/EXIT_CODES.md and at the end of `--help`.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from executor import __version__
from executor.cli import audit, policy, sessions
from executor.cli.common import fail
from executor.cli.improve import improve
from executor.cli.review import review as review_command
from executor.cli.run import ask, orchestrate
from executor.cli.system import doctor, gc, image_app, models
from executor.cli.workspace import apply_command, diff_command, undo_command
from executor.errors import ConfigError

EPILOG = (
    "Exit codes: 0 ok · 1 failed check · 2 usage or config error · 3 bad policy file · "
    "4 no such session · 10-16 sandbox (11 no Docker engine, 12 no image, 13/14 toolbox, "
    "15 engine cannot see the root, "
    "16 no such runtime) · "
    "20-25 model (21 unreachable, 22 timeout, 23 refused, 24 embedded model, 25 request "
    "longer than the model's window) · "
    "31 max turns or no progress · 32 calls denied (--fail-on-denied) · 33 review findings "
    "(--fail-on) · 34 answered but every change it tried failed · "
    "40/41 session file · 50/51 audit · 60-64 workspace (61 conflict: files changed on the "
    "host were not applied, 62 project too big to copy, 63 apply or undo declined, "
    "64 undo could not restore everything) · "
    "130 interrupted. "
    "See docs/EXIT_CODES.md."
)

app = typer.Typer(
    name="sandbox-agent",
    help="A coding agent whose every file and shell tool call runs in a hardened container.",
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command(epilog=EPILOG)(ask)
app.command(epilog=EPILOG)(orchestrate)
app.command(epilog=EPILOG)(review_command)
app.command(epilog=EPILOG)(improve)
app.command("diff", epilog=EPILOG)(diff_command)
app.command("apply", epilog=EPILOG)(apply_command)
app.command("undo", epilog=EPILOG)(undo_command)
app.command()(doctor)
app.command()(gc)
app.command()(models)
app.add_typer(image_app, name="image")
app.add_typer(sessions.app, name="sessions")
app.add_typer(audit.app, name="audit")
app.add_typer(policy.app, name="policy")


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


# click's UsageError and ClickException, from whichever click typer uses (it may vendor one).
_UsageError: type[Any] = typer.BadParameter.__mro__[1]
_ClickException: type[Any] = _UsageError.__mro__[1]


def main() -> None:
    """Console-script entry point: click's usage errors in the house format too."""
    if sys.argv[1:] == ["--version"]:  # without building every command's options first
        typer.echo(f"sandbox-agent {__version__}")
        return
    from executor.cli.actions import guard_streams

    guard_streams()  # under GitHub Actions no model text is a workflow command
    if not sys.argv[1:] and sys.stdin.isatty() and sys.stderr.isatty():
        sys.argv.append("ask")  # `sandbox-agent` alone at a terminal: the REPL, as claude does
    try:
        code = app(standalone_mode=False)
    except _UsageError as exc:  # a bad flag value, an unknown option, a missing argument
        if type(exc).__name__ == "NoArgsIsHelpError":  # `sandbox-agent` alone: the help
            exc.show()
            code = exc.exit_code
        else:
            command = exc.ctx.command_path if exc.ctx else "sandbox-agent"
            code = _usage_error(exc.format_message(), f"see `{command} --help`", exc.exit_code)
    except _ClickException as exc:
        code = _usage_error(exc.format_message(), None, exc.exit_code)
    except typer.Abort:
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(message: str, fix: str | None, code: int) -> int:
    """One `error:` line (lower-cased like ours) and its fix; the exit code."""
    message = message.replace("Value error, ", "").removesuffix(".")
    fail(ConfigError(message[:1].lower() + message[1:], fix=fix))
    return code
