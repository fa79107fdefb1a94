"""One word as bash would pass it: quotes and escapes removed, or what is known of it when
its value comes only at run time."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executor.shell.model import Piece, Word
from executor.shell.syntax import decoded, descendants

if TYPE_CHECKING:
    from tree_sitter import Node


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


def resolve_word(node: Node) -> Word:
    """The word bash makes of `node`, as far as it is known statically."""
    parts = _Parts()
    _add_node(parts, node)
    if node.type in ("word", "concatenation") and _has_brace_expansion(node):
        parts.add(Piece.PATTERN, "")
    return parts.word(decoded(node.text))


def _add_node(parts: _Parts, node: Node) -> None:
    kind = node.type
    text = decoded(node.text)
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
        re.sub(r"\\.", "_", decoded(c.text)) if c.type == "word" else "\0"
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
        splits = any(c.type == "special_variable_name" and decoded(c.text) == "@"
                     for c in descendants(child)) or "[@]" in decoded(child.text)
        parts.add(Piece.SPLIT if splits else Piece.VALUE, decoded(child.text))
        position = max(position, child.end_byte)
    _add_double_quoted(parts, node, position, end)


def _add_double_quoted(parts: _Parts, node: Node, start: int, end: int) -> None:
    if end <= start:
        return
    raw = node.text or b""
    offset = node.start_byte
    text = decoded(raw[start - offset : end - offset])
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
