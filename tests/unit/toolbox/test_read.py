"""The toolbox: read_file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.toolbox.boxes import Box, failed


def test_read_numbered_lines_and_ranges(box: Box, root: Path):
    (root / "five.txt").write_text("".join(f"line {i}\n" for i in range(1, 6)))
    whole = box.call("read_file", path="five.txt")
    assert whole["ok"] and whole["output"].splitlines()[0] == "     1\tline 1"
    assert whole["meta"]["lines"] == 5 and whole["meta"]["total_lines"] == 5
    assert whole["meta"]["truncated"] is False and whole["meta"]["total_bytes"] == 35
    part = box.call("read_file", path="five.txt", start_line=2, end_line=3)
    assert part["output"] == "     2\tline 2\n     3\tline 3"
    assert box.call("read_file", path="five.txt", start_line=5)["output"] == "     5\tline 5"
    failed(box.call("read_file", path="five.txt", start_line=9),
           "start_line 9 is past the end of 'five.txt' (5 lines)")
    failed(box.call("read_file", path="five.txt", start_line=3, end_line=2),
           "end_line (2) is before start_line (3)")


def test_a_page_ends_where_the_host_says_and_names_the_next_start_line(box: Box, root: Path):
    (root / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 301)))
    first = box.call("read_file", path="long.py", page_lines=128)
    assert first["meta"]["lines"] == 128 and first["meta"]["truncated"] is True
    assert first["output"].splitlines()[-2] == "   128\tx128 = 128"
    assert first["output"].endswith("[truncated: showing lines 1-128 of 300. To read more, "
                                    "call read_file with start_line=129.]")
    last = box.call("read_file", path="long.py", start_line=257, page_lines=128)
    assert last["meta"]["lines"] == 44 and last["meta"]["truncated"] is False
    short = box.call("read_file", path="long.py", start_line=10, end_line=12, page_lines=128)
    assert short["output"] == "    10\tx10 = 10\n    11\tx11 = 11\n    12\tx12 = 12"
    failed(box.call("read_file", path="long.py", page_lines=0),
           "argument 'page_lines' must be 1 or more")


@pytest.mark.parametrize(("path", "message"), [
    ("src", "'src' is a directory; use list_files"), ("missing.txt", "file not found: missing.txt"),
    ("src/nope/x.py", "file not found: src/nope/x.py"),
])
def test_read_errors(box: Box, path: str, message: str):
    failed(box.call("read_file", path=path), message)


def test_read_binary_invalid_utf8_empty_crlf_and_fifo(box: Box, root: Path):
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 1000)
    assert failed(box.call("read_file", path="blob.bin")) == "binary file (3000 bytes); not shown"
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    latin = box.call("read_file", path="latin1.txt")
    assert latin["ok"] and "caf\ufffd" in latin["output"] and "not valid UTF-8" in latin["output"]
    (root / "empty.txt").write_bytes(b"")
    assert box.call("read_file", path="empty.txt")["output"].startswith("(empty file")
    (root / "dos.txt").write_bytes(b"a\r\nb\r\n")
    assert box.call("read_file", path="dos.txt")["output"] == "     1\ta\n     2\tb"
    os.mkfifo(root / "pipe")
    failed(box.call("read_file", path="pipe"), "'pipe' is not a regular file")


def test_read_a_50_mb_file_in_pages(box: Box, root: Path):
    with (root / "big.log").open("wb") as f:
        f.write(b"".join(b"line %d " % i + b"x" * 40 + b"\n" for i in range(1_000_000)))
    assert (root / "big.log").stat().st_size > 50_000_000
    first = box.call("read_file", path="big.log")
    assert first["ok"] and first["meta"]["truncated"] is True and len(first["output"]) < 110_000
    shown = first["meta"]["lines"]
    assert f"showing lines 1-{shown} of 1000000" in first["output"]
    assert f"call read_file with start_line={shown + 1}" in first["output"]
    tail = box.call("read_file", path="big.log", start_line=999_999, end_line=1_000_005)
    assert tail["output"].splitlines()[0].startswith("999999\tline 999998 ")
    assert tail["meta"]["lines"] == 2 and not tail["meta"]["truncated"]


def test_read_a_huge_single_line(box: Box, root: Path):
    (root / "min.js").write_bytes(b"x" * 10_000_000 + "\u00e9".encode() * 10)
    reply = box.call("read_file", path="min.js")
    assert reply["ok"] and len(reply["output"]) < 3000
    assert "line cut" in reply["output"] and "longer than 2000 characters" in reply["output"]
    assert "not valid UTF-8" not in reply["output"]

