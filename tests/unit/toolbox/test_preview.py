"""The toolbox: The preview of a write and the hashes an approval pins."""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

from tests.unit.toolbox.boxes import Box, failed, preview, preview_request, sha


def test_preview_of_a_new_file_is_all_additions_and_writes_nothing(box: Box, root: Path):
    reply = preview(box, "write_file", path="pkg/new.py", content="A = 1\nB = 2")
    assert reply["output"] == ("--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n"
                               "\\ No newline at end of file\n")
    assert reply["meta"] == {"path": "pkg/new.py", "resolved": "pkg/new.py", "symlink": False,
                             "exists": False, "binary": False, "sha256_before": None,
                             "sha256_after": hashlib.sha256(b"A = 1\nB = 2").hexdigest(),
                             "error": None}
    assert not (root / "pkg").exists()


def test_a_preview_costs_what_changed_and_gives_up_on_crafted_text(box: Box, root: Path):
    """Red-team round 7: difflib is quadratic on many short repeated lines; a 30,000-line
    write kept the preview busy past the call's deadline."""
    big = "".join(f"line {i}\n" for i in range(100_000))
    (root / "big.txt").write_text(big)
    started = time.monotonic()
    one = preview(box, "edit_file", path="big.txt", old_text="line 50000\n",
                  new_text="line X\n")
    assert time.monotonic() - started < 5
    assert one["output"] == ("--- a/big.txt\n+++ b/big.txt\n@@ -49998,7 +49998,7 @@\n"
                             " line 49997\n line 49998\n line 49999\n-line 50000\n+line X\n"
                             " line 50001\n line 50002\n line 50003\n")
    rng = random.Random(5)
    crafted = "".join(f"{rng.randint(0, 150)}\n" for _ in range(30_000))
    started = time.monotonic()
    described = preview(box, "write_file", path="big.txt", content=crafted)
    assert time.monotonic() - started < 5
    assert described["output"].startswith("content not shown (over 5000 changed lines)")
    assert described["meta"]["sha256_after"] == hashlib.sha256(crafted.encode()).hexdigest()


def test_counting_the_changed_lines_after_a_write_stays_cheap(box: Box, root: Path):
    """Red-team round 8: after the write, lines_changed ran difflib without autojunk, cubic on
    crafted lines (2,400 lines took minutes): the host restarted the toolbox and the written
    file had no write record. Past a few hundred lines the count is a multiset difference."""
    (root / "data.txt").write_text("A\n" + "x\n" * 2400 + "END1\n")
    started = time.monotonic()
    reply = box.call("write_file", path="data.txt", content="B\n" + "x\nz\n" * 1200 + "END2\n")
    assert time.monotonic() - started < 3
    assert reply["ok"] and reply["meta"]["lines_changed"] == 2404, reply
    small = box.call("edit_file", path="src/app.py", old_text="a + b", new_text="b + a")
    assert small["meta"]["lines_changed"] == 2


def test_a_write_goes_ahead_only_as_the_preview_showed_it(box: Box, root: Path):
    """Red-team round 7: compile()'s recursion limit depends on the caller's stack, so the
    preview and the edit could take different branches; the host now sends the preview's
    sha256_after, and a call that would write other bytes writes nothing."""
    (root / "a.py").write_text("def f():\n    return 1\n")
    args = {"path": "a.py", "old_text": "return 1", "new_text": "return 2"}
    shown = preview(box, "edit_file", **args)["meta"]["sha256_after"]
    assert shown == hashlib.sha256(b"def f():\n    return 2\n").hexdigest()
    other = box.call("edit_file", **args, expect_sha256_after="0" * 64)
    failed(other, "would not be written as it was shown for approval; nothing was written")
    assert other["meta"]["not_as_approved"] is True
    assert (root / "a.py").read_text() == "def f():\n    return 1\n"
    assert box.call("edit_file", **args, expect_sha256_after=shown)["ok"]
    failed(box.call("write_file", path="b.txt", content="x", expect_sha256_after=shown),
           "would not be written as it was shown")
    assert not (root / "b.txt").exists()


def test_preview_of_an_overwrite_diffs_against_the_file_on_disk(box: Box, root: Path):
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    content = (root / "f.txt").read_text().replace("line 5\n", "five\n") + "\x1b[2K tail\n"
    reply = preview(box, "write_file", path="f.txt", content=content)
    assert reply["output"].splitlines() == [
        "--- a/f.txt", "+++ b/f.txt",
        "@@ -2,9 +2,10 @@", " line 2", " line 3", " line 4", "-line 5", "+five", " line 6",
        " line 7", " line 8", " line 9", " line 10", "+\x1b[2K tail",
    ]
    assert reply["meta"]["exists"] and reply["meta"]["sha256_before"] == sha(
        (root / "f.txt").read_bytes())
    assert "five" not in (root / "f.txt").read_text()


