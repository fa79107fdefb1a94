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
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tree_sitter import Node, Parser, Tree

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""C0 controls but tab and newline, and DEL: `ls\r#; rm d` is `ls` and a comment to the
parser, while dash runs the word `ls\r#` and then `rm d`."""
MAX_CONTINUATIONS = 200
"""Line continuations joined at most (each one costs a re-parse); beyond: unresolved."""


class Piece(Enum):
    """How much is known statically about one part of a word."""

    LITERAL = "literal"
    """The exact text."""
    VALUE = "value"
    """One word whose text is only known at run time (`"$x"`, `"$(cmd)"`)."""
    SPLIT = "split"
    """Any number of words with any text (unquoted `$x`, `$(cmd)`, `"$@"`)."""
    PATTERN = "pattern"
    """Any number of words, each starting with the literal text before it (globs, braces)."""


@dataclass(frozen=True)
class Word:
    """One word of a simple command."""

    text: str
    """The value bash passes when `literal`; else the word's source text."""
    literal: bool = True
    """The value is known statically: no expansion, substitution, glob or brace."""
    may_be_option: bool = False
    """At run time it could be, or split into, a word starting with `-`."""
    splits: bool = False
    """At run time it could become several words (unquoted `$x`, `"$@"`)."""


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command: a program and its arguments (assignments and redirections left out)."""

    text: str
    """Its source text."""
    words: tuple[Word, ...]
    shown: str = ""
    """Its source text as written, with the redirections that follow it (here-document bodies
    left out): what a person is told it runs."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The words' values (source text for words only known at run time)."""
        return tuple(word.text for word in self.words)

    @property
    def program(self) -> str:
        """The basename of the program (`/bin/rm`, `\\rm`, `'rm'` are `rm`); "" if not literal."""
        if not self.words or not self.words[0].literal:
            return ""
        return self.words[0].text.rstrip("/").rsplit("/", 1)[-1]

    @property
    def literal(self) -> bool:
        """Every word is known statically."""
        return all(word.literal for word in self.words)


@dataclass(frozen=True)
class Unresolved:
    """A part of the command whose effect cannot be told statically."""

    text: str
    """The source text concerned."""
    why: str
    """What makes it unknowable, e.g. "eval runs its arguments as shell code"."""
    fix: str
    """How to write it so it can be checked."""


@dataclass(frozen=True)
class ShellAnalysis:
    """What a command line runs, as far as can be told without running it."""

    source: str
    """The command as given."""
    joined: str
    """The command with its line continuations joined (what was parsed)."""
    commands: tuple[SimpleCommand, ...] = ()
    """Every simple command anywhere in it, in source order."""
    unresolved: tuple[Unresolved, ...] = ()
    """Why (parts of) it cannot be resolved statically."""
    single: bool = False
    """One simple command and nothing else: no operators, assignments, redirections or
    substitutions."""

    @property
    def resolved(self) -> bool:
        """Everything it runs is known statically."""
        return not self.unresolved

    def as_dict(self) -> dict[str, object]:
        """Plain data (for `policy explain --json`)."""
        return {
            "commands": [
                {"text": c.text, "program": c.program, "argv": list(c.argv),
                 "runtime_words": [w.text for w in c.words if not w.literal]}
                for c in self.commands
            ],
            "unresolved": [{"text": u.text, "why": u.why, "fix": u.fix} for u in self.unresolved],
            "single": self.single,
            "line_continuations_joined": self.joined != self.source,
        }


# ---------------------------------------------------------------------------- what runs what

