"""What runs what: the builtins, shells and wrappers that run code their words do not show,
and the one check of a simple command's program against them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from executor.shell.model import SimpleCommand, Word

DIRECT_FIX = "run the program directly"
BASH_ONLY = {
    "ansi_c_string": "`$'…'` quoting (bash)",
    "translated_string": "`$\"…\"` quoting (bash)",
    "process_substitution": "`<(…)` / `>(…)` (bash)",
    "herestring_redirect": "`<<<` (bash)",
    "array": "arrays (bash)",
}
"""Node types of bash-only syntax: the sandbox's /bin/sh (dash) reads them another way."""
SPLIT_REDIRECT = ("words after a redirection's target belong to the command, but the parser "
                   "reads them as part of the redirection")
EVALUATORS: dict[str, str] = {
    "eval": "eval runs its arguments as shell code",
    ".": "`.` runs the commands in a file",
    "source": "source runs the commands in a file",
    "trap": "trap keeps a string to run as shell code later",
    "alias": "an alias makes a name run other shell code",
    "let": "let evaluates arithmetic, which runs any `$(…)` hidden in a variable",
    "hash": "hash can make a name run another program",
    "enable": "enable can load or hide builtins",
    "fc": "fc re-runs commands from the history",
}
"""Builtins that run (or change the meaning of) code that is not in the text."""

SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "ash", "yash",
     "posh", "rbash", "fish", "csh", "tcsh"}
)
"""Programs that run shell code from a string, a file or their input."""

WRAPPERS = frozenset(
    {"env", "xargs", "timeout", "nice", "nohup", "sudo", "doas", "su", "runuser", "exec",
     "command", "builtin", "time", "stdbuf", "setsid", "ionice", "taskset", "chroot", "flock",
     "watch", "unbuffer", "script", "parallel", "sem", "busybox", "coproc", "chrt", "prlimit",
     "numactl", "setpriv", "unshare", "nsenter", "fakeroot", "strace", "ltrace", "valgrind",
     "firejail", "proot", "cpulimit", "start-stop-daemon", "systemd-run", "dbus-run-session",
     "xvfb-run", "sg", "catchsegv", "faketime", "torsocks", "proxychains", "proxychains4",
     "expect", "tini", "dumb-init", "gosu", "su-exec", "chpst", "softlimit", "envdir",
     "setuidgid", "nocache", "rlwrap", "entr", "npx", "bunx", "uvx", "pipx"}
)
"""Programs that run another command given in their arguments."""

SUBCOMMAND_WRAPPERS: dict[str, frozenset[str]] = {
    "uv": frozenset({"run", "tool"}),
    "poetry": frozenset({"run"}),
    "pipenv": frozenset({"run"}),
    "pdm": frozenset({"run"}),
    "hatch": frozenset({"run"}),
    "conda": frozenset({"run"}),
    "mamba": frozenset({"run"}),
    "npm": frozenset({"exec"}),
    "pnpm": frozenset({"exec", "dlx"}),
    "yarn": frozenset({"exec", "dlx"}),
    "bundle": frozenset({"exec"}),
}
"""Programs whose subcommand runs another command (`uv run rm x`)."""

FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

NAME_BUILTINS = frozenset(
    {"printf", "read", "unset", "declare", "typeset", "local", "export", "readonly", "mapfile",
     "readarray", "getopts", "wait", "test"}
)
"""Builtins that take variable names, whose array subscripts bash evaluates as arithmetic
(so `printf -v 'a[$(rm x)]' y` runs `rm x`)."""
CODE_IN_SUBSCRIPT = re.compile(r"\[[^\]]*(\$\(|`)")


def command_problem(command: SimpleCommand) -> tuple[str, str] | None:
    """(why, fix) if what `command` runs cannot be told from its words, else None."""
    if not command.words[0].literal:
        return (f"the program name `{command.words[0].text}` is only known when it runs",
                "write the program name out literally")
    program, args = command.program, command.words[1:]
    if program in EVALUATORS and args:
        return EVALUATORS[program], DIRECT_FIX
    if program in NAME_BUILTINS and any(CODE_IN_SUBSCRIPT.search(a.text) for a in args):
        return (f"{program} evaluates the subscript of a name, and this one holds a command "
                "(`a[$(…)]`)", "run the command directly")
    if program in SHELLS and not (args and all(a.literal and a.text in ("--version", "--help")
                                               for a in args)):
        return (f"{program} runs shell code (from -c, a script or its input) that cannot be "
                "checked here", "run the commands directly, not through a shell")
    return _wrapper_problem(program, args)


def _wrapper_problem(program: str, args: Sequence[Word]) -> tuple[str, str] | None:
    fix = f"run the program directly, without {program}"
    if program in WRAPPERS and args and not _only_looks_up(program, args):
        return f"{program} runs another command, which cannot be checked here", fix
    if program in SUBCOMMAND_WRAPPERS:
        sub = next((a for a in args if not a.literal or not a.text.startswith("-")), None)
        if sub is not None and (not sub.literal or sub.text in SUBCOMMAND_WRAPPERS[program]):
            return f"{program} {sub.text} runs another command, which cannot be checked here", fix
    if program == "find" and any(
        (a.literal and a.text in FIND_EXEC) or a.splits for a in args
    ):
        return ("find -exec runs another command, which cannot be checked here",
                "list the files with find, then run the command on them directly")
    return None


def _only_looks_up(program: str, args: Sequence[Word]) -> bool:
    """`command -v NAME` and `command -V NAME` only print where a name comes from."""
    return program == "command" and args[0].literal and args[0].text in ("-v", "-V")
