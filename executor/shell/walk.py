"""`analyze`: one walk over the parse tree that collects every simple command and flags what
cannot be resolved statically (bash-only syntax, run-time program names, arithmetic on
run-time values, substitutions the parser read as text)."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TYPE_CHECKING

from executor.shell.model import ShellAnalysis, SimpleCommand, Unresolved
from executor.shell.programs import (
    BASH_ONLY,
    CODE_IN_SUBSCRIPT,
    DIRECT_FIX,
    SPLIT_REDIRECT,
    command_problem,
)
from executor.shell.syntax import (
    MAX_CONTINUATIONS,
    Unparsable,
    decoded,
    descendants,
    in_code,
    is_single,
    join_continuations,
)
from executor.shell.words import resolve_word

if TYPE_CHECKING:
    from tree_sitter import Node


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""C0 controls but tab and newline, and DEL: `ls\r#; rm d` is `ls` and a comment to the
parser, while dash runs the word `ls\r#` and then `rm d`."""


def analyze(command: str) -> ShellAnalysis:
    """Every simple command in `command`, resolved, and why any part cannot be resolved."""
    source = command.encode("utf-8", "surrogatepass")
    try:
        joined, tree, too_many = join_continuations(source)
    except Unparsable as unsafe:
        return _unparsable(command, decoded(unsafe.args[0]))
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
        joined=decoded(joined),
        commands=tuple(walker.commands),
        unresolved=tuple(dict.fromkeys(walker.unresolved)),
        single=not walker.unresolved and is_single(tree.root_node, joined),
    )


def _unparsable(command: str, part: str) -> ShellAnalysis:
    """Nothing is known of a text the parser cannot read safely: it fails closed like `eval`."""
    why = "a `{` before a non-ASCII character, which the bash parser cannot read safely"
    fix = "put quotes between them (`{'…'` is the same word to bash)"
    return ShellAnalysis(source=command, joined=command, commands=(),
                         unresolved=(Unresolved(part, why, fix),), single=False)


class _Walker:
    """Collects simple commands and unresolved parts from a parse tree."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.commands: list[SimpleCommand] = []
        self.unresolved: list[Unresolved] = []

    def walk(self, root: Node) -> None:
        """Visit every node once."""
        for node in descendants(root):
            self.not_posix(node)
            if node.is_error or node.is_missing:
                self.flag(node.parent or node, "bash cannot parse it (a syntax error near "
                          f"`{decoded(node.text)[:40]}`)", "fix the syntax")
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
        why = BASH_ONLY.get(node.type)
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
        if why == SPLIT_REDIRECT:
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
            return SPLIT_REDIRECT
        if any(op.type in (">&", "<&") for op in operators) and targets \
                and not re.fullmatch(rb"[0-9]+-?|-", targets[0].text or b""):
            return "`>&` with a file name (bash)"
        return None

    def flag(self, node: Node, why: str, fix: str = DIRECT_FIX) -> None:
        """Record that `node` cannot be resolved statically."""
        text = _snippet(node)
        if len(text) > _SNIPPET_MAX:  # it is quoted back to the model and the person
            text = text[: _SNIPPET_MAX - 1] + "…"
        self.unresolved.append(Unresolved(text, why, fix))

    def command(self, node: Node) -> None:
        """Record a simple command and check what its program does."""
        words = tuple(resolve_word(w) for w in _command_words(node))
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
        texts = (resolve_word(n).text for n in descendants(node)
                 if n.type in ("word", "raw_string", "string", "ansi_c_string", "concatenation"))
        if any(CODE_IN_SUBSCRIPT.search(text) for text in texts):
            self.flag(node, "a test evaluates the subscript of a name, and this one holds a "
                      "command (`a[$(…)]`)", "run the command directly")

    def arithmetic(self, node: Node) -> None:
        """Flag arithmetic on run-time values: bash evaluates `a[$(cmd)]` found in them."""
        for operand in _arithmetic_operands(node):
            if not _constant_arithmetic(operand):
                self.flag(node, f"arithmetic on `{decoded(operand.text)}`, whose value is only "
                          "known at run time (bash runs any `$(…)` hidden in it)",
                          "use literal numbers, or compute the value in a separate step")
                return

    def unparsed_substitutions(self, root: Node) -> None:
        """Flag each backtick or `$(` that bash runs but tree-sitter-bash read as text (it
        leaves backticks unparsed in here-document bodies and inside `${x:-…}`)."""
        for match in _SUBSTITUTION.finditer(self.source):
            position = match.end() - len(match.group(1))
            leaf = root.descendant_for_byte_range(position, position + 1)
            if leaf is None or _parsed_substitution(leaf) or not in_code(leaf):
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
    return " ".join(decoded(node.text).split())


def _as_written(node: Node, source: bytes) -> str:
    """`node`'s text and, when it is the body of a redirected statement, its redirections
    (`cat <<EOF > out`: the here-document's body left out)."""
    parts = [decoded(node.text)]
    parent = node.parent
    if parent is not None and parent.type == "redirected_statement" \
            and parent.child_by_field_name("body") == node:
        for redirect in parent.children_by_field_name("redirect"):
            end = redirect.end_byte
            for child in redirect.children:
                if child.type in ("heredoc_body", "heredoc_end"):
                    end = min(end, child.start_byte)
            parts.append(decoded(source[redirect.start_byte:end]).rstrip("\n"))
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
        if operator is not None and decoded(operator.text) in _ARITHMETIC_TEST_OPS:
            return [c for f in ("left", "right") for c in node.children_by_field_name(f)]
    if kind == "subscript":
        return [i for i in node.children_by_field_name("index") if decoded(i.text) not in "@*"]
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
        if part.type == "simple_expansion" and decoded(part.text) in ("$?", "$#", "$$", "$!"):
            continue
        if part.is_named and part.type not in _ARITHMETIC_SAFE:
            return False
        stack.extend(part.children)
    return True
