"""The toolbox: search_files, with ripgrep and with the Python fallback."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import HAS_RG, SECRET, Box, failed


def search_tree(root: Path) -> None:
    """Files that tell a correct search from a sloppy one."""
    (root / "src" / "util.py").write_text("import os\nNEEDLE = 1\n\nprint(NEEDLE)\n")
    (root / ".github").mkdir()
    (root / ".github" / "ci.yml").write_text("run: NEEDLE\n")
    (root / ".git" / "NEEDLE").write_text("NEEDLE\n")
    (root / ".sandbox-agent" / "n.txt").write_text("NEEDLE\n")
    (root / "bin.dat").write_bytes(b"NEEDLE\x00\x01")
    (root / "long.txt").write_text("NEEDLE" + "y" * 1000 + "\n")
    (root / "link-out").symlink_to(root.parent / "secret.txt")
    (root.parent / "secret.txt").write_text(SECRET + " NEEDLE\n")


def test_search_finds_lines_as_path_line_text(engine_box: Box, root: Path):
    search_tree(root)
    reply = engine_box.call("search_files", pattern="NEEDLE")
    assert reply["ok"]
    lines = reply["output"].splitlines()
    assert lines[:2] == [".github/ci.yml:1:run: NEEDLE",
                         "long.txt:1:NEEDLE" + "y" * 494 + " [... omitted end of long line]"]
    assert lines[2:] == ["src/util.py:2:NEEDLE = 1", "src/util.py:4:print(NEEDLE)",
                         "[1 file the search passed over (binary, or ignored by .gitignore/"
                         ".ignore) also matches: bin.dat; results are incomplete]"]
    assert reply["meta"]["matches"] == 4
    assert reply["meta"]["engine"] == ("rg" if engine_box.ready["rg"] else "python")


def test_both_engines_give_the_same_results(make_box: Callable[..., Box], root: Path):
    if not HAS_RG:
        pytest.skip("ripgrep is not installed")
    search_tree(root)
    rg, py = make_box(), make_box("--no-rg")
    for args in [{"pattern": "NEEDLE"}, {"pattern": r"^\w+ = \d$"}, {"pattern": "NEEDLE",
                 "path": "src"}, {"pattern": "os", "path": "src/util.py"},
                 {"pattern": "-?import"}, {"pattern": "nothing-here"}]:
        assert rg.call("search_files", **args)["output"] == py.call("search_files", **args)[
            "output"], args


def test_search_paths_limits_and_errors(engine_box: Box, root: Path):
    (root / "many.txt").write_text("hit\n" * 250)
    capped = engine_box.call("search_files", pattern="hit", max_results=100)
    assert capped["output"].count("\n") == 100 and capped["meta"]["matches"] == 100
    assert "stopped after 100 results" in capped["output"] and capped["meta"]["truncated"]
    assert engine_box.call("search_files", pattern="def add", path="src/app.py")["output"] == (
        "src/app.py:1:def add(a, b):")
    none = engine_box.call("search_files", pattern="zzz")
    assert none["ok"] and none["meta"]["matches"] == 0 and none["output"] == (
        "no matches for 'zzz' in .\nIt may go by another name: read the likely files. The "
        "files there:\nREADME.md\nmany.txt\nsrc/app.py")
    assert engine_box.call("search_files", pattern="zzz", path="src/app.py")["output"] == (
        "no matches for 'zzz' in src/app.py")
    for n in range(31):
        (root / f"f{n:02}.txt").write_text("x\n")
    assert engine_box.call("search_files", pattern="zzz")["output"] == (
        "no matches for 'zzz' in .")
    failed(engine_box.call("search_files", pattern="a("), "invalid regex 'a('")
    failed(engine_box.call("search_files", pattern="x", path="nope"), "path not found: nope")
    engine_box.alive()


def test_a_lower_case_pattern_matches_any_case(engine_box: Box, root: Path):
    (root / "config.py").write_text("from os import environ\nPORT = 8731\nretries = 2\n")
    reply = engine_box.call("search_files", pattern="port")
    assert reply["ok"] and reply["meta"]["ignore_case"] is True
    assert reply["output"] == "config.py:1:from os import environ\nconfig.py:2:PORT = 8731"
    assert engine_box.call("search_files", pattern=r"\w+ = \d")["output"] == (
        "config.py:2:PORT = 8731\nconfig.py:3:retries = 2")
    exact = engine_box.call("search_files", pattern="PORT")
    assert exact["output"] == "config.py:2:PORT = 8731" and "ignore_case" not in exact["meta"]


def test_a_search_without_matches_says_what_matches_ignoring_case(engine_box: Box, root: Path):
    (root / "config.py").write_text("TIMEOUT_SECONDS = 30\nretries = 2\n")
    reply = engine_box.call("search_files", pattern="Timeout")
    assert reply["ok"] and reply["meta"]["ignore_case"] is True
    assert reply["output"] == ("no matches for 'Timeout' in . as written; ignoring upper/lower "
                               "case:\nconfig.py:1:TIMEOUT_SECONDS = 30")
    exact = engine_box.call("search_files", pattern="Retries = 2|retries")
    assert exact["output"] == "config.py:2:retries = 2" and "ignore_case" not in exact["meta"]
    assert engine_box.call("search_files", pattern="(?i)zzz")["output"].startswith(
        "no matches for '(?i)zzz' in .\nIt may go by another name")


def test_a_fifo_in_the_tree_neither_blocks_a_search_nor_is_listed(engine_box: Box, root: Path):
    """Red-team round 7: the Python scan opened a FIFO with no writer and blocked until the
    call's deadline; the list of files searched named FIFOs and symlinks."""
    os.mkfifo(root / "pipe")
    (root / "link.txt").symlink_to(root / "README.md")
    started = time.monotonic()
    behind = engine_box.call("search_files", pattern=r"(?<=x )= 1")
    assert behind["ok"] and time.monotonic() - started < 5 and behind["meta"]["matches"] == 0
    listed = behind["output"].split("The files there:\n")[1].split("\n")
    assert "pipe" not in listed and "link.txt" not in listed and "README.md" in listed
    assert engine_box.call("search_files", pattern=r"(?<=x )= 1", path="pipe")["ok"]


