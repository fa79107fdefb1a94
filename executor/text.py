r"""Untrusted text made inert before it reaches a terminal.

The model, the repository and anything the sandbox wrote choose the strings we print: tool
arguments, file content, command output, model replies, server error texts, session and audit
contents. A terminal *interprets* some characters: ESC starts a sequence that can erase a line
and move the cursor (so `rm -rf src; #ESC[2KESC[1G$ ls` is displayed as `$ ls`), CR returns to
the start of the line, C1 characters are 8-bit escape sequences, and bidirectional and
invisible formatting characters reorder or hide text (Trojan Source). Every such character is
shown escaped instead, the way Python writes it: \x1b, \r, \u202e. What a person reads is
what is there. A byte of a file name that is not UTF-8 (U+DCE9 once Python decoded it with
surrogateescape) is shown as that byte, \xe9, as the model reads it (docs/TOOLS.md).

Newlines and tabs stay, except in `inert_line` (single-line contexts: table cells, progress
lines), which shows them as \n and \t. Backslashes are never doubled: ordinary text keeps its
look.

Rich markup is a second way text can lie (`[red]` in a path): `markup_safe` escapes both, and
`InertConsole` (executor/console.py) makes whatever it prints inert, as a last line of defence.

This module imports nothing heavy (Rich only when `markup_safe` runs): commands that print
little start fast.
"""

from __future__ import annotations

import re

# Unicode categories Cc (controls), Cf (format: bidi, zero-width, BOM, tags), Cs (surrogates)
# and Zl/Zp (line and paragraph separators), as of Unicode 15, minus tab and newline.
# tests/unit/test_text.py checks the ranges against this Python's unicodedata.
_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    "\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
UNSAFE_RE = re.compile(f"[{_UNSAFE}]")
_UNSAFE_LINE_RE = re.compile(f"[{_UNSAFE}\t\n]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
PIPED_WIDTH = 200
"""Columns a console writes to a pipe or file with (no COLUMNS set): rich's 80 cut tables."""


def _escaped(char: str) -> str:
    """`\\x1b`, `\\r`, `\\u202e`, `\\U000e0041`: how Python would write the character."""
    point = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= point <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): that byte
        point -= 0xDC00
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def inert(text: str) -> str:
    """`text` with every character a terminal would interpret (but newline and tab) escaped."""
    return UNSAFE_RE.sub(lambda m: _escaped(m.group()), text)


def inert_line(text: str) -> str:
    """`inert`, and newlines and tabs escaped too: for one-line contexts."""
    return _UNSAFE_LINE_RE.sub(lambda m: _escaped(m.group()), text)


# Characters printed as empty space: category Zs (space separators), tab, and letters and
# symbols drawn as nothing (the Hangul fillers, the blank Braille pattern). tests/unit/test_text.py
# checks Zs against this Python's unicodedata.
_BLANKS = "\t \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\u115f\u1160\u3164\uffa0\u2800"
BLANK_RE = re.compile(f"[{_BLANKS}]+")
"""A run of blank characters."""
BLANK_RUN_CELLS = 48
"""The widest run of blank characters `visible_blanks` leaves as it is, in columns."""
_BLANK_NAMES = {" ": "space", "\t": "tab"}


def visible_blanks(text: str, limit: int = BLANK_RUN_CELLS) -> str:
    """`text` with blank space that could hide something shown: a run of blank characters wider
    than `limit` columns as one marker (`[… 3300 spaces …]`), and every blank character but
    space and tab escaped (`\\u00a0`), so padding cannot push text out of sight nor make one
    word look like two. For what a person approves; never for the data itself."""
    return BLANK_RE.sub(lambda m: _blank_run(m.group(), limit), text)


def _blank_run(run: str, limit: int) -> str:
    import unicodedata

    cells = sum(8 if c == "\t" else 1 + (unicodedata.east_asian_width(c) in "WF") for c in run)
    if cells <= limit:
        return "".join(c if c in _BLANK_NAMES else _escaped(c) for c in run)
    counts: dict[str, int] = {}
    for char in run:
        counts[char] = counts.get(char, 0) + 1
    parts = [f"{n} {_BLANK_NAMES[c]}{'s' * (n != 1)}" if c in _BLANK_NAMES
             else f"{n} {_escaped(c)}" for c, n in counts.items()]
    return f"[… {', '.join(parts)} …]"


def inert_json(dumped: str) -> str:
    """JSON text with those characters as `\\uXXXX` escapes: still valid, same values.

    `json.dumps` escapes C0 controls itself but not DEL, C1 or bidi characters (with
    `ensure_ascii=False`), and emits lone surrogates as they are.
    """
    return UNSAFE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


def markup_safe(value: object, *, line: bool = False) -> str:
    """Any value as text for a Rich markup string: inert, and its brackets not markup."""
    from rich.markup import escape as escape_markup

    text = value if isinstance(value, str) else str(value)
    return escape_markup(inert_line(text) if line else inert(text))

