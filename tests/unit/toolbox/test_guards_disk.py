"""The toolbox: The disk budget."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import Box, by_path, failed, shell, stat_mode

SLOW_FILL = "for i in $(seq 1 60); do head -c 1000000 /dev/zero > fill$i; sleep 0.1; done"


def test_a_command_growing_the_project_past_the_budget_is_killed(make_box: Callable[..., Box],
                                                                  root: Path):
    box = make_box("--disk-budget", str(3 * 1024 * 1024))
    started = time.monotonic()
    reply = shell(box, SLOW_FILL)
    output = failed(reply, "the command was killed. Delete files you do not need to go on.")
    assert time.monotonic() - started < 5  # the whole loop takes more than 6 s
    assert output.startswith("disk budget exceeded: the project grew by ")
    assert "(budget 3.0 MB)" in output.splitlines()[0]
    assert reply["meta"]["disk_budget_exceeded"] is True and reply["meta"]["exit_code"] is None
    filled = sorted(root.glob("fill*"))
    assert 4 <= len(filled) < 40  # 4 files of 0.95 MB are over the budget; polled every 0.1s
    assert reply["meta"]["disk_growth"] > 3 * 1024 * 1024
    assert {c["path"] for c in reply["meta"]["changes"]} == {p.name for p in filled}

    still_over = shell(box, "echo alive")  # a command that adds nothing runs on
    assert still_over["ok"] and "note: disk budget exceeded" in still_over["output"]
    freed = shell(box, "rm fill*; head -c 1000000 /dev/zero > small")
    assert freed["ok"] and "disk budget" not in freed["output"]
    assert 0 < freed["meta"]["disk_growth"] < 2 * 1024 * 1024


def test_a_command_that_closed_its_output_is_watched_too(make_box: Callable[..., Box]):
    box = make_box("--disk-budget", str(2 * 1024 * 1024))
    reply = shell(box, "exec >/dev/null 2>&1; " + SLOW_FILL)
    failed(reply, "disk budget exceeded", "the command was killed")


def test_growth_made_outside_the_sandbox_does_not_count(make_box: Callable[..., Box],
                                                        root: Path):
    box = make_box("--disk-budget", str(1024 * 1024))
    assert shell(box, "true")["ok"]
    (root / "dataset.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    reply = shell(box, "echo small > s.txt")
    assert reply["ok"] and reply["meta"]["disk_growth"] < 64 * 1024, reply
    assert "dataset.bin" in by_path(reply, "outside_changes")


def test_writes_past_the_budget_are_refused(make_box: Callable[..., Box], root: Path):
    box = make_box("--disk-budget", "100000")
    reply = box.call("write_file", path="big.txt", content="x" * 200_000)
    failed(reply, "disk budget exceeded: writing 195.3 KB would make the project",
           "(budget 97.7 KB), so it was refused. Delete files you do not need to go on.")
    assert reply["meta"]["disk_budget_exceeded"] is True and not (root / "big.txt").exists()
    assert box.call("write_file", path="small.txt", content="a" + "x" * 50_000)["ok"]
    failed(box.call("edit_file", path="small.txt", old_text="a", new_text="y" * 60_000),
           "disk budget exceeded")
    assert box.call("write_file", path="small.txt", content="y" * 90_000)["ok"]  # it replaces


def test_low_free_space_kills_growing_commands_only(make_box: Callable[..., Box], root: Path):
    box = make_box("--min-free", str(1 << 60))
    reply = shell(box, SLOW_FILL)
    failed(reply, "disk nearly full: ", "free, less than the 1048576.0 TB the sandbox keeps "
                  "free; the command was killed.")
    assert reply["meta"]["disk_budget_exceeded"] is True
    assert shell(box, "rm fill*; echo fine")["ok"]
    failed(box.call("write_file", path="x.txt", content="x"), "disk nearly full")


def test_a_file_over_the_size_limit_says_it_is_the_disk_budget(make_box: Callable[..., Box],
                                                                root: Path):
    box = make_box("--disk-budget", "10000000", fsize=1_000_000)
    reply = shell(box, "head -c 5000000 /dev/zero > big.bin")
    output = failed(reply, "exit_code: 153 (file size limit exceeded (the disk budget))")
    assert output.startswith("exit_code: 153")
    assert (root / "big.bin").stat().st_size == 1_000_000
    assert shell(box, "rm big.bin")["ok"]


def test_no_track_switches_tracking_off(make_box: Callable[..., Box], root: Path):
    box = make_box("--no-track", "--readonly-dir", ".git", "--disk-budget", "1000")
    reply = shell(box, "mkdir -p sub/.git && : > t && chmod u+s t && head -c 100000 /dev/zero > z")
    assert reply["ok"] and reply["output"] == "exit_code: 0\n(no output)"
    assert not {"changes", "setid_cleared", "git_quarantined", "disk_growth"} & set(reply["meta"])
    assert (root / "sub" / ".git").is_dir() and stat_mode(root / "t") & 0o4000


def test_bad_disk_arguments_are_refused(root: Path):
    for argv in (["--disk-budget", "-1"], ["--min-free", "-5"]):
        with pytest.raises(SystemExit):
            toolbox.parse_args(["--root", str(root), *argv])

