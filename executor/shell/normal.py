"""A command's arguments in one spelling, so that a policy pattern binds every spelling of it:
short-option clusters split, long options mapped to short synonyms, git's global options
dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from executor.shell.model import SimpleCommand, Word

OPTION_SPELLINGS: dict[str, dict[str, str]] = {
    "rm": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--dir": "-d",
           "--interactive": "-i", "--verbose": "-v", "--one-file-system": "--one-file-system",
           "--no-preserve-root": "--no-preserve-root", "--preserve-root": "--preserve-root"},
    "cp": {"-R": "-r", "--recursive": "-r", "--force": "-f", "--archive": "-a"},
    "mv": {"--force": "-f"},
    "chmod": {"--recursive": "-R"},
    "chown": {"--recursive": "-R"},
    "git push": {"-f": "--force", "--force": "--force", "--force-with-lease": "--force-with-lease",
                 "--force-if-includes": "--force-if-includes", "-d": "--delete",
                 "--delete": "--delete", "--mirror": "--mirror", "--all": "--all",
                 "--tags": "--tags"},
    "git clean": {"--force": "-f", "--dry-run": "-n"},
    "git branch": {"--delete": "-d", "--force": "-f"},
}
"""Long options and short synonyms mapped to one spelling, per program or `program subcommand`.
A long option may be abbreviated (GNU and git accept any unique prefix)."""

GLOBAL_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "git": (
        frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
                   "--super-prefix"}),
        frozenset({"--no-pager", "-p", "--paginate", "-P", "--bare", "--no-replace-objects",
                   "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
                   "--icase-pathspecs", "--no-optional-locks", "--no-lazy-fetch",
                   "--exec-path"}),
    ),
}
"""Options before a program's subcommand: (those taking an argument, flags). Dropped."""


@dataclass(frozen=True)
class Token:
    """One argument in normal form."""

    kind: Literal["option", "operand", "runtime"]
    text: str
    may_be_option: bool = False


def normalise(command: SimpleCommand) -> tuple[Token, ...]:
    """The arguments in one spelling: `-rf` ≡ `-r -f`, `--recursive` ≡ `-r`, `git -C . push` ≡
    `git push`. Words only known at run time stay as `runtime` tokens."""
    program = command.program
    args = _drop_global_options(program, list(command.words[1:]))
    sub = next((w.text for w in args if w.literal and not w.text.startswith("-")), None)
    table = OPTION_SPELLINGS.get(f"{program} {sub}") or OPTION_SPELLINGS.get(program, {})
    tokens: list[Token] = []
    options_done = False
    for word in args:
        if not word.literal:
            tokens.append(Token("runtime", word.text, word.may_be_option))
        elif options_done or word.text == "-" or not word.text.startswith("-"):
            tokens.append(Token("operand", word.text))
        elif word.text == "--":
            options_done = True
        else:
            tokens += [Token("option", o) for o in _options(word.text, table)]
    return tuple(tokens)


def _drop_global_options(program: str, args: list[Word]) -> list[Word]:
    with_argument, flags = GLOBAL_OPTIONS.get(program, (frozenset(), frozenset()))
    while args and args[0].literal and args[0].text.startswith("-"):
        name = args[0].text.split("=", 1)[0]
        if name in with_argument and "=" not in args[0].text:
            args = args[2:]
        elif name in with_argument or name in flags:
            args = args[1:]
        else:
            break
    return args


def _options(text: str, table: dict[str, str]) -> list[str]:
    """One option word as normal-form options."""
    if text.startswith("--"):
        name = text.split("=", 1)[0]
        if name not in table:
            matches = {table[long] for long in table if long.startswith(name) and len(name) > 3}
            return [matches.pop()] if len(matches) == 1 else [name]
        return [table[name]]
    return [table.get(f"-{c}", f"-{c}") for c in text[1:]]


def normal_form(command: SimpleCommand) -> str:
    """`normalise` as one line, starting with the program's basename."""
    return " ".join([command.program or command.argv[0], *(t.text for t in normalise(command))])
