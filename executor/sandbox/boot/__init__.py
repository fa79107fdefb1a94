"""The programs the host starts in the container before the toolbox exists, as real files.

Each runs under the container's own `python3 -I -S -c` (3.9 or later, no site, nothing but
the standard library), so they are linted and type-checked as Python 3.9 code, and unit
tested as the processes they are. The command lines are composed from them in `bundle.py`
(the toolbox's, and PID 1's when the toolbox is its first process), `hardening.py` (PID 1
of a container whose toolboxes are execs) and `runtime.py` (the kill script):

- `init.py` — PID 1 of every session container: reaps, ignores signals, and (as the first
  toolbox's parent) ends the container when its toolbox says its host went away;
- `bootstrap.py` — reads the toolbox from stdin (compiled code or source) and runs it;
- `kill.py` — kills a stuck toolbox and everything of its uid, until none is left.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def source(name: str) -> str:
    """The text of program `name` (`init`, `bootstrap`, `kill`), as the container runs it."""
    return resources.files(__name__).joinpath(f"{name}.py").read_text()


def reaper(*, end: bool = True) -> str:
    """PID 1 of a container whose toolboxes are `docker exec`s (Podman, gVisor, a copy);
    `end`: the container ends when its host's lifeline goes (a bind one), else it lives on."""
    return source("init") + f"\nif __name__ == '__main__':\n    reap(0, end={end})\n"


def first_toolbox() -> str:
    """PID 1 that forks the first toolbox: the child runs the bootstrap on the container's
    own attached stdin and stdout."""
    return (source("init") + "\nif __name__ == '__main__':\n    first_toolbox()\n"
            + source("bootstrap"))


def standby_toolbox() -> str:
    """PID 1 of a standby (executor/sandbox/warm.py): it waits alone, and forks the first
    toolbox as `first_toolbox` does once a host adopts it."""
    return (source("init") + "\nif __name__ == '__main__':\n    standby_toolbox()\n"
            + source("bootstrap"))
