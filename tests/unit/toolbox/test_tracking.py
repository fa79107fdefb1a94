"""The toolbox: Change tracking around run_shell_command."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import Box, by_path, change, sha, shell


def test_shell_changes_are_reported_with_hashes(box: Box, root: Path):
    (root / "run.sh").write_text("echo hi\n")
    (root / "old.txt").write_text("old\n")
    reply = shell(box, "printf 'more\\n' >> README.md; echo new > new.txt; rm old.txt; "
                       "chmod 700 run.sh; ln -s README.md link; rm -r src && echo x > src")
    assert reply["ok"], reply
    assert by_path(reply) == {
        "README.md": change("README.md", "file", "modified", sha256_before=sha(b"# demo\n"),
                            sha256_after=sha(b"# demo\nmore\n"), size_before=7, size_after=12,
                            mode_before="0644", mode_after="0644"),
        "new.txt": change("new.txt", "file", "created", sha256_after=sha(b"new\n"),
                          size_after=4, mode_after="0644"),
        "old.txt": change("old.txt", "file", "deleted", sha256_before=sha(b"old\n"),
                          size_before=4, mode_before="0644"),
        "run.sh": change("run.sh", "file", "mode", sha256_before=sha(b"echo hi\n"),
                         sha256_after=sha(b"echo hi\n"), size_before=8, size_after=8,
                         mode_before="0644", mode_after="0700"),
        "link": change("link", "symlink", "created", mode_after="0777", target="README.md"),
        "src": change("src", "file", "type", sha256_after=sha(b"x\n"), size_after=2,
                      mode_before="0755", mode_after="0644"),
        "src/app.py": change("src/app.py", "file", "deleted", size_before=32,
                             sha256_before=sha(b"def add(a, b):\n    return a + b\n"),
                             mode_before="0644"),
    }
    assert [c["path"] for c in reply["meta"]["changes"]] == sorted(by_path(reply))
    assert reply["meta"]["changes_total"] == 7
    assert reply["meta"]["changes_truncated"] is reply["meta"]["changes_incomplete"] is False
    assert reply["output"] == ("exit_code: 0\nfiles changed: 2 created, 1 modified, 2 deleted, "
                               "1 mode changed, 1 type changed\n(no output)")
    assert "outside_changes" not in reply["meta"]


def test_a_command_changing_nothing_reports_no_changes(box: Box, root: Path):
    reply = shell(box, "cat README.md; touch README.md; echo y > .sandbox-agent/y")
    assert reply["meta"]["changes"] == [] and reply["meta"]["changes_total"] == 0
    assert reply["output"] == "exit_code: 0\nstdout:\n# demo"


def test_only_read_only_mounts_are_left_unwalked(box: Box, root: Path):
    """Here (no container) .git is not a read-only mount, so what a command writes in it counts;
    in the sandbox it is one, and nothing can be written there."""
    reply = shell(box, "echo x > .git/x; mkdir -p .git.quarantined-cache && echo y > "
                       ".git.quarantined-cache/big")
    assert {c["path"] for c in reply["meta"]["changes"]} == {
        ".git/x", ".git.quarantined-cache", ".git.quarantined-cache/big"}


def test_changes_between_calls_are_outside_changes(box: Box, root: Path):
    assert shell(box, "true")["meta"]["changes"] == []
    (root / "README.md").write_text("# edited on the host\n")
    (root / "host.txt").write_text("h")
    assert box.call("write_file", path="notes/todo.txt", content="mine")["ok"]
    assert box.call("edit_file", path="src/app.py", old_text="a + b", new_text="b + a")["ok"]

    reply = shell(box, "echo c > cmd.txt")
    assert set(by_path(reply)) == {"cmd.txt"}
    outside = by_path(reply, "outside_changes")
    assert set(outside) == {"README.md", "host.txt"}
    assert outside["README.md"]["sha256_after"] == sha(b"# edited on the host\n")
    assert reply["meta"]["outside_changes_total"] == 2
    assert "files changed outside the sandbox since the last call (not by you): 1 created, " \
           "1 modified" in reply["output"]
    assert "outside_changes" not in shell(box, "true")["meta"]


def test_the_change_lists_are_capped(box: Box, root: Path):
    reply = shell(box, "mkdir many && cd many && for i in $(seq 1 600); do : > f$i; done")
    meta = reply["meta"]
    assert len(meta["changes"]) == 500 and meta["changes_total"] == 601
    assert meta["changes_truncated"] is True
    assert meta["changes"][0]["path"] == "many"
    assert "files changed: 601 created" in reply["output"]


def in_process(root: Path, *argv: str) -> Callable[[str], dict[str, Any]]:
    """run_shell_command in this process (so a test can shrink the toolbox's caps)."""
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root), *argv]))
    return lambda command: toolbox.call_tool(ctx, "run_shell_command", {"command": command})


def test_big_files_are_not_hashed_but_still_compared(root: Path, monkeypatch):
    toolbox.patch(monkeypatch, "HASH_FILE_MAX", 100)
    toolbox.patch(monkeypatch, "HASH_WALK_MAX", 150)
    (root / "big.bin").write_bytes(b"x" * 200)
    run = in_process(root)
    reply = run("head -c 300 /dev/zero >> big.bin; head -c 90 /dev/zero > a.bin; "
                "head -c 90 /dev/zero > b.bin")
    found = by_path(reply)
    assert found["big.bin"]["change"] == "modified"
    assert found["big.bin"]["sha256_before"] is found["big.bin"]["sha256_after"] is None
    assert found["big.bin"]["size_before"] == 200 and found["big.bin"]["size_after"] == 500
    assert found["big.bin"]["unhashed"] == "not hashed: larger than 0 MiB"
    assert found["a.bin"]["sha256_after"] == sha(b"\0" * 90)  # 90 of the 150 bytes a walk
    assert found["b.bin"]["sha256_after"] is None
    assert found["b.bin"]["unhashed"] == "not hashed: over the 0 MiB hashed per walk"
    assert "unhashed" not in found["a.bin"]
    again = by_path(run("rm b.bin; head -c 90 /dev/zero > c.bin"))  # a.bin is not read again
    assert again["c.bin"]["sha256_after"] == sha(b"\0" * 90)


def test_a_capped_walk_says_so_and_reports_no_false_deletions(root: Path, monkeypatch):
    toolbox.patch(monkeypatch, "TRACK_MAX_ENTRIES", 4)
    run = in_process(root)
    reply = run("true")
    assert reply["meta"]["changes_incomplete"] is True
    assert "only part of it was checked for changes" in reply["output"]
    assert not [c for c in reply["meta"]["changes"] if c["change"] == "deleted"]


def test_an_unreadable_directory_is_still_walked_and_its_mode_kept(box: Box, root: Path):
    reply = shell(box, "mkdir hide && echo secret-work > hide/f && chmod 000 hide")
    assert {c["path"] for c in reply["meta"]["changes"]} == {"hide", "hide/f"}
    assert reply["meta"]["changes_incomplete"] is False
    assert stat.S_IMODE((root / "hide").stat().st_mode) == 0
    more = shell(box, "chmod 700 hide && echo more > hide/g && chmod 000 hide")
    assert {c["path"] for c in more["meta"]["changes"]} == {"hide/g"}

