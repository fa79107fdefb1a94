"""The after-session check changes nothing through a link: another session's container may
still be writing the tree while it runs (red-team round 17)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from executor.gitsafety.aftercheck import after_session, clear_setid, not_at_start, sweep
from executor.gitsafety.walk import TreeScan, scan


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_set_id_bits_are_cleared_on_the_entry_itself(tmp_path: Path):
    (tmp_path / "d").mkdir()
    os.chmod(tmp_path / "d", 0o2775)
    (tmp_path / "d" / "f").write_text("x")
    os.chmod(tmp_path / "d" / "f", 0o4755)
    assert clear_setid(tmp_path, "d") and clear_setid(tmp_path, "d/f")
    assert (_mode(tmp_path / "d"), _mode(tmp_path / "d" / "f")) == (0o775, 0o755)
    assert not clear_setid(tmp_path, "d/f")  # nothing left to clear


def test_a_name_swapped_for_a_link_changes_nothing_outside(tmp_path: Path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "etc").mkdir()
    secret = outside / "etc" / "target"
    secret.write_text("host")
    os.chmod(secret, 0o4600)
    (root / "x").symlink_to(outside)  # was a directory when the walk listed x/etc/target
    (root / "leaf").symlink_to(secret)  # was a set-id file when the walk saw it
    with pytest.raises(OSError):
        clear_setid(root, "x/etc/target")
    assert not clear_setid(root, "leaf")
    assert _mode(secret) == 0o4600


def test_the_sweep_still_clears_what_a_session_set(tmp_path: Path):
    before = scan(tmp_path)
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "tool", 0o6755)
    done = sweep(tmp_path, before, 0)
    assert done.setid_cleared == ["tool"] and _mode(tmp_path / "tool") == 0o755


def test_a_reply_naming_the_persons_own_repository_renames_nothing(tmp_path: Path):
    """The toolbox's `undisabled` only adds paths to check: a forged `.git` (red-team round
    17) is the person's repository, which the start's walk saw."""
    (tmp_path / ".git" / "modules" / "lib").mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    start = scan(tmp_path)
    said: list[str] = []
    forged = {".git", "sub/.git", ".GIT", ".git/modules/lib/.git", "./.git"}
    after_session(tmp_path, start, 0, {}, [], forged, said.append)
    assert (tmp_path / ".git").is_dir() and (tmp_path / "sub" / ".git").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "sub"]
    assert said == []


def test_a_repository_the_toolbox_reports_that_was_not_there_is_still_renamed(tmp_path: Path):
    start = scan(tmp_path)
    (tmp_path / "made" / ".git").mkdir(parents=True)
    said: list[str] = []
    after_session(tmp_path, start, 0, {}, [], {"made/.git"}, said.append)
    [moved] = [p.name for p in (tmp_path / "made").iterdir()]
    assert moved.startswith(".git.quarantined-")
    assert any("appeared during the session at made/.git" in line for line in said), said


def test_only_what_the_start_did_not_see_is_taken_from_the_toolbox():
    start = TreeScan({".git": "dir", "vendor/x/.git": "file"})
    reported = {".git", ".Git", "vendor/x/.git", ".git/worktrees/w/.git", "vendor/.git",
                "new/.git", "vendor/x/inner/.git"}  # (a `.git` file is no folder to be in)
    assert not_at_start(start, reported) == {"vendor/.git", "new/.git", "vendor/x/inner/.git"}


def test_fifos_made_since_the_start_are_removed_and_said(tmp_path: Path):
    os.mkfifo(tmp_path / "before")
    time.sleep(0.05)  # file times are a clock tick coarse
    started = time.time_ns()
    tree = scan(tmp_path)
    time.sleep(0.05)
    (tmp_path / "d").mkdir()
    for name in (".gitignore", "d/.mailmap"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "ln").symlink_to(tmp_path / "before")
    said: list[str] = []
    after_session(tmp_path, tree, started, {}, [], set(), said.append)
    assert not os.path.lexists(tmp_path / ".gitignore")
    assert not os.path.lexists(tmp_path / "d" / ".mailmap")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "before").st_mode)  # there at the start
    assert os.path.islink(tmp_path / "ln")
    assert any("removed the FIFO the sandbox left at .gitignore" in s for s in said), said


def test_a_protected_path_moved_away_is_found_where_it_went(tmp_path: Path):
    hooks = tmp_path / "tools" / "git" / "hooks"
    hooks.mkdir(parents=True)
    tree, started = scan(tmp_path), time.time_ns()
    identities = {"tools/git/hooks": (os.stat(hooks).st_dev, os.stat(hooks).st_ino),
                  "other/hooks": (1, 2)}  # gone, and nowhere in the tree
    (tmp_path / "tools").rename(tmp_path / "tools-old")
    said: list[str] = []
    after_session(tmp_path, tree, started, identities, [], set(), said.append)
    assert any("tools/git/hooks is protected (git on the host runs it) and is gone" in s
               and "it is now at tools-old/git/hooks" in s for s in said), said
    assert any("other/hooks" in s and "find it in the project" in s for s in said), said


def test_a_fifo_inside_a_repository_renamed_aside_is_removed(tmp_path: Path):
    tree, started = scan(tmp_path), time.time_ns()
    time.sleep(0.05)
    (tmp_path / "x" / ".git").mkdir(parents=True)
    os.mkfifo(tmp_path / "x" / ".git" / ".gitignore")
    said: list[str] = []
    after_session(tmp_path, tree, started, {}, [], set(), said.append)
    [aside] = (tmp_path / "x").glob(".git.quarantined-*")
    assert not os.path.lexists(aside / ".gitignore"), said
    assert any(f"removed the FIFO the sandbox left at x/{aside.name}/.gitignore" in s
               for s in said), said


@pytest.mark.parametrize("kind", ["gitdir-file", "link"])
def test_a_git_file_or_link_renamed_aside_is_no_error(tmp_path: Path, kind: str):
    tree, started = scan(tmp_path), time.time_ns()
    time.sleep(0.05)
    (tmp_path / "x").mkdir()
    if kind == "link":
        (tmp_path / "x" / ".git").symlink_to(tmp_path)
    else:
        (tmp_path / "x" / ".git").write_text("gitdir: /elsewhere\n")
    said: list[str] = []
    after_session(tmp_path, tree, started, {}, [], set(), said.append)
    assert list((tmp_path / "x").glob(".git.quarantined-*")), said
    assert not any("could not check" in s for s in said), said
