"""Long output through the person's pager, as git does: `$PAGER` (else `less`), only when stdout
is a terminal, with `LESS=FRX` unless they set LESS (quit when it fits one screen, pass our
colours, leave the screen as it was)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable

from executor.cli.common import encodable

NO_PAGER = ("", "cat")
"""$PAGER values that mean "no pager" (git's rule)."""


def pager_command(*, wanted: bool = True) -> str | None:
    """The pager to run, or None: not wanted, stdout not a terminal, or none to be had."""
    if not wanted or not sys.stdout.isatty():
        return None
    command = os.environ.get("PAGER", "less")
    if command.strip() in NO_PAGER:
        return None
    if command == "less" and shutil.which("less") is None:
        return None  # nothing named, nothing installed: print as usual
    return command


def page(lines: Iterable[str], *, wanted: bool = True) -> None:
    """Write `lines` (each ending in a newline) to stdout, through the pager when there is
    one. The person quitting the pager early ends the output, not the command."""
    command = pager_command(wanted=wanted)
    if command is None:
        sys.stdout.writelines(encodable(line) for line in lines)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
    # The person's own command line, as git runs it: through the shell ("less -R", "delta").
    pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pager's to take
    try:
        _feed(pager, lines)
        pager.wait()
    finally:
        signal.signal(signal.SIGINT, interrupt)


def _feed(pager: subprocess.Popen[bytes], lines: Iterable[str]) -> None:
    assert pager.stdin is not None
    try:
        with pager.stdin:
            for line in lines:
                pager.stdin.write(encodable(line).encode("utf-8"))
    except BrokenPipeError:
        pass  # the person quit the pager: the rest is not wanted