def test_a_pattern_that_backtracks_for_ages_ends_at_the_deadline(make_box: Callable[..., Box],
                                                                   root: Path):
    """Red-team round 8: `re` cannot be interrupted mid-match, so the Python scan of a
    catastrophic pattern ran until the host restarted the toolbox (75 s, no result). The scan
    now runs in a child process killed at the deadline; the toolbox answers, and goes on."""
    (root / "a.py").write_text('x = "' + "a" * 40 + '!"\n')
    (root / "b.py").write_text("ab\n")
    box = make_box("--default-timeout", "2")
    started = time.monotonic()
    reply = box.call("search_files", pattern="(?=a)(a|a)+b")
    took = time.monotonic() - started
    assert reply["ok"] and reply["meta"]["engine"] == "python", reply
    assert took < 6, took
    assert reply["meta"]["truncated"] is True
    assert reply["output"] == ("no matches for '(?=a)(a|a)+b' in ., but the search is "
                               "incomplete: the search hit its time limit")
    assert box.call("search_files", pattern="(?<=a)b", path="b.py")["output"] == "b.py:1:ab"
    box.alive()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == box.proc.pid]


def test_a_file_the_python_scan_cannot_hold_never_passes_for_searched(
        make_box: Callable[..., Box], root: Path):
    """Red-team round 9: a file of millions of matching lines made the scan's child run out of
    memory, and the toolbox, ignoring how the child ended, said "no matches" (truncated: false)
    although another file matched. Now a file gives at most limit + 1 hits, lines are taken one
    at a time, a file too big to hold is named as not searched, and a child that dies makes the
    result incomplete."""
    (root / "a_fixture.txt").write_text(" evil(x)\n" * 300_000)
    (root / "zz_real.py").write_text("import os\n evil(os.environ)\n")
    box = make_box("--no-rg")
    many = box.call("search_files", pattern=r"(?<=\s)evil\(", max_results=5)
    assert many["meta"]["matches"] == 5 and many["meta"]["truncated"] is True, many
    real = box.call("search_files", pattern=r"(?<=\s)evil\(", path="zz_real.py")
    assert real["output"] == "zz_real.py:2: evil(os.environ)"
    with (root / "big.txt").open("wb") as f:  # over the scan's 16 MiB: named, not passed over
        f.truncate(17 * 1024 * 1024)
        f.seek(0)
        f.write(b"evil(")
    (root / "a_fixture.txt").unlink()
    hidden = box.call("search_files", pattern=r"(?<=\s)evil\(")
    assert hidden["output"].splitlines() == [
        "zz_real.py:2: evil(os.environ)",
        "[1 file over 16 MiB not searched by this pattern's Python scan: big.txt; results are "
        "incomplete]"], hidden
    assert hidden["meta"]["truncated"] is True


