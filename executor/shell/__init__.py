"""What a shell command runs, as far as that can be told without running it.

`analyze(text)` parses a `run_shell_command` string with tree-sitter-bash (a maintained,
complete bash grammar; see docs/POLICY.md for why not bashlex or a hand-written splitter)
and returns:

- every simple command anywhere in it — in pipelines, lists, subshells, `{ }`, if / while /
  for / case bodies, function bodies, `$( )`, backticks, process substitutions, here-document
  bodies and `${x:-$(…)}` — with its words resolved to the strings bash would pass (quotes
  and escapes removed) and its program's basename;
- the reasons the text cannot be resolved statically: `eval`, `.`/`source`, a program name
  only known at run time (`$x`, `$(…)`, globs, braces), shell code in a string (`sh -c`),
  wrappers that run another command (`timeout`, `env`, `xargs`, `find -exec`, …),
  arithmetic that evaluates a variable (bash runs `$(…)` hidden in its value), parse errors.

Line continuations (backslash-newline outside single quotes, comments and quoted
here-documents) are joined before parsing, one at a time, exactly where bash joins them:
tree-sitter-bash reads them as blanks, which would turn `r\\<newline>m` into two words.

`normalise` gives a command's arguments in a canonical spelling (short-option clusters
split, a few long options mapped to their short synonyms, git's global options dropped), so
a policy pattern can bind the spellings of one command.

tree-sitter is imported on first use, never at import time (CLI start-up stays fast).

The rooms: `model` (what the analysis returns), `syntax` (the parse and line continuations),
`walk` (`analyze`), `words` (resolving one word), `programs` (what runs what), `normal`
(`normalise`). This face re-exports their public names.
"""


from executor.shell.model import Piece, ShellAnalysis, SimpleCommand, Unresolved, Word
from executor.shell.normal import GLOBAL_OPTIONS, OPTION_SPELLINGS, Token, normal_form, normalise
from executor.shell.programs import (
    EVALUATORS,
    FIND_EXEC,
    NAME_BUILTINS,
    SHELLS,
    SUBCOMMAND_WRAPPERS,
    WRAPPERS,
    command_problem,
)
from executor.shell.syntax import MAX_CONTINUATIONS
from executor.shell.walk import analyze

__all__ = [
    "EVALUATORS", "FIND_EXEC", "GLOBAL_OPTIONS", "MAX_CONTINUATIONS", "NAME_BUILTINS",
    "OPTION_SPELLINGS", "SHELLS", "SUBCOMMAND_WRAPPERS", "WRAPPERS", "Piece", "ShellAnalysis",
    "SimpleCommand", "Token", "Unresolved", "Word", "analyze", "command_problem", "normal_form",
    "normalise",
]
