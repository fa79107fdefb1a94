"""The git surface (executor/gitsafety/surface.py): decided once, each protected path
with its mechanism, its backups real rooms, and part of the sandbox spec."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from executor.gitsafety.guard import GitGuard
from executor.gitsafety.surface import MECHANISMS, GitSurface, Guard, decide
from executor.gitsafety.walk import scan
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.hardening import container_options
from executor.sandbox.spec import SandboxSpec

REPO = Path(__file__).resolve().parents[2]


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with a hooks path that does not exist yet and a nested repository."""
    root = tmp_path / "proj"
    root.mkdir()
    git("init", "-q", ".", cwd=root)
    git("config", "core.hooksPath", "tools/hooks", cwd=root)
    (root / "vendor").mkdir()
    git("init", "-q", "vendor/lib", cwd=root)
    return root


def sandbox(root: Path, **config: object) -> DockerSandbox:
    settings = SandboxConfig(root=root, session_id="s1", lock_dir=root.parent / "locks",
                             fifo_channel=False, **config)  # type: ignore[arg-type]
    return DockerSandbox(settings)


def test_each_protected_path_names_its_reason_and_mechanism(project: Path):
    surface = decide(project, "bind", scan(project), global_configs=[])
    by_path = {g.path: g for g in surface.guards}
    assert by_path[".git"].mechanism == "read-only mount"
    assert by_path["vendor/lib/.git"].mechanism == "read-only mount"
    assert by_path["tools/hooks"].mechanism == "empty read-only mount"
    assert "core.hooksPath" in by_path["tools/hooks"].why
    assert all(g.why and g.mechanism in MECHANISMS for g in surface.guards)
    assert surface.protected.existing == (".git", "vendor/lib/.git")
    assert surface.protected.missing == ("tools/hooks",)


@pytest.mark.parametrize(("mode", "allowed", "mechanisms", "argv"), [
    ("bind", True, set(), []),
    ("copy", False, {"toolbox refuses writes"}, ["--readonly-dir", ".git"]),
    ("copy", True, set(), []),
    ("read-only", False, {"read-only root"}, ["--readonly-dir", ".git", "--git-guard"]),
])
def test_every_mode_says_what_guards_it(project: Path, mode: str, allowed: bool,
                                        mechanisms: set[str], argv: list[str]):
    surface = decide(project, mode, scan(project), writes_allowed=allowed)  # type: ignore[arg-type]
    assert {g.mechanism for g in surface.guards} == mechanisms
    assert surface.protected.existing == surface.protected.missing == ()  # no extra mounts
    assert surface.toolbox_argv() == argv


def test_the_backups_are_named_rooms_of_the_house(project: Path):
    bind = decide(project, "bind", scan(project), global_configs=[])
    assert [b.name for b in bind.backups] == ["toolbox guard", "after-session check"]
    assert [b.name for b in decide(project, "copy").backups] == ["apply refusal"]
    for backup in bind.backups + decide(project, "copy").backups:
        assert (REPO / backup.room).is_file(), backup.room
        assert backup.does


def test_the_surface_is_decided_once_and_everything_comes_from_it(project: Path):
    """Mounts, the toolbox's flags and the spec come from the value the walk decided; a
    repository made after it changes none of them until the surface is decided again."""
    box = sandbox(project)
    before = box.blueprint.spec()
    assert json.loads(before.fields["git"])["guards"] == []  # not walked yet: nothing decided
    box.git.protect()
    decided = box.blueprint.spec()
    mounts = {m["Target"] for m in box.blueprint.options()["mounts"]}
    assert "/workspace/.git" in mounts and "/workspace/vendor/lib/.git" in mounts
    git("init", "-q", "late", cwd=project)
    assert box.blueprint.spec().digest == decided.digest != before.digest
    assert "/workspace/late/.git" not in {m["Target"] for m in box.blueprint.options()["mounts"]}
    box.git.protect()  # a remount decides again
    assert box.blueprint.spec().digest != decided.digest
    assert "git protection (what is kept from the sandbox, why, and how)" in \
        box.blueprint.spec().differences(decided.labels())


def test_a_remount_keeps_what_the_start_saw(project: Path):
    guard = GitGuard(project, workspace="bind", read_only=False, allow_git_writes=False)
    guard.protect()
    start = guard.baseline
    assert start is not None and ".git" in start.identities
    git("init", "-q", "late", cwd=project)
    guard.protect()
    assert guard.baseline is not None
    assert "late/.git" not in guard.baseline.tree.git_entries  # still new to the end check
    assert "late/.git" in guard.protected.existing
    assert guard.baseline.identities[".git"] == start.identities[".git"]


def test_the_spec_digest_changes_with_the_surface_alone(tmp_path: Path):
    settings = SandboxConfig(root=tmp_path, session_id="s1")
    options = container_options(settings, tmp_path / "l.lock", "1000:1000")
    argv = ["--kill-strays"]
    one = GitSurface("bind", guards=(Guard(".git", "a git directory", "read-only mount"),))
    two = GitSurface("bind", guards=(Guard(".git", "a git directory", "empty read-only mount"),))
    specs = [SandboxSpec.of(options, argv, "sha256:aa", git=s.spec()) for s in (one, two)]
    assert specs[0].digest != specs[1].digest
    assert specs[1].differences(specs[0].labels()) == [
        "git protection (what is kept from the sandbox, why, and how)"]
    same = SandboxSpec.of(options, argv, "sha256:aa", git=one.spec())
    assert same.digest == specs[0].digest


def test_a_copy_is_re_attached_only_with_the_same_surface(tmp_path: Path):
    copy = sandbox(tmp_path, workspace="copy").blueprint.spec()
    allowed = sandbox(tmp_path, workspace="copy", allow_git_writes=True).blueprint.spec()
    assert "git protection (what is kept from the sandbox, why, and how)" in \
        allowed.differences(copy.labels())
    assert sandbox(tmp_path, workspace="copy").blueprint.spec().digest == copy.digest
