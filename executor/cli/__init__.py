"""The `sandbox-agent` command line (typer + rich).

Results go to stdout, progress and errors to stderr. Every error is one line (plus its fix)
and a distinct exit code, listed in docs/EXIT_CODES.md and at the end of `--help`.

Importing this package costs nothing: `main` prints `--version` (and a plain `sessions`
listing into a pipe: executor/cli/listing.py) before typer is imported, and the app
(executor/cli/commands.py) loads only the command that runs.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

from executor import __version__

if TYPE_CHECKING:
    from importlib.abc import Loader


def __getattr__(name: str) -> Any:
    """`app` and `EPILOG`, from the module that builds them, when first asked for."""
    if name in ("app", "EPILOG"):
        from executor.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: click's usage errors in the house format too."""
    if sys.argv[1:] == ["--version"]:  # without typer, without building any command
        sys.stdout.write(f"sandbox-agent {__version__}\n")
        return
    from executor.cli.actions import guard_streams

    guard_streams()  # under GitHub Actions no model text is a workflow command
    _route_logs_once_imported()  # a library's warning is one inert line, not raw stderr text
    if sys.argv[1:2] == ["sessions"]:
        from executor.cli.listing import quick_listing

        if quick_listing(sys.argv[1:]):  # a plain table into a pipe, without typer
            return
    if not sys.argv[1:] and sys.stdin.isatty() and sys.stderr.isatty():
        sys.argv.append("ask")  # `sandbox-agent` alone at a terminal: the REPL, as claude does
    sys.exit(_run())


def _route_logs_once_imported() -> None:
    """executor.cli.logs.route, now if `logging` is loaded, else right after its import."""
    if "logging" in sys.modules:
        from executor.cli.logs import route

        route()
    else:
        sys.meta_path.insert(0, _AfterLogging())


class _AfterLogging:
    """An import hook for `logging` alone: loads it as the other finders would, then routes
    its records (the hook removes itself first)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "logging" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = cast("Loader", _RouteAfter(spec.loader))  # duck-typed
                return spec
        return None


class _RouteAfter:
    """`logging`'s own loader, then `route()` once the module is whole."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        from executor.cli.logs import route

        route()


def _run() -> int:
    """The app's exit code, a usage error printed as one `error:` line and its fix."""
    import typer

    from executor.cli.commands import app

    # click's UsageError and ClickException, from whichever click typer uses (it may vendor one).
    usage_error: type[Any] = typer.BadParameter.__mro__[1]
    click_exception: type[Any] = usage_error.__mro__[1]
    try:
        code = app(standalone_mode=False)
    except usage_error as exc:  # a bad flag value, an unknown option, a missing argument
        if type(exc).__name__ == "NoArgsIsHelpError":  # `sandbox-agent` alone: the help
            exc.show()
            return int(exc.exit_code)
        command = exc.ctx.command_path if exc.ctx else "sandbox-agent"
        return _usage_error(_message(exc), f"see `{command} --help`", exc.exit_code)
    except click_exception as exc:
        return _usage_error(exc.format_message(), None, exc.exit_code)
    except typer.Abort:
        return 1
    return code if isinstance(code, int) else 0


def _message(exc: Any) -> str:
    """click's message, an unknown option's suggestions cut to the one closest to it: click
    offers any name 60% alike with its dashes, so `--bogus` was told of `--host`."""
    possibilities = getattr(exc, "possibilities", None)
    if not possibilities:
        return str(exc.format_message())
    import difflib

    bare = {name.lstrip("-"): name for name in possibilities}
    close = difflib.get_close_matches(str(exc.option_name).lstrip("-"), bare, n=1,
                                      cutoff=CLOSE_NAME)
    return f"{exc.message} (did you mean {bare[close[0]]}?)" if close else str(exc.message)


CLOSE_NAME = 0.7
"""How alike (difflib's ratio, dashes left out) an unknown option must be to a real one to be
offered: `--mdoel` is 0.8 like `--model`; `--bogus` 0.44 like `--host`."""


def _usage_error(message: str, fix: str | None, code: int) -> int:
    """One `error:` line (lower-cased like ours) and its fix; the exit code."""
    from executor.cli.common import fail
    from executor.errors import ConfigError

    # one line: click lists choices a line each ("Choose from:\n\tjsonl,\n\tcsv")
    message = " ".join(message.replace("Value error, ", "").split()).removesuffix(".")
    fail(ConfigError(message[:1].lower() + message[1:], fix=fix))
    return code