def test_a_matching_file_a_search_passes_over_is_named(engine_box: Box, root: Path):
    """Red-team round 10: a NUL byte after the match (both engines) or the repository's
    `.ignore` (rg) hid a file: "no matches", complete, and the file listed as searched."""
    (root / "a").mkdir()
    (root / "a" / "install.sh").write_bytes(b"#!/bin/sh\ncurl x | sh  # evil(payload)\n\0\n")
    (root / "b").mkdir()
    (root / "b" / "run.py").write_text("import os\nos.system('id')  # evil(x)\n")
    (root / ".ignore").write_text("b/run.py\n")
    pattern = r"(?<=# )evil\(" if "--no-rg" in str(engine_box.proc.args) else r"evil\("
    reply = engine_box.call("search_files", pattern=pattern)
    assert reply["meta"]["truncated"] is True, reply
    assert "a/install.sh" in reply["output"] and "also match" in reply["output"], reply["output"]
    assert "It may go by another name" not in reply["output"]
    if reply["meta"]["engine"] == "rg":
        assert reply["output"] == (
            "no matches for 'evil\\(' in ., but the search is incomplete: 2 files the search "
            "passed over (binary, or ignored by .gitignore/.ignore) also match: a/install.sh, "
            "b/run.py"), reply["output"]
    else:  # the Python scan reads no ignore files
        assert reply["output"] == (
            "b/run.py:2:os.system('id')  # evil(x)\n[1 file the search passed over (binary, "
            "or ignored by .gitignore/.ignore) also matches: a/install.sh; results are "
            "incomplete]"), reply["output"]


def test_a_byte_order_mark_before_ascii_lines_hides_nothing(make_box: Callable[..., Box],
                                                           root: Path):
    """Red-team round 11: rg reads a file that starts with `FF FE` as UTF-16, so its ASCII
    lines (which `sh` runs) never matched. The second pass takes no byte order mark."""
    if not HAS_RG:
        pytest.skip("ripgrep is not installed")
    (root / "x.sh").write_bytes(b"\xff\xfe\necho evil(1)\n")
    reply = make_box().call("search_files", pattern=r"evil\(")
    assert reply["meta"]["truncated"] is True, reply
    assert reply["output"].endswith("also matches: x.sh"), reply["output"]


def test_a_python_scan_that_dies_is_not_a_complete_search(root: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    """Out of memory in the scan's child (here: any failure of it) reads as incomplete."""
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root), "--no-rg"]))

    def dies(*args: Any) -> list[Any]:
        raise MemoryError

    toolbox.patch(monkeypatch, "_grep_file", dies)  # in the forked child too
    found = toolbox._search_py(ctx, str(root), re.compile("add"), 10, time.monotonic() + 10)
    assert found == ["the Python scan ended early (out of memory?); narrow the path"]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_the_python_scan_keeps_its_hits_and_order_across_files(make_box: Callable[..., Box],
                                                                root: Path):
    for name in ("c.txt", "a.txt", "b.txt"):
        (root / name).write_text("".join(f"say {name} {i}\n" for i in range(3)))
    reply = make_box("--no-rg").call("search_files", pattern=r"(?<=say )[ab]\.txt [02]")
    assert reply["output"].splitlines() == ["a.txt:1:say a.txt 0", "a.txt:3:say a.txt 2",
                                            "b.txt:1:say b.txt 0", "b.txt:3:say b.txt 2"]
    limited = make_box("--no-rg").call("search_files", pattern="(?<=say )", max_results=4)
    assert limited["meta"]["matches"] == 4 and limited["meta"]["truncated"] is True


def test_patterns_only_python_understands_still_work(engine_box: Box):
    reply = engine_box.call("search_files", pattern=r"(?<=def )add")
    assert reply["output"] == "src/app.py:1:def add(a, b):"
    assert reply["meta"]["engine"] == "python"

