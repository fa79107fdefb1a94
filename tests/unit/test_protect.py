"""What git on the host would run from a tree, found before a container starts, and the checks
after a session (executor/gitsafety/: hostgit.py, walk.py, aftercheck.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from executor.errors import ConfigError
from executor.gitsafety.aftercheck import Sweep, check_replaced, disable_git, identities, sweep
from executor.gitsafety.hostgit import protected_paths
from executor.gitsafety.walk import scan


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def protect(root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = protected_paths(root, scan(root), global_configs=[])
    return found.existing, found.missing


def test_every_kind_of_repository_and_hook_path_is_found(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    git("init", "-q", ".", cwd=root)
    (root / "node_modules" / "x" / "y").mkdir(parents=True)
    git("init", "-q", "node_modules/x/y", cwd=root)
    git("init", "-q", "--separate-git-dir", str(root / "meta"), str(root / "app"), cwd=root)
    (root / "store").mkdir()
    git("init", "-q", "--bare", "store/real.git", cwd=root)
    (root / "lib").mkdir()
    (root / "lib" / ".git").symlink_to("../store/real.git")
    (root / ".husky" / "_").mkdir(parents=True)
    git("config", "core.hooksPath", ".husky/_", cwd=root)
    git("config", "include.path", "../team.gitconfig", cwd=root)
    existing, missing = protect(root)
    assert set(existing) == {".git", "node_modules/x/y/.git", "app/.git", "meta",
                             "store/real.git", ".husky"}
    (root / "fixtures").mkdir()
    git("init", "-q", "--bare", "fixtures/remote.git", cwd=root)  # found as a bare repository
    assert "fixtures/remote.git" in protect(root)[0]
    assert missing == ("team.gitconfig",)


def test_a_monorepo_above_the_root_is_read_for_hook_paths(tmp_path: Path) -> None:
    mono = tmp_path / "mono"
    root = mono / "services" / "api"
    root.mkdir(parents=True)
    git("init", "-q", ".", cwd=mono)
    git("config", "core.hooksPath", "services/api/hooks", cwd=mono)
    assert protect(root) == ((), ("hooks",))


def test_repositories_made_in_the_sandbox_are_disabled_without_following_links(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "sub" / ".git").mkdir(parents=True)
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    (root / "link").symlink_to(other)
    done = Sweep()
    disable_git(root, ["sub/.git", "link/.git", "../other/.git", "/etc/.git", "sub/x"], done)
    assert done.disabled == ["sub/.git"]
    assert not (root / "sub" / ".git").exists()
    [moved] = [p.name for p in (root / "sub").iterdir()]
    assert moved.startswith(".git.quarantined-")
    assert (other / ".git").is_dir()  # never reached through the link


def test_a_protected_path_replaced_during_the_session_is_moved_aside(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "tools" / "hooks").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "config" / "team.cfg").write_text("[user]\n")
    before = identities(root, ("tools/hooks", "config/team.cfg"))
    os.rename(root / "tools", root / "tools.old")
    (root / "tools" / "hooks").mkdir(parents=True)
    done = Sweep()
    check_replaced(root, before, done)
    assert list(done.replaced) == ["tools/hooks"]
    assert done.replaced["tools/hooks"].startswith("tools/hooks.replaced-")
    assert not (root / "tools" / "hooks").exists() and (root / done.replaced["tools/hooks"]).is_dir()


def _plant_look_alikes(root: Path) -> None:
    """Every shape git takes for a repository, none of them the plain one."""
    (root / "a" / "objects").mkdir(parents=True)
    (root / "a" / "refs" / "heads").mkdir(parents=True)
    (root / "a" / "HEAD").symlink_to("refs/heads/main")
    for name in ("b", "c"):
        (root / name / ".o").mkdir(parents=True)
        (root / name / ".r" / "heads").mkdir(parents=True)
    (root / "b" / "objects").symlink_to(".o")
    (root / "b" / "refs").symlink_to(".r")
    (root / "b" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "c" / "commondir").write_text("..\n")
    (root / "c" / "HEAD").write_text("ref: refs/heads/main\n")


def _git_takes(root: Path, rel: str) -> bool:
    done = subprocess.run(["git", "-C", str(root / rel), "rev-parse", "--git-dir"],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(root)})
    return done.returncode == 0


def test_look_alikes_of_every_shape_are_found_before_and_disabled_after(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    before = scan(root)
    _plant_look_alikes(root)
    assert [rel for rel in "ab" if _git_takes(root, rel)] == ["a", "b"]  # the oracle agrees
    assert scan(root).git_dirs == ("a", "b", "c")  # shipped: each is mounted read-only
    done = sweep(root, before, 0)  # made during the session: each loses its HEAD
    assert sorted(done.disabled) == ["a", "b", "c"]
    assert not any(os.path.lexists(root / rel / "HEAD") for rel in "abc")
    assert not any(_git_takes(root, rel) for rel in "abc")


def test_look_alikes_that_were_there_before_the_session_are_left_to_the_person(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    _plant_look_alikes(root)
    assert sweep(root, scan(root), 0).disabled == []


# ---------------------------------------------------------------------------- git's config, as git reads it


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    git("init", "-q", ".", cwd=root)
    return root


def _git_names(root: Path, key: str) -> str:
    """What git itself makes of `key` in the repository (the oracle)."""
    return subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True,
                          check=True, text=True,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1",
                               "GIT_CONFIG_GLOBAL": "/dev/null"}).stdout.rstrip("\n")


def test_an_include_git_reads_is_protected_however_it_is_spelled(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    shipped = (b"\xef\xbb\xbf[include]\n\tpath = a.gitconfig\n"  # a byte-order mark
               b'[include "path\x00"]\n\tx = b.gitconfig\n'  # a NUL: git reads include.path
               b"[include]\n\tpath = c.git\\\nconfig\n")  # a continued line
    (root / ".gitconfig").write_bytes(shipped)
    git("config", "include.path", "../.gitconfig", cwd=root)
    (root / "a.gitconfig").write_text("[core]\n\tfsmonitor = x\n")
    assert _git_names(root, "core.fsmonitor") == "x"  # git does read through the BOM
    existing, missing = protect(root)
    assert ".gitconfig" in existing and "a.gitconfig" in existing
    assert {"b.gitconfig", "c.gitconfig"} <= set(missing)


def test_a_hooks_path_is_protected_as_every_git_version_reads_it(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    with (root / ".git" / "config").open("a") as config:
        config.write("[core]\n\thooksPath = .hooks\\tx\n[core]\n\thooksPath = tools/a\tb\n")
    _, missing = protect(root)
    assert {".hooks\tx", "tools/a\tb", "tools/a b"} <= set(missing)  # git < 2.45: a space


def test_an_include_chain_is_followed_as_deep_as_git_goes(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    git("config", "include.path", "../c0", cwd=root)
    for n in range(10):
        (root / f"c{n}").write_text(f"[include]\n\tpath = c{n + 1}\n")
    assert "c10" in protect(root)[1]


def test_a_config_that_cannot_be_read_with_certainty_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    git("config", "include.path", "../shared.gitconfig", cwd=root)
    (root / "shared.gitconfig").write_bytes(b"[include]\n\tpath = \"x\n")  # git stops here
    with pytest.raises(ConfigError, match="cannot be read with certainty"):
        protect(root)
    (root / "shared.gitconfig").unlink()
    os.mkfifo(root / "shared.gitconfig")  # never read, never waited on
    with pytest.raises(ConfigError, match="not a regular file"):
        protect(root)


@pytest.mark.parametrize("name", ["hook", "config", "gitfile", "commondir"])
def test_what_git_runs_or_reads_with_a_second_name_is_refused(tmp_path: Path, name: str) -> None:
    """A read-only mount guards a name, not the file: a hook, a config, a `.git` file or a
    linked worktree's `commondir` (red-team round 12) with a hard link elsewhere in the tree
    would change through the other name."""
    root = tmp_path / "proj"
    root.mkdir()
    if name == "gitfile":
        git("init", "-q", f"--separate-git-dir={root / 'store'}", str(root), cwd=tmp_path)
    else:
        git("init", "-q", str(root), cwd=tmp_path)
    if name == "commondir":
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
            "-m", "x", cwd=root)
        git("worktree", "add", "-q", str(root / "wt"), cwd=root)
    target = {"hook": root / ".git" / "hooks" / "pre-commit", "config": root / ".git" / "config",
              "gitfile": root / ".git",
              "commondir": root / ".git" / "worktrees" / "wt" / "commondir"}[name]
    if name == "hook":
        target.write_text("#!/bin/sh\n")
    protect(root)  # one name: fine
    os.link(target, root / "notes.txt")
    with pytest.raises(ConfigError, match="has 2 names \\(hard links\\)"):
        protect(root)


def test_a_link_on_the_way_to_what_git_reads_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "tools").mkdir()
    (root / "conf").symlink_to("tools")  # re-pointed, git would read another file
    git("config", "include.path", "../conf/team.gitconfig", cwd=root)
    with pytest.raises(ConfigError, match="conf in the project is a link git follows"):
        protect(root)


def test_what_git_reads_or_runs_through_a_link_out_of_git_dir_is_protected(
        tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "scripts").mkdir()
    (root / "scripts" / "pre-commit").write_text("#!/bin/sh\n")
    (root / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit")
    os.rename(root / ".git" / "config", root / "scripts" / "repo.config")
    (root / ".git" / "config").symlink_to("../scripts/repo.config")
    git("config", "include.path", "more.gitconfig", cwd=root)
    (root / ".git" / "more.gitconfig").write_text("[core]\n\tfsmonitor = y\n")
    assert _git_names(root, "core.fsmonitor") == "y"  # taken from the link's directory
    existing, missing = protect(root)
    assert {"scripts/pre-commit", "scripts/repo.config"} <= set(existing)
    assert "scripts/more.gitconfig" not in missing  # (the target's directory is not git's)


def test_the_persons_own_config_is_read_through_a_link(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "gitconfig").write_text("[core]\n\thooksPath = githooks\n")
    (tmp_path / ".gitconfig").symlink_to(dotfiles / "gitconfig")
    found = protected_paths(root, scan(root), global_configs=[tmp_path / ".gitconfig"])
    assert found.missing == ("githooks",)


def test_a_hooks_path_marked_optional_is_protected_as_newer_git_reads_it(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    git("config", "core.hooksPath", ":(optional)tools/hooks", cwd=root)  # git 2.50 drops the mark
    assert "tools/hooks" in protect(root)[1]


def test_a_git_directory_too_crowded_to_check_is_refused(tmp_path: Path) -> None:
    """Red-team round 13: a hard-linked `commondir` placed past the first 1,000 entries of
    its worktree's directory was never looked at. A directory git reads from that holds more
    than can be checked is refused."""
    root = tmp_path / "proj"
    git("init", "-q", str(root / "main"), cwd=tmp_path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x",
        cwd=root / "main")
    git("worktree", "add", "-q", str(root / "wt"), cwd=root / "main")
    admin = root / "main" / ".git" / "worktrees" / "wt"
    protect(root)
    for n in range(1001):
        (admin / f"pad.{n}").touch()
    with pytest.raises(ConfigError, match="holds more than 1000 entries"):
        protect(root)


def test_a_git_link_to_a_gitdir_file_protects_that_file(tmp_path: Path) -> None:
    """Red-team round 13: `.git` a link to a file holding `gitdir: …` (git follows it): the file
    was left writable, and rewritten it sent git on the host to a planted repository."""
    root = tmp_path / "proj"
    git("init", "-q", str(root / "repo"), cwd=tmp_path)
    (root / "w").mkdir()
    (root / "w" / "gitfile.txt").write_text("gitdir: ../repo/.git\n")
    (root / "w" / ".git").symlink_to("gitfile.txt")
    existing, _ = protect(root)
    assert "w/gitfile.txt" in existing and "repo/.git" in existing
    os.link(root / "w" / "gitfile.txt", root / "notes.txt")
    with pytest.raises(ConfigError, match="has 2 names"):
        protect(root)


def test_the_persons_own_config_counts_in_a_root_with_no_repository(tmp_path: Path) -> None:
    """Red-team round 26: the global config was read only for the repositories found, so in a
    root holding none (a dotfiles folder) its hooks path and include were writable, and git
    in any repository on the host then ran what the sandbox wrote there."""
    root = tmp_path / "dotfiles"
    (root / "hooks").mkdir(parents=True)
    (root / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (root / "more.gitconfig").write_text("[user]\n\tname = me\n")
    (tmp_path / ".gitconfig").write_text(
        f"[core]\n\thooksPath = {root}/hooks\n[include]\n\tpath = {root}/more.gitconfig\n")
    found = protected_paths(root, scan(root), global_configs=[tmp_path / ".gitconfig"])
    assert {"hooks", "more.gitconfig"} <= set(found.existing)
