"""The command line the host starts the toolbox with."""

from __future__ import annotations

import sys

from .limits import MIN_FREE

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable
    from typing import NoReturn
    pass



class Options:
    """The toolbox's command line, parsed (argparse took a sixth of the start in a container)."""

    def __init__(self) -> None:
        self.root = "/workspace"
        self.default_timeout = 60.0
        self.max_output = 30000
        self.hidden: list[str] | None = None
        self.readonly_dir: list[str] | None = None
        self.no_rg = self.kill_strays = self.git_guard = self.no_track = self.sign = False
        self.disk_budget = 0
        self.min_free = MIN_FREE
        self.seccomp_filter: str | None = None
        self.channel: str | None = None


_SWITCHES = ("--no-rg", "--kill-strays", "--git-guard", "--no-track", "--sign")
_VALUES: dict[str, Callable[[str], object]] = {
    "--root": str, "--default-timeout": float, "--max-output": int, "--disk-budget": int,
    "--min-free": int, "--seccomp-filter": str, "--hidden": str, "--readonly-dir": str,
    "--channel": str}
_REPEATED = ("--hidden", "--readonly-dir")


def parse_args(argv: list[str]) -> Options:
    """The toolbox's command line (see the module docstring); exits 2 on a bad one."""
    opts, args = Options(), iter(argv)
    for flag in args:
        name = flag[2:].replace("-", "_")
        if flag in _SWITCHES:
            setattr(opts, name, True)
            continue
        if flag not in _VALUES:
            _usage(f"unknown argument {flag!r}")
        raw = next(args, None)
        if raw is None:
            _usage(f"{flag} needs a value")
        try:
            value = _VALUES[flag](raw)
        except ValueError:
            _usage(f"{flag}: not a number: {raw!r}")
        if flag in _REPEATED:
            setattr(opts, name, [*(getattr(opts, name) or []), value])
        else:
            setattr(opts, name, value)
    if opts.disk_budget < 0 or opts.min_free < 0:
        _usage("--disk-budget and --min-free take a number of bytes, 0 or more")
    for name in (opts.hidden or []) + (opts.readonly_dir or []):
        if not name or "/" in name or name in (".", ".."):
            _usage(f"--hidden/--readonly-dir take one top-level name, not {name!r}")
    return opts


def _usage(message: str) -> NoReturn:
    sys.stderr.write(f"toolbox: error: {message}\n")
    raise SystemExit(2)
