"""The bash parse: tree-sitter-bash built on first use, line continuations joined exactly where
bash joins them, and small helpers over the tree."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser, Tree


MAX_CONTINUATIONS = 200
"""Line continuations joined at most (each one costs a re-parse); beyond: unresolved."""


@cache
def _parser() -> Parser:
    """The bash parser, built on first use (keeps tree-sitter out of CLI start-up)."""
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


_PARSER_UNSAFE = re.compile(rb"\{[0-9]*(?:\.\.[0-9]*)?[\x80-\xff][\x80-\xbf]*")
"""Where tree-sitter-bash's brace-range scanner (`{1..9}`) hands a non-ASCII character to C's
`isdigit`, which then reads outside its table: the host process crashes, or takes a character
for a digit at random. The text is never given to the parser."""


class Unparsable(ValueError):
    """Text the bash parser cannot be given safely; `args[0]` is the part that says why."""


def parse(source: bytes) -> Tree:
    """The parse of `source`, or Unparsable where the parser itself would be unsafe."""
    unsafe = _PARSER_UNSAFE.search(source)
    if unsafe is not None:
        raise Unparsable(unsafe.group())
    return _parser().parse(source)


_CONTINUATION = re.compile(rb"(?<!\\)(?:\\\\)*\\\n")
_NO_CONTINUATION_INSIDE = frozenset({"raw_string", "ansi_c_string", "comment"})


def join_continuations(source: bytes) -> tuple[bytes, Tree, bool]:
    """Remove each backslash-newline that bash removes, re-parsing after each one.

    Whether a backslash-newline continues the line depends only on the text before it, so
    judging the first one in the current parse, joining it and parsing again is exact.
    """
    tree, start = parse(source), 0
    for _ in range(MAX_CONTINUATIONS):
        position = _next_continuation(source, tree, start)
        if position is None:
            return source, tree, False
        source = source[:position] + source[position + 2 :]
        tree, start = parse(source), position
    return source, tree, _next_continuation(source, tree, start) is not None


def _next_continuation(source: bytes, tree: Tree, start: int) -> int | None:
    """Offset of the first backslash at or after `start` that bash reads as a continuation."""
    for match in _CONTINUATION.finditer(source, start):
        position = match.end() - 2
        if in_code(tree.root_node.descendant_for_byte_range(position, position + 1)):
            return position
    return None


def in_code(node: Node | None) -> bool:
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
    return any(q in decoded(start.text) for start in starts for q in "'\"\\")


def decoded(raw: bytes | None) -> str:
    try:
        return (raw or b"").decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # a node boundary inside an invalid sequence: shown, not matched
        return (raw or b"").decode("utf-8", "replace")


def is_single(root: Node, source: bytes) -> bool:
    """The whole text is one `command` node without assignments, redirections or substitutions."""
    if [c.type for c in root.children] != ["command"]:
        return False
    command = root.children[0]
    if decoded(command.text) != decoded(source).strip():
        return False
    banned = {"variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect",
              "command_substitution", "process_substitution"}
    return not any(node.type in banned for node in descendants(command))


def descendants(node: Node) -> Iterator[Node]:
    """`node` and everything under it, in source order (iterative: no recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))
