"""Standing approvals a person gives for the rest of a session ("always allow").

A grant only ever turns an `ask` into an `allow`: the approver is asked only for calls the
policy left to the person, so a policy `deny` is never reached, let alone overridden. Every call
it allows is audited with `approved_by: user:session`.

A grant for `run_shell_command` names a command prefix, e.g. `git status`, and covers a later
command only when the shell analysis (executor/shell.py) resolves it to one simple command and
nothing else (no `;`, pipe, redirection, substitution or assignment), every word known
statically, that does not run other code (`sh -c`, `env`, `xargs` …), and whose argv starts
with exactly the granted words. So `git status` granted does not allow `git status; rm -rf x`,
`git -c core.fsmonitor=… status` or `/usr/bin/git status`. Other tools are granted whole.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SHELL_TOOL = "run_shell_command"
_SUBCOMMAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")


@dataclass(frozen=True)
class Grant:
    """One "always allow": a tool, and for the shell tool the argv prefix it covers."""

    tool: str
    prefix: tuple[str, ...] = ()

    def describe(self) -> str:
        """`run_shell_command git status …` or `write_file`: what the person granted."""
        return f"{self.tool} {' '.join(self.prefix)} …" if self.prefix else self.tool


class SessionGrants:
    """The grants of one session, in the order given."""

    def __init__(self) -> None:
        self.grants: list[Grant] = []

    def add(self, grant: Grant) -> None:
        """Keep `grant` for the rest of the session."""
        if grant not in self.grants:
            self.grants.append(grant)

    def offer(self, tool: str, args: Mapping[str, Any]) -> Grant | None:
        """The grant "always" would give for this call; None when none can be given safely."""
        if tool != SHELL_TOOL:
            return Grant(tool)
        argv = _simple_argv(args)
        if argv is None:
            return None
        second = argv[1] if len(argv) > 1 and _SUBCOMMAND.fullmatch(argv[1]) else None
        return Grant(tool, (argv[0], second) if second else (argv[0],))

    def covers(self, tool: str, args: Mapping[str, Any]) -> Grant | None:
        """The grant that allows this call, if any."""
        mine = [g for g in self.grants if g.tool == tool]
        if not mine:
            return None
        if tool != SHELL_TOOL:
            return mine[0]
        argv = _simple_argv(args)
        if argv is None:
            return None
        return next((g for g in mine if g.prefix and argv[: len(g.prefix)] == g.prefix), None)


def _simple_argv(args: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The argv of a command that is one resolved simple command running nothing else."""
    from executor.shell import analyze, command_problem

    command = args.get("command")
    if not isinstance(command, str):
        return None
    analysis = analyze(command)
    if not (analysis.single and analysis.resolved and len(analysis.commands) == 1):
        return None
    simple = analysis.commands[0]
    if not simple.words or not simple.literal or command_problem(simple) is not None:
        return None
    return simple.argv