def test_preview_of_an_edit_is_the_whole_files_diff_with_context(box: Box, root: Path):
    reply = preview(box, "edit_file", path="src/app.py", old_text="a + b", new_text="a - b")
    assert reply["output"] == ("--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n"
                               " def add(a, b):\n-    return a + b\n+    return a - b\n")
    assert reply["meta"]["error"] is None
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_preview_says_why_an_edit_would_fail(box: Box, root: Path):
    (root / "m.txt").write_text("x\nx\n")
    many = preview(box, "edit_file", path="m.txt", old_text="x", new_text="y")
    assert many["output"] == "" and "matches 2 times" in many["meta"]["error"]
    none = preview(box, "edit_file", path="m.txt", old_text="zzz", new_text="y")
    assert "0 matches" in none["meta"]["error"] and none["meta"]["exists"]
    outside = preview(box, "write_file", path="../secret.txt", content="x")
    assert "outside the project root" in outside["meta"]["error"]
    assert outside["meta"]["resolved"] is None
    git = preview(box, "write_file", path=".git/hooks/pre-commit", content="x")
    assert "read-only" in git["meta"]["error"]
    hidden = preview(box, "write_file", path=".sandbox-agent/x", content="x")
    assert "reserved" in hidden["meta"]["error"]


def test_preview_names_the_real_file_behind_a_symlink(box: Box, root: Path):
    (root / "link.py").symlink_to("src/app.py")
    (root / "lib").symlink_to("src", target_is_directory=True)
    reply = preview(box, "edit_file", path="link.py", old_text="a + b", new_text="a * b")
    assert reply["meta"]["symlink"] and reply["meta"]["resolved"] == "src/app.py"
    assert reply["output"].startswith("--- a/src/app.py\n+++ b/src/app.py\n")
    through = preview(box, "write_file", path="lib/app.py", content="x\n")
    assert through["meta"]["symlink"] and through["meta"]["resolved"] == "src/app.py"
    plain = preview(box, "write_file", path=str(root / "src" / "app.py"), content="x\n")
    assert not plain["meta"]["symlink"] and plain["meta"]["resolved"] == "src/app.py"


def test_preview_describes_binary_content_instead_of_dumping_it(box: Box, root: Path):
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    reply = preview(box, "write_file", path="blob.bin", content="text now\n")
    assert reply["meta"]["binary"]
    old, new = sha(b"\x00\x01\x02"), sha(b"text now\n")
    assert reply["output"] == (f"content not shown (binary or not UTF-8)\n"
                               f"before: 3 bytes, sha256 {old}\nafter:  9 bytes, sha256 {new}")
    latin = preview(box, "write_file", path="new.txt", content="caf\udce9")
    assert latin["meta"]["binary"] and "before: no file" in latin["output"]


def test_preview_refuses_other_tools_and_bad_arguments(box: Box):
    failed(preview_request(box, {"tool": "run_shell_command", "args": {"command": "ls"}}),
           "preview is for write_file and edit_file")
    failed(preview_request(box, {"tool": "write_file", "args": {"path": "x"}}),
           "missing required argument 'content'")
    failed(preview_request(box, {"tool": "write_file"}), "missing required argument 'args'")


def test_a_write_approved_on_other_content_writes_nothing(box: Box, root: Path):
    before = (root / "README.md").read_bytes()
    (root / "README.md").write_text("# changed meanwhile\n")
    failed(box.call("write_file", path="README.md", content="new\n", expect_sha256=sha(before)),
           "'README.md' changed since it was approved; nothing was written")
    assert (root / "README.md").read_text() == "# changed meanwhile\n"
    failed(box.call("edit_file", path="README.md", old_text="changed", new_text="x",
                    expect_sha256=sha(before)), "changed since it was approved")
    failed(box.call("write_file", path="late.txt", content="x", expect_sha256=sha(b"")),
           "changed since it was approved")
    assert not (root / "late.txt").exists()


def test_a_write_approved_on_the_same_content_goes_ahead(box: Box, root: Path):
    now = sha((root / "README.md").read_bytes())
    assert box.call("write_file", path="README.md", content="ok\n", expect_sha256=now)["ok"]
    assert box.call("write_file", path="fresh.txt", content="1\n", expect_sha256="absent")["ok"]
    failed(box.call("write_file", path="fresh.txt", content="2\n", expect_sha256="absent"),
           "changed since it was approved")
    assert (root / "fresh.txt").read_text() == "1\n"


def test_a_call_its_preview_said_would_fail_writes_nothing(box: Box, root: Path):
    """Red-team round 7: shown "this call would fail", approved, then written (moved)."""
    (root / "a.py").write_text("def f():\n    return 1\n")
    args = {"path": "a.py", "old_text": "def f():", "new_text": "def f():\n\ndef g():\n    pass"}
    fails = box.call("edit_file", **args, expect_sha256_after="fails")
    failed(fails, "would not be written as it was shown for approval")
    assert (root / "a.py").read_text() == "def f():\n    return 1\n"
    assert box.call("edit_file", **args)["ok"]

