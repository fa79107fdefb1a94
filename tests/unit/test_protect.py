"""What git on the host would run from a tree, found before a container starts, and the checks
after a session (executor/sandbox/protect.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from executor.sandbox.protect import (
    Sweep,
    check_replaced,
    disable_git,
    identities,
    protected_paths,
    scan,
    sweep,
)


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
