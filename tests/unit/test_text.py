"""`executor.text`: untrusted text is shown escaped, never interpreted by a terminal."""

from __future__ import annotations

import io
import json
import sys
import unicodedata

import pyte
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from executor.console import InertConsole
from executor.text import (
    BLANK_RE,
    inert,
    inert_json,
    inert_line,
    markup_safe,
    visible_blanks,
)

ATTACK = "rm -rf src; echo DESTROYED > README.md #\x1b[2K\x1b[1G$ ls -la src"


def screen_of(data: str, columns: int = 120) -> list[str]:
    """What a terminal shows after receiving `data`: its rendered lines, right-stripped."""
    screen = pyte.Screen(columns, 10)
    pyte.Stream(screen).feed(data.replace("\n", "\r\n"))
    return [line.rstrip() for line in screen.display if line.strip()]


def test_the_line_erasing_attack_is_shown_whole():
    assert screen_of("$ " + ATTACK) == ["$ ls -la src"]  # what the raw bytes make a person see
    shown = screen_of("$ " + inert(ATTACK))
    assert shown == [r"$ rm -rf src; echo DESTROYED > README.md #\x1b[2K\x1b[1G$ ls -la src"]


def test_each_kind_of_dangerous_character_is_escaped_visibly():
    assert inert("a\rb") == r"a\rb"
    assert inert("bell\x07 del\x7f nul\x00") == r"bell\x07 del\x7f nul\x00"
    assert inert("csi\x9b31m") == r"csi\x9b31m"  # a C1 (8-bit) control sequence introducer
    assert inert("abc\u202edcba\u2066x\u2069") == r"abc\u202edcba\u2066x\u2069"  # Trojan Source
    assert inert("zero\u200bwidth\ufeff") == r"zero\u200bwidth\ufeff"
    assert inert("line\u2028sep\u2029") == r"line\u2028sep\u2029"
    assert inert("tag\U000e0041") == r"tag\U000e0041"  # invisible "ASCII smuggling" tags
    assert inert("lone \ud800 surrogate") == r"lone \ud800 surrogate"
    # a byte of a name that was not UTF-8 (surrogateescape) is shown as that byte, as the
    # toolbox shows it to the model (docs/TOOLS.md)
    assert inert("caf\udce9.txt") == r"caf\xe9.txt" and inert("\udc80\udcff") == r"\x80\xff"


def test_ordinary_text_is_left_exactly_as_it_is():
    text = "def f(x):\n\treturn r'\\d+' + \"é中🙂\"  # C:\\path [red]not markup[/]\n"
    assert inert(text) == text  # backslashes are not doubled, newlines and tabs stay
    assert inert_line("a\\nb") == "a\\nb"


def test_one_line_variant_shows_newlines_and_tabs():
    assert inert_line("a\nb\tc\x1b") == r"a\nb\tc\x1b"
    assert "\n" not in inert_line("x\n" * 5)


@given(st.text())
def test_inert_text_holds_nothing_a_terminal_interprets(text: str):
    shown = inert(text)
    assert all(ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
               for ch in shown)
    assert inert(shown) == shown  # idempotent: printing twice never double-escapes
    assert "\n" not in inert_line(text) and "\t" not in inert_line(text)


def test_every_control_format_and_separator_character_of_this_python_is_covered():
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        category = unicodedata.category(char)
        if char in "\n\t":
            assert inert(char) == char
        elif category in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            assert inert(char) != char, f"U+{point:04X} ({category}) is not escaped"
        elif inert(char) != char:
            assert category == "Cn", f"U+{point:04X} ({category}) is escaped needlessly"


def test_json_stays_valid_and_means_the_same():
    value = {"cmd": "a\x7fb\x85c\u202ed", "lone": "\udcff"}
    dumped = json.dumps(value, ensure_ascii=False)
    safe = inert_json(dumped)
    assert json.loads(safe) == value
    assert safe == r'{"cmd": "a\u007fb\u0085c\u202ed", "lone": "\udcff"}'


def test_markup_safe_makes_brackets_text_and_controls_visible():
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None)
    path = "src/[red]x[/red]\x1b[2K.py"
    console.print(f"[bold]path:[/] {markup_safe(path)}")
    assert buffer.getvalue() == "path: src/[red]x[/red]\\x1b[2K.py\n"
    assert markup_safe("a\nb", line=True) == "a\\nb"


def test_inert_console_escapes_what_a_call_site_forgot():
    buffer = io.StringIO()
    console = InertConsole(file=buffer, width=200, force_terminal=True, color_system="standard")
    console.print("[red]x[/] \x1b[2Kgone\x9b", Text("cell\u202e"), ":cross_mark:")
    table = Table("a")
    table.add_row("in a table\x1b]0;title\x07")
    console.print(table)
    out = buffer.getvalue()
    assert "\x1b[2K" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\x1b]0;" not in out and "\x07" not in out
    assert "\x1b[31m" in out  # Rich's own styling still works
    lines = screen_of(out)
    assert lines[0] == r"x \x1b[2Kgone\x9b cell\u202e :cross_mark:"
    # Measured before it was escaped, the cell is cropped: call sites make text inert first.
    assert any(r"in a table\x1b]0;" in line for line in lines)


def test_a_long_run_of_blanks_is_one_marker_that_says_what_it_was():
    assert visible_blanks("echo hi" + " " * 3300 + "; rm x") == "echo hi[… 3300 spaces …]; rm x"
    assert visible_blanks("a" + "\t" * 7 + " " * 3 + "\u3000" * 2 + "b") == (
        r"a[… 7 tabs, 3 spaces, 2 \u3000 …]b")
    assert visible_blanks("a" + "\u2800" * 49 + "b") == r"a[… 49 \u2800 …]b"


def test_ordinary_indentation_stays_and_odd_blanks_are_escaped():
    code = "    " * 12 + "return x\n\t\t\tpass\ta  b\n"
    assert visible_blanks(code) == code  # 48 columns of indentation, tabs, a double space
    assert visible_blanks("rm\u00a0-rf x\u202fy") == r"rm\xa0-rf x\u202fy"  # one word each
    assert visible_blanks("a" + "\t" * 7 + "b") == "a[… 7 tabs …]b"  # 56 columns at most


def test_every_space_separator_of_this_python_counts_as_blank():
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if unicodedata.category(char) == "Zs" or char == "\t":
            assert BLANK_RE.fullmatch(char), f"U+{point:04X} is not blank"
            assert visible_blanks(char * 100).startswith("[… 100 ")


@given(st.text())
def test_visible_blanks_leave_no_long_blank_run(text: str):
    shown = visible_blanks(inert(text))
    assert all(len(run) <= 48 for run in BLANK_RE.findall(shown))
    assert all(char in " \t" for char in "".join(BLANK_RE.findall(shown)))
