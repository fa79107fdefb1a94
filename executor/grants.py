"""Standing approvals a person gives for the rest of a session ("always allow").

A grant only ever turns an `ask` into an `allow`: the approver is asked only for calls the
policy left to the person, so a policy `deny` is never reached, let alone overridden. Every call
it allows is audited with `approved_by: user:session`.

A grant for `run_shell_command` names a command prefix, e.g. `git status`, and covers a later
command only when the shell analysis (executor/shell/) resolves it to one simple command and
nothing else (no `;`, pipe, redirection, substitution or assignment), every word known
statically, that does not run other code (`sh -c`, `env`, `xargs` …), and whose argv starts
with exactly the granted words. So `git status` granted does not allow `git status; rm -rf x`,
`git -c core.fsmonitor=… status` or `/usr/bin/git status`. Other tools are granted whole.

Two kinds of program are narrower still. Where the arguments themselves are code (`python3
-c`, `sed`, `awk`, a shell, `npx` …) the grant is the exact argv: `sed -n 1p a` granted does
not allow `sed 'e rm -rf src'`. And an option that makes a program run another command
(`git grep --open-files-in-pager=CMD`, `rg --pre CMD`, `tar --to-command=CMD`, `sort
--compress-program=CMD`, `make --eval=…` …) is never covered by a grant: the person approved a
search, not the command hidden in its options. A module run (`python3 -m pytest`) grants
those three words; git grants its reading subcommands (`git status`, `git log` …) and every
other one (`git submodule foreach`, `git config --global …`) its exact argv.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SHELL_TOOL = "run_shell_command"
_SUBCOMMAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")
_INTERPRETER = re.compile(r"(python|pypy|node|perl|ruby|php|lua|tclsh|Rscript|julia)[0-9.]*$")

EXACT_ONLY = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "awk", "gawk", "mawk", "nawk", "sed",
    "ed", "ex", "vi", "vim", "nvim", "emacs", "npx", "pnpx", "bunx", "deno", "bun", "java",
    "gdb", "expect", "m4", "dc", "bc", "sqlite3", "psql", "mysql", "jshell", "osascript",
})
"""Programs whose arguments are code: a grant covers the exact argv only (with interpreters
named by `_INTERPRETER`, whose `-m MODULE` is the one prefix granted)."""

GIT_PREFIX_SUBCOMMANDS = frozenset({
    "status", "diff", "log", "show", "grep", "ls-files", "ls-tree", "rev-parse", "blame",
    "describe", "shortlog", "cat-file", "show-ref", "for-each-ref", "diff-tree", "rev-list",
})
"""git subcommands that only read: "always" grants `git SUBCOMMAND …`. Any other is granted
its exact argv (`git submodule foreach CMD`, `git bisect run CMD`, `git config --global
core.fsmonitor CMD` run commands of the model's choosing)."""

RUNS_COMMANDS: dict[str, tuple[str, ...]] = {
    "git": ("-O", "--open-files-in-pager", "--upload-pack", "--receive-pack", "--exec",
            "--extcmd", "--tool", "-x", "--output", "--ext-diff", "--config", "-c",
            "--config-env", "--template", "--separate-git-dir"),
    "rg": ("--pre", "--pre-glob", "--search-zip", "-z"),
    "tar": ("--to-command", "--use-compress-program", "-I", "--checkpoint-action",
            "--info-script", "--new-volume-script", "-F", "--rsh-command", "--rmt-command"),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "sort": ("--compress-program",),
    "make": ("--eval", "-E", "-f", "--file", "--makefile", "SHELL", ".SHELLFLAGS"),
    "npm": ("--script-shell", "exec", "x", "explore"),
    "yarn": ("dlx", "exec", "node"), "pnpm": ("dlx", "exec"),
    "zip": ("-TT", "--unzip-command"), "ssh": ("-o", "-F"), "scp": ("-o", "-S", "-F"),
    "less": ("-",), "more": ("-",), "man": ("-P", "-H", "--pager", "--html"),
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls", "-delete"),
    "xargs": ("",), "pytest": ("-p", "--pyargs", "-c", "--rootdir", "--override-ini", "-o"),
    "tox": ("-x", "--override"), "pip": ("--config-settings", "-C"),
    "curl": ("-K", "--config", "-o", "--output", "-O", "--remote-name"),
    "wget": ("-e", "--execute", "-O", "--output-document"),
}
"""Options (and for some, words) after which a program runs another command or reads code:
a grant never covers an argv that holds one. A short option matches anywhere in a cluster
(`-nO` holds `-O`); a long one also abbreviated (`--open=CMD`) and as `--opt=value`; `-` alone
for less/more: any option."""


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
        if argv is None or runs_commands(argv):
            return None
        return Grant(tool, _prefix(argv))

    def covers(self, tool: str, args: Mapping[str, Any]) -> Grant | None:
        """The grant that allows this call, if any."""
        mine = [g for g in self.grants if g.tool == tool]
        if not mine:
            return None
        if tool != SHELL_TOOL:
            return mine[0]
        argv = _simple_argv(args)
        if argv is None or runs_commands(argv):
            return None
        return next((g for g in mine if g.prefix and argv[: len(g.prefix)] == g.prefix
                     and (len(argv) == len(g.prefix) or not _exact_only(g.prefix))), None)


def _exact_only(prefix: tuple[str, ...]) -> bool:
    """Whether a grant of this prefix covers only that very argv (its arguments are code)."""
    program = prefix[0]
    if _INTERPRETER.fullmatch(program):
        return not (len(prefix) == 3 and prefix[1] == "-m")
    if program == "git":
        return len(prefix) != 2 or prefix[1] not in GIT_PREFIX_SUBCOMMANDS
    return program in EXACT_ONLY


def _prefix(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The words "always" grants: program and subcommand, a module run's three words, or the
    whole argv of a program whose arguments are code."""
    program = argv[0]
    if _INTERPRETER.fullmatch(program) and len(argv) > 2 and argv[1] == "-m":
        return argv[:3]
    if _INTERPRETER.fullmatch(program) or program in EXACT_ONLY:
        return argv
    if program == "git" and (len(argv) < 2 or argv[1] not in GIT_PREFIX_SUBCOMMANDS):
        return argv
    second = argv[1] if len(argv) > 1 and _SUBCOMMAND.fullmatch(argv[1]) else None
    return (program, second) if second else (program,)


def runs_commands(argv: tuple[str, ...]) -> bool:
    """Whether `argv` holds an option that makes its program run another command."""
    options = RUNS_COMMANDS.get(argv[0], ())
    for word in argv[1:]:
        for option in options:
            if option == "":  # the program runs its arguments
                return True
            if option == "-":
                if word.startswith("-") or word.startswith("+"):
                    return True
            elif option.startswith("--"):  # git and getopt take any unique abbreviation
                name = word.split("=", 1)[0]
                if name.startswith("--") and len(name) > 3 and option.startswith(name):
                    return True
            elif not option.startswith("-"):
                if word == option or word.startswith(option + "="):
                    return True
            elif len(option) == 2 and word.startswith("-") and not word.startswith("--"):
                if option[1] in word[1:]:
                    return True
            elif word == option or word.startswith(option):
                return True
    return False


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
