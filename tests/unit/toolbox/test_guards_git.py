"""The toolbox: .git entries and repository look-alikes a command or a write makes."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import Box, failed, shell


@pytest.mark.parametrize(("make", "kind"), [
    ("git init -q sub 2>/dev/null || mkdir -p sub/.git/hooks; echo '#!/bin/sh' > sub/.git/hooks/pre-commit", "dir"),
    ("mkdir sub && echo 'gitdir: ../evil' > sub/.git", "file"),
    ("mkdir sub evil && ln -s ../evil sub/.git", "symlink"),
    ("mkdir -p sub/.GIT/hooks", "dir"),
])
def test_a_git_entry_made_by_a_command_is_quarantined(box: Box, root: Path, make: str, kind: str):
    reply = shell(box, make)
    names = os.listdir(root / "sub")
    assert not [n for n in names if n.lower() == ".git"], names
    [moved] = [n for n in names if n.startswith(".git.quarantined-")]
    assert len(moved) == len(".git.quarantined-") + 8
    name = ".GIT" if ".GIT" in make else ".git"
    assert reply["meta"]["git_quarantined"] == [
        {"path": f"sub/{name}", "kind": kind, "renamed_to": f"sub/{moved}"}]
    assert (f"new git repositories inside the project are not allowed in the sandbox; "
            f"sub/{name} was disabled (renamed to sub/{moved})") in reply["output"]
    after = shell(box, "ls -a sub")
    assert "outside_changes" not in after["meta"] and after["meta"]["changes"] == []


def test_a_replaced_git_dir_is_quarantined_and_an_edited_one_is_not(box: Box, root: Path):
    edited = shell(box, "echo x > .git/description")
    assert "git_quarantined" not in edited["meta"]
    replaced = shell(box, "mv .git old-git && mkdir .git")
    assert [q["path"] for q in replaced["meta"]["git_quarantined"]] == [".git"]
    assert not (root / ".git").exists() and (root / "old-git" / "config").is_file()


def test_git_entries_are_left_alone_when_git_writes_are_allowed(make_box: Callable[..., Box],
                                                                  root: Path):
    reply = shell(make_box(), "mkdir -p sub/.git")
    assert (root / "sub" / ".git").is_dir() and "git_quarantined" not in reply["meta"]


def test_the_git_guard_refuses_commands_after_a_repo_appears_outside(
        make_box: Callable[..., Box], root: Path):
    box = make_box("--readonly-dir", ".git", "--git-guard")
    assert shell(box, "true")["ok"]  # the project's own .git predates the session
    (root / "vendor" / ".git").mkdir(parents=True)
    for _ in range(2):  # until the host restarts the sandbox
        reply = shell(box, "touch ran")
        failed(reply, "a git repository appeared in the project from outside the sandbox "
                      "during this session (vendor/.git); the command was not run")
        assert reply["meta"]["remount_needed"] == ["vendor/.git"]
        assert not (root / "ran").exists()
    assert box.call("write_file", path="vendor/x.txt", content="x")["ok"]


def test_the_git_guard_counts_repos_made_before_the_first_command(
        make_box: Callable[..., Box], root: Path):
    box = make_box("--readonly-dir", ".git", "--git-guard")
    (root / "late").mkdir()
    (root / "late" / ".git").write_text("gitdir: /elsewhere\n")
    assert shell(box, "true")["meta"]["remount_needed"] == ["late/.git"]


def test_read_only_mount_points_come_from_mountinfo(tmp_path: Path):
    info = tmp_path / "mountinfo"
    info.write_bytes(
        b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"30 22 8:1 /p/.git /workspace/.git ro,relatime - ext4 /dev/sda1 rw\n"
        b"31 22 8:1 /p/a\\040b/.git /workspace/a\\040b/.git ro,nosuid - ext4 /dev/sda1 rw\n"
        b"32 22 8:1 /p/c/.git /workspace/c/.git rw,relatime - ext4 /dev/sda1 rw\n"
        b"33 22 0:5 / /workspace2/.git ro - tmpfs tmpfs ro\n")
    found = toolbox._readonly_mounts("/workspace", str(info))
    assert found == {"/workspace/.git", "/workspace/a b/.git"}


def test_a_new_repository_is_disabled_even_in_a_read_only_directory(box: Box, root: Path):
    reply = shell(box, "mkdir -p sub && git init -q sub && chmod 555 sub")
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "sub/.git" and record["renamed_to"].startswith("sub/.git.quarantined-")
    assert not (root / "sub" / ".git").exists()
    moved = root / record["renamed_to"]
    assert moved.is_dir() and not (moved / "HEAD").exists()  # not a repository under any name
    assert stat.S_IMODE((root / "sub").stat().st_mode) == 0o555


def test_a_directory_made_to_look_like_a_repository_loses_its_head(box: Box, root: Path):
    reply = shell(box, "mkdir -p fake/objects fake/refs && echo 'ref: refs/heads/main' > "
                       "fake/HEAD && printf '[core]\\n\\tfsmonitor = id\\n' > fake/config")
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "fake" and record["kind"] == "gitdir"
    assert not (root / "fake" / "HEAD").exists() and "looks like" not in reply["output"]
    assert "made to look like a git repository" in reply["output"]
    done = subprocess.run(["git", "-C", str(root / "fake"), "rev-parse", "--git-dir"],
                          capture_output=True, text=True, env={**os.environ,
                          "GIT_CEILING_DIRECTORIES": str(root)}, check=False)
    assert done.returncode != 0  # git does not take it for a repository any more


# The shapes git itself takes for a repository (setup.c, is_git_directory): a HEAD symlink
# into refs/, objects/ and refs/ as links (access() follows them), a commondir pointing both
# elsewhere. The outside review's variants A and B, and the commondir one.
LOOK_ALIKES = {
    "head-symlink": "mkdir -p fake/objects fake/refs/heads && ln -s refs/heads/main fake/HEAD",
    "linked-parts": "mkdir -p fake/.o fake/.r/heads && ln -s .o fake/objects && "
                    "ln -s .r fake/refs && echo 'ref: refs/heads/main' > fake/HEAD",
    "commondir": "mkdir -p fake/common/objects fake/common/refs/heads && echo common > "
                 "fake/commondir && echo 'ref: refs/heads/main' > fake/HEAD",
}


def _git_takes_it(root: Path, folder: str) -> bool:
    done = subprocess.run(["git", "-C", str(root / folder), "rev-parse", "--git-dir"],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(root)})
    return done.returncode == 0 and done.stdout.strip() in (".", str(root / folder))


@pytest.mark.parametrize("shape", sorted(LOOK_ALIKES))
def test_every_shape_git_takes_for_a_repository_loses_its_head(box: Box, root: Path,
                                                               shape: str):
    script = LOOK_ALIKES[shape] + " && printf '[core]\\n\\tfsmonitor = id\\n' > fake/config"
    reply = shell(box, script)
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "fake"
    assert not os.path.lexists(root / "fake" / "HEAD")
    assert not _git_takes_it(root, "fake")
    os.rename(root / record["renamed_to"], root / "fake" / "HEAD")  # the oracle: put it back
    assert _git_takes_it(root, "fake"), f"git does not take the {shape} shape: a weak test"


def test_a_look_alike_completed_by_a_later_command_loses_its_head(box: Box, root: Path):
    shell(box, "mkdir fake && echo 'ref: refs/heads/main' > fake/HEAD && "
               "printf '[core]\\n\\tfsmonitor = id\\n' > fake/config")
    reply = shell(box, "mkdir -p fake/.o fake/.r && ln -s .o fake/objects && ln -s .r fake/refs")
    assert reply["meta"]["git_quarantined"][0]["path"] == "fake"
    assert not _git_takes_it(root, "fake")


def test_write_tools_cannot_link_a_look_alike_together(box: Box, root: Path):
    shell(box, "mkdir -p docs/.o docs/.r && ln -s .o docs/objects && ln -s .r docs/refs")
    last = box.call("write_file", path="docs/HEAD", content="ref: refs/heads/main\n")
    assert last["ok"] and last["meta"]["git_quarantined"][0]["path"] == "docs"
    assert not _git_takes_it(root, "docs")


def test_a_differently_cased_git_is_read_only_for_the_write_tools(box: Box, root: Path):
    failed(box.call("write_file", path="sub/.GIT/config", content="x"), "read-only")
    failed(box.call("write_file", path=".Git/hooks/pre-commit", content="x"), "read-only")


def test_write_tools_cannot_assemble_a_repository_look_alike(box: Box, root: Path):
    for path, content in [("docs/HEAD", "ref: refs/heads/main\n"),
                          ("docs/config", "[core]\n\tworktree = .\n\tfsmonitor = id\n"),
                          ("docs/objects/info/.keep", "")]:
        assert box.call("write_file", path=path, content=content)["ok"]
    last = box.call("write_file", path="docs/refs/heads/.keep", content="")
    assert last["ok"] and last["meta"]["git_quarantined"][0]["path"] == "docs"
    assert "made to look like a git repository" in last["output"]
    assert not (root / "docs" / "HEAD").exists()

