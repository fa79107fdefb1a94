"""The toolbox: write_file and edit_file."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from tests.unit.toolbox.boxes import Box, failed, sha


def test_write_creates_parents_and_reports_hashes(box: Box, root: Path):
    reply = box.call("write_file", path="pkg/deep/new.py", content="X = 1\nY = 'é'\n")
    data = "X = 1\nY = 'é'\n".encode()
    assert reply["ok"] and (root / "pkg" / "deep" / "new.py").read_bytes() == data
    assert reply["meta"] == {"bytes": len(data), "sha256_before": None, "sha256_after": sha(data),
                             "lines_changed": 2, "created": True,
                             "duration_ms": reply["meta"]["duration_ms"]}
    assert "new file" in reply["output"]


def test_overwrite_counts_changed_lines(box: Box, root: Path):
    (root / "f.txt").write_text("a\nb\nc\n")
    reply = box.call("write_file", path="f.txt", content="a\nB\nc\nd\n")
    assert reply["meta"]["sha256_before"] == sha(b"a\nb\nc\n")
    assert reply["meta"]["lines_changed"] == 3 and reply["meta"]["created"] is False
    assert (root / "f.txt").read_text() == "a\nB\nc\nd\n"


def test_big_rewrites_stay_cheap(box: Box, root: Path):
    old = "".join(f"{i}\n" for i in range(100_000))
    (root / "n.txt").write_text(old)
    reply = box.call("write_file", path="n.txt", content=old.replace("7", "x"))
    assert reply["ok"] and reply["meta"]["lines_changed"] > 0


def test_write_errors(box: Box, root: Path):
    failed(box.call("write_file", path="src", content="x"), "'src' is a directory")
    failed(box.call("write_file", path="README.md/x", content="x"), "README.md")
    assert (root / "README.md").read_text() == "# demo\n"


def test_a_failed_edit_finds_its_closest_line_cheaply_whatever_the_file(box: Box, root: Path):
    """difflib's ratio is quadratic in a line's length: in a crafted file (long lines of many
    distinct characters) the "closest line" hint of a failed edit took 10 s for 20 lines. Only
    lines of up to 500 characters are compared now."""
    rng = random.Random(1)
    alphabet = [chr(0x100 + i) for i in range(300)]
    lines = ["".join(rng.choice(alphabet) for _ in range(20_000)) for _ in range(20)]
    (root / "long.txt").write_text("\n".join([*lines, "short line here"]) + "\n")
    started = time.monotonic()
    near = box.call("edit_file", path="long.txt", old_text="short lime here", new_text="x")
    assert "Hint: line 21 is the closest; copy it exactly:\nshort line here" in failed(near)
    other = "".join(rng.choice(alphabet) for _ in range(20_000))
    far = box.call("edit_file", path="long.txt", old_text=other, new_text="x")
    failed(far, "0 matches")
    assert time.monotonic() - started < 5


def test_edit_replaces_the_unique_occurrence(box: Box, root: Path):
    reply = box.call("edit_file", path="src/app.py", old_text="a + b", new_text="a - b")
    assert reply["ok"] and reply["meta"]["replacements"] == 1
    assert reply["meta"]["lines_changed"] == 2
    assert reply["meta"]["sha256_before"] != reply["meta"]["sha256_after"]
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_edit_with_no_match_says_how_to_fix_it(box: Box, root: Path):
    failed(box.call("edit_file", path="src/app.py", old_text="a * b", new_text="x"),
           "0 matches", "read_file", "exact text")
    output = failed(box.call("edit_file", path="src/app.py", old_text="      return a + b",
                             new_text="x"), "0 matches")
    assert "lines 2-2 match except for whitespace" in output
    quoted = box.call("edit_file", path="src/app.py", old_text="def add(a, c):", new_text="x")
    assert "Hint: line 1 is the closest; copy it exactly:\ndef add(a, b):" in failed(quoted)
    numbered = box.call("edit_file", path="src/app.py", old_text="     2\t    return a + b",
                        new_text="x")
    failed(numbered, "line numbers from read_file")
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_edit_hint_finds_the_text_without_its_quotes_punctuation_or_case(box: Box, root: Path):
    (root / "greet.py").write_text('def greet(name):\n    return "Hello, " + name + "!"\n')
    for guess in ("Hello.", "'hello'", '"Hello!"'):
        output = failed(box.call("edit_file", path="greet.py", old_text=guess, new_text="Hi"),
                        "0 matches")
        assert "Hint: 'Hello' is on line 2" in output.replace("'hello'", "'Hello'")
        assert 'copy the whole line:\n    return "Hello, " + name + "!"' in output
    (root / "many.txt").write_text("Hello\n" * 4)
    assert "is on line" not in failed(box.call("edit_file", path="many.txt", old_text="Hello.",
                                               new_text="x"), "0 matches")


def test_an_edit_that_would_break_a_python_file_is_refused_with_the_result_shown(
        box: Box, root: Path):
    source = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    (root / "calc.py").write_text(source)
    reply = box.call("edit_file", path="calc.py", old_text="    return a + b",
                     new_text="    return a +\n  b")
    output = failed(reply, "not changed: this edit would break 'calc.py' (SyntaxError",
                    "give its last lines as old_text", "After this edit the file would read:",
                    "     2\t    return a +", "This is 'calc.py' now")
    assert "line 2" in reply["meta"]["syntax_error"] and output
    assert (root / "calc.py").read_text() == source
    preview = box.request({"id": 99, "tool": "preview", "args": {"tool": "edit_file", "args": {
        "path": "calc.py", "old_text": "a - b", "new_text": "a -"}}})
    assert "would break" in preview["meta"]["error"]
    inside = box.call("edit_file", path="calc.py", old_text="def sub(a, b):",
                      new_text="def sub(a, b):\ndef mul(a, b):\nreturn a * b")
    failed(inside, "would break", "IndentationError")  # not after sub() either: no indent
    assert (root / "calc.py").read_text() == source


def test_lines_added_after_a_def_line_go_after_its_body(box: Box, root: Path):
    source = ('"""Helpers."""\n\n\ndef add(a, b):\n    """Sum."""\n    return a + b\n\n\n'
              'def sub(a, b):\n    return a - b\n')
    (root / "calc.py").write_text(source)
    args = {"path": "calc.py", "old_text": "def add(a, b):",
            "new_text": "def add(a, b):\n\n\ndef mul(a, b):\n    return a * b"}
    preview = box.request({"id": 99, "tool": "preview", "args": {"tool": "edit_file",
                                                                "args": args}})
    assert "+def mul(a, b):" in preview["output"] and preview["meta"]["error"] is None
    reply = box.call("edit_file", **args)
    assert reply["ok"] and "the new lines went after line 6, the end of the block that line 4 " \
        "opens" in reply["output"]
    assert (root / "calc.py").read_text() == (
        '"""Helpers."""\n\n\ndef add(a, b):\n    """Sum."""\n    return a + b\n\n\n'
        'def mul(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n')
    (root / "k.py").write_text("class K:\n    def f(self):\n        return 1\n")
    assert box.call("edit_file", path="k.py", old_text="    def f(self):", new_text=(
        "    def f(self):\n    def g(self):\n        return 2"))["ok"]
    assert (root / "k.py").read_text() == (
        "class K:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n")
    method = box.call("edit_file", path="k.py", old_text="    def g(self):", new_text=(
        "    def g(self):\n\ndef h(self):\n    if self:\n        return 3"))
    assert method["ok"] and "indented by 4 more spaces to stand beside it" in method["output"]
    assert (root / "k.py").read_text().endswith(
        "        return 2\n\n    def h(self):\n        if self:\n            return 3\n")
    deeper = box.call("edit_file", path="k.py", old_text="    def h(self):", new_text=(
        "    def h(self):\n\n            def i(self):\n                return 4"))
    failed(deeper, "would break 'k.py' (IndentationError")  # more indented: not guessed


def test_an_edit_says_which_lines_still_use_a_name_it_replaced(box: Box, root: Path):
    (root / "cart.py").write_text("from billing import calc_total\n\n\ndef total(items):\n"
                                  "    return calc_total(items)\n")
    reply = box.call("edit_file", path="cart.py", old_text="    return calc_total(items)",
                     new_text="    return compute_total(items)")
    assert reply["ok"] and reply["meta"]["still_there"] == {"calc_total": [1]}
    assert reply["output"].endswith(
        "\nnote: 'calc_total' is still on line 1: from billing import calc_total")
    done = box.call("edit_file", path="cart.py", old_text="import calc_total",
                    new_text="import compute_total")
    assert done["ok"] and "still_there" not in done["meta"] and "note" not in done["output"]


def test_a_python_file_that_did_not_compile_may_be_edited_step_by_step(box: Box, root: Path):
    (root / "half.py").write_text("def f(:\n    return 1\n")
    assert box.call("edit_file", path="half.py", old_text="return 1", new_text="return (")["ok"]
    (root / "notes.txt").write_text("def f():\n")
    assert box.call("edit_file", path="notes.txt", old_text="f()", new_text="f(")["ok"]
    (root / "warn.py").write_text("x = 1\n")
    escaped = box.call("edit_file", path="warn.py", old_text="x = 1", new_text="x = '\\d'")
    assert escaped["ok"] and (root / "warn.py").read_text() == "x = '\\d'\n"


def test_a_failed_edit_of_a_small_file_shows_the_file_so_the_fix_needs_no_read(
        box: Box, root: Path):
    reply = box.call("edit_file", path="src/app.py", old_text="a * b", new_text="x")
    output = failed(reply, "0 matches", "This is 'src/app.py' now")
    assert output.endswith("\n     1\tdef add(a, b):\n     2\t    return a + b")
    assert reply["meta"]["file_shown"] is True
    failed(box.call("edit_file", path="src/app.py", old_text="", new_text="x"),
           "old_text is empty", "     1\tdef add(a, b):")
    (root / "big.py").write_text("x = 1\n" * 500)
    big = box.call("edit_file", path="big.py", old_text="y = 2", new_text="y = 3")
    assert "now" not in failed(big, "0 matches") and "file_shown" not in big["meta"]


def test_edit_with_many_matches_and_replace_all(box: Box, root: Path):
    (root / "m.txt").write_text("x = 1\nx = 1\ny = 2\nx = 1\n")
    failed(box.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 9"),
           "matches 3 times", "at lines 1, 2, 4", "replace_all=true")
    (root / "r.py").write_text("from b import f\n\n\ndef g():\n    return f(1)\n")
    many = failed(box.call("edit_file", path="r.py", old_text="f", new_text="h"), "matches 4 "
                  "times", "(at lines 1, 1, 4, 5)")
    assert "one call per line; the lines are:\nfrom b import f\ndef g():\n    return f(1)" in many
    assert (root / "m.txt").read_text() == "x = 1\nx = 1\ny = 2\nx = 1\n"
    reply = box.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 9",
                     replace_all=True)
    assert reply["ok"] and reply["meta"]["replacements"] == 3
    assert (root / "m.txt").read_text() == "x = 9\nx = 9\ny = 2\nx = 9\n"


def test_edit_creates_a_missing_file_without_old_text(box: Box, root: Path):
    reply = box.call("edit_file", path="new/mod.py", new_text="VALUE = 1\n")
    assert reply["ok"] and reply["meta"]["created"] and reply["meta"]["replacements"] == 0
    assert (root / "new" / "mod.py").read_text() == "VALUE = 1\n"
    failed(box.call("edit_file", path="new/mod.py", new_text="x"),
           "already exists", "give old_text", "write_file")
    failed(box.call("edit_file", path="nope.py", old_text="a", new_text="b"),
           "file not found: nope.py", "without old_text")
    failed(box.call("edit_file", path="new/mod.py", old_text="", new_text="b"),
           "old_text is empty", "write_file")
    assert (root / "new" / "mod.py").read_text() == "VALUE = 1\n"


def test_edit_with_empty_old_text_creates_a_missing_file(box: Box, root: Path):
    reply = box.call("edit_file", path="hello.py", old_text="", new_text="print('hello')\n")
    assert reply["ok"] and reply["meta"]["created"], reply
    assert (root / "hello.py").read_text() == "print('hello')\n"


def test_edit_keeps_crlf_and_invalid_bytes(box: Box, root: Path):
    (root / "dos.txt").write_bytes(b"\xff one\r\ntwo\r\nthree\r\n")
    reply = box.call("edit_file", path="dos.txt", old_text="one\ntwo", new_text="1\n2")
    assert reply["ok"], reply
    assert (root / "dos.txt").read_bytes() == b"\xff 1\r\n2\r\nthree\r\n"
    (root / "blob.bin").write_bytes(b"\x00abc")
    failed(box.call("edit_file", path="blob.bin", old_text="abc", new_text="x"), "binary file")


def test_a_hard_linked_file_is_never_written_through(box: Box, root: Path):
    (root / "Makefile").write_text("all:\n\ttrue\n")
    os.link(root / "Makefile", root / "notes.txt")
    for tool, args in [("write_file", {"path": "notes.txt", "content": "x"}),
                       ("edit_file", {"path": "notes.txt", "old_text": "true", "new_text": "x"})]:
        failed(box.call(tool, **args), "has 2 hard links", "nothing was written")
    preview = box.request({"id": 9, "tool": "preview", "args": {
        "tool": "write_file", "args": {"path": "notes.txt", "content": "x"}}})
    assert "has 2 hard links" in preview["meta"]["error"]
    assert (root / "Makefile").read_text() == "all:\n\ttrue\n"