_DIRECT = "run the program directly"
_BASH_ONLY = {
    "ansi_c_string": "`$'…'` quoting (bash)",
    "translated_string": "`$\"…\"` quoting (bash)",
    "process_substitution": "`<(…)` / `>(…)` (bash)",
    "herestring_redirect": "`<<<` (bash)",
    "array": "arrays (bash)",
}
"""Node types of bash-only syntax: the sandbox's /bin/sh (dash) reads them another way."""
_SPLIT_REDIRECT = ("words after a redirection's target belong to the command, but the parser "
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
_CODE_IN_SUBSCRIPT = re.compile(r"\[[^\]]*(\$\(|`)")


def analyze(command: str) -> ShellAnalysis:
    """Every simple command in `command`, resolved, and why any part cannot be resolved."""
    source = command.encode("utf-8", "surrogatepass")
    joined, tree, too_many = _join_continuations(source)
    walker = _Walker(joined)
    walker.walk(tree.root_node)
    if too_many:
        walker.flag(tree.root_node, f"more than {MAX_CONTINUATIONS} line continuations",
                    "write long commands on fewer lines")
    if _CONTROLS.search(command):  # the parser takes CR, VT, FF for blanks; dash does not
        walker.flag(tree.root_node, "a control character other than tab and newline (the "
                    "parser reads CR, VT and FF as blanks, the sandbox's sh as part of a word)",
                    "remove it")
    return ShellAnalysis(
        source=command,
        joined=_text(joined),
        commands=tuple(walker.commands),
        unresolved=tuple(dict.fromkeys(walker.unresolved)),
        single=not walker.unresolved and _is_single(tree.root_node, joined),
    )


# ---------------------------------------------------------------------------- parsing


@cache
def _parser() -> Parser:
    """The bash parser, built on first use (keeps tree-sitter out of CLI start-up)."""
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


_CONTINUATION = re.compile(rb"(?<!\\)(?:\\\\)*\\\n")
_NO_CONTINUATION_INSIDE = frozenset({"raw_string", "ansi_c_string", "comment"})


def _join_continuations(source: bytes) -> tuple[bytes, Tree, bool]:
    """Remove each backslash-newline that bash removes, re-parsing after each one.

    Whether a backslash-newline continues the line depends only on the text before it, so
    judging the first one in the current parse, joining it and parsing again is exact.
    """
    tree, start = _parser().parse(source), 0
    for _ in range(MAX_CONTINUATIONS):
        position = _next_continuation(source, tree, start)
        if position is None:
            return source, tree, False
        source = source[:position] + source[position + 2 :]
        tree, start = _parser().parse(source), position
    return source, tree, _next_continuation(source, tree, start) is not None


def _next_continuation(source: bytes, tree: Tree, start: int) -> int | None:
    """Offset of the first backslash at or after `start` that bash reads as a continuation."""
    for match in _CONTINUATION.finditer(source, start):
        position = match.end() - 2
        if _in_code(tree.root_node.descendant_for_byte_range(position, position + 1)):
            return position
    return None


def _in_code(node: Node | None) -> bool:
    """Not inside literal text: single quotes, `$'…'`, comments, quoted here-document bodies
    (where bash neither joins continuations nor runs substitutions)."""
    while node is not None:
        if node.type in _NO_CONTINUATION_INSIDE:
            return False
        if node.type == "heredoc_body" and _quoted_heredoc(node.parent):
            return False
        node = node.parent
    return True


def _quoted_heredoc(redirect: Node | None) -> bool:
    """A here-document whose delimiter is quoted (`<<'EOF'`): its body is literal text."""
    starts = [c for c in redirect.children if c.type == "heredoc_start"] if redirect else []
    return any(q in _text(start.text) for start in starts for q in "'\"\\")


def _text(raw: bytes | None) -> str:
    try:
        return (raw or b"").decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # a node boundary inside an invalid sequence: shown, not matched
        return (raw or b"").decode("utf-8", "replace")


def _is_single(root: Node, source: bytes) -> bool:
    """The whole text is one `command` node without assignments, redirections or substitutions."""
    if [c.type for c in root.children] != ["command"]:
        return False
    command = root.children[0]
    if _text(command.text) != _text(source).strip():
        return False
    banned = {"variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect",
              "command_substitution", "process_substitution"}
    return not any(node.type in banned for node in _descendants(command))


def _descendants(node: Node) -> Iterator[Node]:
    """`node` and everything under it, in source order (iterative: no recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


# ---------------------------------------------------------------------------- the walk


class _Walker:
    """Collects simple commands and unresolved parts from a parse tree."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.commands: list[SimpleCommand] = []
        self.unresolved: list[Unresolved] = []

    def walk(self, root: Node) -> None:
        """Visit every node once."""
        for node in _descendants(root):
            self.not_posix(node)
            if node.is_error or node.is_missing:
                self.flag(node.parent or node, "bash cannot parse it (a syntax error near "
                          f"`{_text(node.text)[:40]}`)", "fix the syntax")
            elif node.type in ("command", "declaration_command", "unset_command"):
                self.newline_inside(node)
                self.command(node)
            elif node.type in ("file_redirect", "herestring_redirect"):
                self.newline_inside(node)
            elif node.type == "subshell" and node.parent is not None \
                    and node.parent.type == "command":
                # tree-sitter reads `ls (a)` as ls with a subshell argument; bash rejects it
                self.flag(node.parent, "bash cannot parse it (a `(` inside a command)",
                          "fix the syntax")
            else:
                self.arithmetic(node)
                self.test_subscript(node)
        self.unparsed_substitutions(root)

    def not_posix(self, node: Node) -> None:
        """Flag what /bin/sh in the sandbox (dash, POSIX) reads differently from bash, whose
        grammar this parse follows: dash takes `x &>/dev/null rm d` for `x &` and then
        `>/dev/null rm d`, so the commands that run are not the ones found here."""
        why = _BASH_ONLY.get(node.type)
        if node.type == "file_redirect":
            why = self.redirect_problem(node)
        elif node.type == "pipeline" and any(c.type == "|&" for c in node.children):
            why = "`|&` (bash); the sandbox's sh reads `|` and then `&`"
        elif node.type == "compound_statement" and node.children \
                and node.children[0].type == "((":
            why = "`(( ))` (bash arithmetic); the sandbox's sh runs it as nested subshells"
        elif node.type == "function_definition" and node.children \
                and node.children[0].type == "function":
            why = "the `function` keyword (bash)"
        elif node.type == "for_statement" and node.children and node.children[0].type == "select":
            why = "`select` (bash)"
        if why == _SPLIT_REDIRECT:
            self.flag(node, why, "put the redirection at the end of the command")
        elif why:
            self.flag(node, f"/bin/sh in the sandbox is not bash: {why}",
                      "use POSIX sh syntax (e.g. `>file 2>&1` for `&>file`)")

    @staticmethod
    def redirect_problem(node: Node) -> str | None:
        operators = [c for c in node.children if not c.is_named]
        targets = [c for c in node.children if c.is_named and c.type != "file_descriptor"]
        if any(op.type in ("&>", "&>>") for op in operators):
            return "`&>` (bash); the sandbox's sh reads `&` and then `>`"
        if len(targets) > 1:  # the shells give words after the target to the command
            return _SPLIT_REDIRECT
        if any(op.type in (">&", "<&") for op in operators) and targets \
                and not re.fullmatch(rb"[0-9]+-?|-", targets[0].text or b""):
            return "`>&` with a file name (bash)"
        return None

    def flag(self, node: Node, why: str, fix: str = _DIRECT) -> None:
        """Record that `node` cannot be resolved statically."""
        text = _snippet(node)
        if len(text) > _SNIPPET_MAX:  # it is quoted back to the model and the person
            text = text[: _SNIPPET_MAX - 1] + "…"
        self.unresolved.append(Unresolved(text, why, fix))

    def command(self, node: Node) -> None:
        """Record a simple command and check what its program does."""
        words = tuple(_resolve(w) for w in _command_words(node))
        if not words:
            return
        command = SimpleCommand(_snippet(node), words, _as_written(node, self.source))
        self.commands.append(command)
        problem = command_problem(command)
        if problem is not None:
            self.flag(node, *problem)

    def newline_inside(self, node: Node) -> None:
        """Flag a newline between the parts of one command or redirection: tree-sitter reads
        `<`-newline-`rm x` as `rm` redirected in; bash stops at the newline (syntax error)."""
        parts = node.children
        for left, right in pairwise(parts):
            if b"\n" in self.source[left.end_byte : right.start_byte]:
                self.flag(node, "bash ends a command at a newline, but the parser read on (bash "
                          "rejects it as a syntax error)", "fix the syntax")
                return

    def test_subscript(self, node: Node) -> None:
        """`[[ -v 'a[$(cmd)]' ]]` evaluates the subscript, running the command."""
        if node.type != "test_command":
            return
        texts = (_resolve(n).text for n in _descendants(node)
                 if n.type in ("word", "raw_string", "string", "ansi_c_string", "concatenation"))
        if any(_CODE_IN_SUBSCRIPT.search(text) for text in texts):
            self.flag(node, "a test evaluates the subscript of a name, and this one holds a "
                      "command (`a[$(…)]`)", "run the command directly")

    def arithmetic(self, node: Node) -> None:
        """Flag arithmetic on run-time values: bash evaluates `a[$(cmd)]` found in them."""
        for operand in _arithmetic_operands(node):
            if not _constant_arithmetic(operand):
                self.flag(node, f"arithmetic on `{_text(operand.text)}`, whose value is only "
                          "known at run time (bash runs any `$(…)` hidden in it)",
                          "use literal numbers, or compute the value in a separate step")
                return

    def unparsed_substitutions(self, root: Node) -> None:
        """Flag each backtick or `$(` that bash runs but tree-sitter-bash read as text (it
        leaves backticks unparsed in here-document bodies and inside `${x:-…}`)."""
        for match in _SUBSTITUTION.finditer(self.source):
            position = match.end() - len(match.group(1))
            leaf = root.descendant_for_byte_range(position, position + 1)
            if leaf is None or _parsed_substitution(leaf) or not _in_code(leaf):
                continue
            kind = "backtick" if match.group(1) == b"`" else "$( )"
            self.flag(leaf.parent or leaf, f"a {kind} substitution the parser read as text "
                      "(the command in it cannot be checked here)",
                      "use $( ) outside here-documents and ${…}, or run it as its own command")


_SNIPPET_MAX = 200
_SUBSTITUTION = re.compile(rb"(?<!\\)(?:\\\\)*(`|\$\()")


def _parsed_substitution(leaf: Node) -> bool:
    """`leaf` is the opening token of a substitution tree-sitter parsed."""
    kinds = {leaf.type, leaf.parent.type if leaf.parent else ""}
    return bool(kinds & {"command_substitution", "arithmetic_expansion"})


def _snippet(node: Node) -> str:
    return " ".join(_text(node.text).split())


def _as_written(node: Node, source: bytes) -> str:
    """`node`'s text and, when it is the body of a redirected statement, its redirections
    (`cat <<EOF > out`: the here-document's body left out)."""
    parts = [_text(node.text)]
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement" \
            and parent.child_by_field_name("body") == node:
        for redirect in parent.children_by_field_name("redirect"):
            end = redirect.end_byte
            for child in redirect.children:
                if child.type in ("heredoc_body", "heredoc_end"):
                    end = min(end, child.start_byte)
            parts.append(_text(source[redirect.start_byte:end]).rstrip("\n"))
    return " ".join(parts)


def _command_words(node: Node) -> list[Node]:
    """The nodes of the program name and arguments (assignments and redirections left out)."""
    if node.type != "command":  # declaration / unset: the keyword, then its operands
        return node.children[:1] + [c for c in node.named_children if c.type not in _REDIRECTS]
    name = node.child_by_field_name("name")
    if name is None or name.is_missing or any(c.is_missing for c in name.children):
        return []
    return name.named_children[:1] + node.children_by_field_name("argument")


_REDIRECTS = frozenset({"file_redirect", "herestring_redirect", "heredoc_redirect", "comment"})


def command_problem(command: SimpleCommand) -> tuple[str, str] | None:
    """(why, fix) if what `command` runs cannot be told from its words, else None."""
    if not command.words[0].literal:
        return (f"the program name `{command.words[0].text}` is only known when it runs",
                "write the program name out literally")
    program, args = command.program, command.words[1:]
    if program in EVALUATORS and args:
        return EVALUATORS[program], _DIRECT
    if program in NAME_BUILTINS and any(_CODE_IN_SUBSCRIPT.search(a.text) for a in args):
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


# ---------------------------------------------------------------------------- arithmetic

_ARITHMETIC_TEST_OPS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_ARITHMETIC_SAFE = frozenset(
    {"number", "binary_expression", "unary_expression", "parenthesized_expression",
     "ternary_expression", "postfix_expression"}
)


def _arithmetic_operands(node: Node) -> list[Node]:
    """The parts of `node` that bash evaluates as arithmetic."""
    kind = node.type
    if kind == "arithmetic_expansion":
        return list(node.named_children)
    if kind == "compound_statement" and node.children and node.children[0].type == "((":
        return list(node.named_children)
    if kind == "c_style_for_statement":
        return [c for f in ("initializer", "condition", "update")
                for c in node.children_by_field_name(f)]
    if kind == "binary_expression" and _in_double_brackets(node):
        operator = node.child_by_field_name("operator")
        if operator is not None and _text(operator.text) in _ARITHMETIC_TEST_OPS:
            return [c for f in ("left", "right") for c in node.children_by_field_name(f)]
    if kind == "subscript":
        return [i for i in node.children_by_field_name("index") if _text(i.text) not in "@*"]
    if kind == "expansion":
        return _substring_operands(node)
    return []


def _in_double_brackets(node: Node) -> bool:
    parent = node.parent
    while parent is not None and parent.type in ("binary_expression", "unary_expression",
                                                 "parenthesized_expression"):
        parent = parent.parent
    return parent is not None and parent.type == "test_command" and bool(parent.children) \
        and parent.children[0].type == "[["


def _substring_operands(node: Node) -> list[Node]:
    """`${s:offset:length}`: offset and length are arithmetic."""
    colon = next((i for i, c in enumerate(node.children) if c.type == ":"), None)
    if colon is None:
        return []
    return [c for c in node.children[colon + 1 :] if c.is_named]


def _constant_arithmetic(node: Node) -> bool:
    """Only numbers, operators and `$?`-like special parameters: never a string to evaluate."""
    stack = [node]
    while stack:
        part = stack.pop()
        if part.type == "arithmetic_expansion":
            continue  # a number, its own operands checked when the walk reaches it
        if part.type == "simple_expansion" and _text(part.text) in ("$?", "$#", "$$", "$!"):
            continue
        if part.is_named and part.type not in _ARITHMETIC_SAFE:
            return False
        stack.extend(part.children)
    return True


# ---------------------------------------------------------------------------- words


@dataclass
class _Parts:
    """A word being resolved: its pieces, in order."""

    pieces: list[tuple[Piece, str]] = field(default_factory=list)

    def add(self, kind: Piece, text: str) -> None:
        self.pieces.append((kind, text))

    def word(self, source: str) -> Word:
        kinds = [kind for kind, _ in self.pieces]
        if all(kind is Piece.LITERAL for kind in kinds):
            value = "".join(text for _, text in self.pieces)
            return Word(value, literal=True, may_be_option=value.startswith("-"))
        head = ""
        for kind, text in self.pieces:
            if kind is not Piece.LITERAL:
                break
            head += text
        splits = Piece.SPLIT in kinds
        could = splits or not head or head.startswith("-")
        return Word(source, literal=False, may_be_option=could, splits=splits)


def _resolve(node: Node) -> Word:
    """The word bash makes of `node`, as far as it is known statically."""
    parts = _Parts()
    _add_node(parts, node)
    if node.type in ("word", "concatenation") and _has_brace_expansion(node):
        parts.add(Piece.PATTERN, "")
    return parts.word(_text(node.text))


def _add_node(parts: _Parts, node: Node) -> None:
    kind = node.type
    text = _text(node.text)
    if kind == "word":
        _add_unquoted(parts, text)
    elif kind in ("number", "variable_name", "special_variable_name") or not node.is_named:
        parts.add(Piece.LITERAL, text)
    elif kind == "raw_string":
        parts.add(Piece.LITERAL, text[1:-1])
    elif kind == "ansi_c_string":
        parts.add(Piece.LITERAL, _ansi_c(text[2:-1]))
    elif kind == "string":
        _add_string(parts, node)
    elif kind in ("concatenation", "variable_assignment"):
        for child in node.children:
            _add_node(parts, child)
    elif kind == "process_substitution":
        parts.add(Piece.VALUE, text)  # a /dev/fd path: one word, never an option
    else:  # expansions, substitutions, arithmetic and anything unforeseen
        parts.add(Piece.SPLIT, text)


_GLOB = re.compile(r"[*?]|\[.*\]")


def _add_unquoted(parts: _Parts, text: str) -> None:
    """An unquoted word: backslashes escape the next character; globs make a pattern."""
    literal, plain = [], []  # the value so far; the same with escaped characters hidden
    chars = iter(text)
    for char in chars:
        if char == "\\":
            literal.append(next(chars, "\\"))
            plain.append("_")
        else:
            literal.append(char)
            plain.append(char)
    glob = _GLOB.search("".join(plain))
    if glob is None:
        parts.add(Piece.LITERAL, "".join(literal))
    else:
        parts.add(Piece.LITERAL, "".join(literal)[: glob.start()])  # one char per escape
        parts.add(Piece.PATTERN, text)


def _has_brace_expansion(node: Node) -> bool:
    """An unquoted `{a,b}` or `{1..3}` (tree-sitter splits them into several words)."""
    plain = "".join(
        re.sub(r"\\.", "_", _text(c.text)) if c.type == "word" else "\0"
        for c in ([node] if node.type == "word" else node.children)
    )
    return re.search(r"\{[^{}\0]*(,|\.\.)[^{}\0]*\}", plain) is not None


def _add_string(parts: _Parts, node: Node) -> None:
    """A double-quoted string: literal text between expansions, which stay one word each."""
    start, end = node.start_byte + 1, node.end_byte - 1
    position = start
    for child in node.named_children:
        if child.type == "string_content":
            continue
        _add_double_quoted(parts, node, position, min(child.start_byte, end))
        splits = any(c.type == "special_variable_name" and _text(c.text) == "@"
                     for c in _descendants(child)) or "[@]" in _text(child.text)
        parts.add(Piece.SPLIT if splits else Piece.VALUE, _text(child.text))
        position = max(position, child.end_byte)
    _add_double_quoted(parts, node, position, end)


def _add_double_quoted(parts: _Parts, node: Node, start: int, end: int) -> None:
    if end <= start:
        return
    raw = node.text or b""
    offset = node.start_byte
    text = _text(raw[start - offset : end - offset])
    parts.add(Piece.LITERAL, re.sub(r'\\([$`"\\])', r"\1", text))


_ANSI_C = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)
_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
                  "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(body: str) -> str:
    """The value of `$'…'` (bash's escapes)."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU":
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        if code[0] == "c" and len(code) == 2:
            return chr(ord(code[1].upper()) ^ 0x40)
        return _ANSI_C_SIMPLE.get(code, "\\" + code)

    return _ANSI_C.sub(one, body)


# ---------------------------------------------------------------------------- normal forms

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
