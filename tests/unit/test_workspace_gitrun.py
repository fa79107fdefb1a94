"""A copy's `apply` never writes what git on the host runs or reads as config (gitrun.py)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from executor.errors import WorkspaceError
from executor.workspace.apply import apply_changes
from executor.workspace.changes import Change, Changeset
from executor.workspace.gitrun import git_run
from executor.workspace.manifest import Entry
from executor.workspace.store import BlobStore


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def file(data: bytes, mode: int = 0o644) -> Entry:
    return Entry("file", mode, len(data), hashlib.sha256(data).hexdigest())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository with hooks in the tree and a shared config it includes (repro-1)."""
    root = tmp_path / "proj"
    (root / "tools" / "hooks").mkdir(parents=True)
    (root / "tools" / "hooks" / "pre-commit").write_bytes(b"#!/bin/sh\nexit 0\n")
    (root / "tools" / "repo.gitconfig").write_bytes(b"[core]\n\tautocrlf = false\n")
    (root / "notes.txt").write_bytes(b"a\n")
    git("init", "-q", ".", cwd=root)
    git("config", "core.hooksPath", "tools/hooks", cwd=root)
    git("config", "include.path", "../tools/repo.gitconfig", cwd=root)
    git("config", "--add", "include.path", "../tools/local.gitconfig", cwd=root)  # not there
    return root


def changes(root: Path, *items: tuple[str, bytes | None, bytes | Entry | None]) -> Changeset:
    blobs = BlobStore.for_root(root)
    found = []
    for path, old, new in items:
        for data in (old, new):
            if isinstance(data, bytes):
                blobs.put(data)
        after = file(new) if isinstance(new, bytes) else new
        found.append(Change(path, file(old) if old is not None else None, after))
    return Changeset("s1", str(root), found)


PLANTED = b'[core]\n\tfsmonitor = "touch /tmp/x; false"\n'


def test_hooks_and_included_configs_are_refused_and_the_rest_applied(root: Path) -> None:
    changeset = changes(
        root,
        ("tools/repo.gitconfig", b"[core]\n\tautocrlf = false\n", PLANTED),
        ("tools/hooks/pre-commit", b"#!/bin/sh\nexit 0\n", b"#!/bin/sh\ntouch /tmp/x\n"),
        ("tools/hooks/post-checkout", None, b"#!/bin/sh\n"),
        ("tools/local.gitconfig", None, PLANTED),  # included, not there yet
        ("TOOLS/Hooks/pre-push", None, b"#!/bin/sh\n"),  # the same on a case-folding disk
        ("notes.txt", b"a\n", b"b\n"))
    outcome = apply_changes(root, changeset, approved_by="--yes")
    assert [c.path for c in outcome.done] == ["notes.txt"]
    refused = dict(outcome.conflicts)
    assert set(refused) == {"tools/repo.gitconfig", "tools/hooks/pre-commit",
                            "tools/hooks/post-checkout", "tools/local.gitconfig",
                            "TOOLS/Hooks/pre-push"}
    assert refused["tools/repo.gitconfig"].startswith(
        "git on the host runs or reads this: git reads it as config (included by .git/config)")
    assert "inside tools/hooks: git runs the hooks in it (core.hooksPath in .git/config)" in (
        refused["tools/hooks/post-checkout"])
    assert "never applied" in refused["tools/local.gitconfig"]
    assert (root / "tools" / "repo.gitconfig").read_bytes() == b"[core]\n\tautocrlf = false\n"
    assert not (root / "tools" / "local.gitconfig").exists()


def test_a_directory_on_the_way_may_not_become_a_link(root: Path) -> None:
    changeset = changes(root, ("tools", None, Entry("symlink", 0o777, target="elsewhere")),
                        ("docs", None, Entry("dir")))
    refused = git_run(root).refusals(changeset.changes, lambda digest: None)
    assert list(refused) == ["tools"]
    assert "on the way to tools/" in refused["tools"]


def test_what_a_refused_config_change_would_include_is_refused_with_it(root: Path) -> None:
    """The after-state: the new version of an included config names another changed file."""
    changeset = changes(
        root,
        ("tools/repo.gitconfig", b"[core]\n\tautocrlf = false\n",
         b"[include]\n\tpath = ../extra.gitconfig\n[core]\n\thooksPath = more-hooks\n"),
        ("extra.gitconfig", None, b"\xef\xbb\xbf[include]\n\tpath = deeper.gitconfig\n"),
        ("deeper.gitconfig", None, PLANTED),
        ("more-hooks/pre-commit", None, b"#!/bin/sh\n"),
        ("notes.txt", b"a\n", b"b\n"))
    git = git_run(root)
    marked = {c.path: c.flags for c in git.mark(changeset.changes,
                                                BlobStore.for_root(root).get)}
    assert marked["notes.txt"] == []
    for path in ("extra.gitconfig", "deeper.gitconfig", "more-hooks/pre-commit"):
        assert any("if the change to" in f and f.endswith("apply refuses it")
                   for f in marked[path]), (path, marked[path])


def test_a_config_git_cannot_be_read_with_certainty_stops_the_apply(root: Path) -> None:
    (root / "tools" / "repo.gitconfig").write_bytes(b"[core]\n\tautocrlf = \"false\n")
    changeset = changes(root, ("notes.txt", b"a\n", b"b\n"))
    with pytest.raises(WorkspaceError, match="cannot be read with certainty"):
        apply_changes(root, changeset, approved_by="--yes")
    assert (root / "notes.txt").read_bytes() == b"a\n"


def test_hooks_in_a_directory_the_hooks_dir_links_to_are_refused(tmp_path: Path) -> None:
    """`ln -s ../githooks .git/hooks`: git runs what is in githooks/ (fifth outside review)."""
    import shutil

    root = tmp_path / "proj"
    (root / "githooks").mkdir(parents=True)
    (root / "githooks" / "pre-commit").write_bytes(b"#!/bin/sh\nexit 0\n")
    git("init", "-q", ".", cwd=root)
    shutil.rmtree(root / ".git" / "hooks")
    (root / ".git" / "hooks").symlink_to("../githooks")
    changeset = changes(root, ("githooks/pre-commit", b"#!/bin/sh\nexit 0\n",
                               b"#!/bin/sh\ntouch /tmp/x\n"))
    outcome = apply_changes(root, changeset, approved_by="--yes")
    assert outcome.done == []
    assert "git runs the hooks in it" in dict(outcome.conflicts)["githooks/pre-commit"]
    assert (root / "githooks" / "pre-commit").read_bytes() == b"#!/bin/sh\nexit 0\n"
