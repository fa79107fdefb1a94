"""The start-of-session walk follows no link, however deep the tree, and what the engine then
mounts is what it walked (red-team round 17's lead: a directory swapped for a link while it ran
listed a host directory as the project's, and one swapped before the engine mounted it would
have put a host directory into the container)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.gitsafety import walk
from executor.gitsafety.walk import listings, scan
from executor.sandbox.config import SandboxConfig
from executor.sandbox.deployment import Deployment
from executor.sandbox.docker import DockerSandbox


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_entered(tmp_path: Path):
    root, host = tmp_path / "root", tmp_path / "host"
    (root / "a").mkdir(parents=True)
    (host / ".git" / "hooks").mkdir(parents=True)
    seen = []
    for rel_dir, listing in listings(root):
        seen += [walk.joined(rel_dir, entry.name) for entry in listing]
        if rel_dir == "":  # `a` listed as a directory; a link by the time the walk goes in
            os.rename(root / "a", root / "a.old")
            (root / "a").symlink_to(host)
    assert seen == ["a"]


def test_every_repository_of_a_tree_deeper_than_the_kept_descriptors_is_found(tmp_path: Path):
    """Past `_KEEP_OPEN` levels a level gives its descriptor back and is opened again (no link
    followed) when the walk comes back to it: no level is skipped, no descriptor is left."""
    deep = tmp_path.joinpath(*["d"] * (walk._KEEP_OPEN + 6))
    for branch in ("p/q/r", "s"):
        (deep / branch / ".git").mkdir(parents=True)
    (tmp_path / "top" / ".git").mkdir(parents=True)
    below = str(deep.relative_to(tmp_path))
    before = _open_fds()
    most = 0
    found: list[str] = []
    for _rel, _ in listings(tmp_path):
        most = max(most, _open_fds() - before)
    found = sorted(scan(tmp_path).git_entries)
    assert found == sorted(["top/.git", f"{below}/p/q/r/.git", f"{below}/s/.git"])
    assert most <= walk._KEEP_OPEN + 2 and _open_fds() == before


def test_a_deep_level_that_became_a_link_before_the_walk_came_back_is_left(tmp_path: Path):
    deep = tmp_path.joinpath(*["d"] * (walk._KEEP_OPEN + 3))
    (deep / "one").mkdir(parents=True)
    (deep / "two").mkdir()
    host = tmp_path.parent / f"{tmp_path.name}-host"
    (host / "one" / ".git").mkdir(parents=True)
    (host / "two" / ".git").mkdir(parents=True)
    seen = []
    for rel, _ in listings(tmp_path):
        seen.append(rel)
        if rel.endswith(("/one", "/two")) and not (tmp_path / "moved").exists():
            os.rename(deep, tmp_path / "moved")  # the walk is below it: it comes back to a link
            deep.symlink_to(host)
    # the root, every level, one of the two (the other is the link's now), nothing of host's
    assert len(seen) == 1 + walk._KEEP_OPEN + 3 + 1
    assert seen[-1].rpartition("/")[2] in ("one", "two") and not any(".git" in r for r in seen)


class _Racing(Deployment):
    """An engine that makes the container while `swap` turns a directory into a link (the
    engine resolves links in a mount's source)."""

    def __init__(self, config: SandboxConfig, swap: Callable[[], None]) -> None:
        super().__init__(config, client=SimpleNamespace(api="api"), warn=lambda m: None)
        self.swap = swap

    def create(self, options: dict[str, Any]) -> Any:
        self.swap()
        self.container = SimpleNamespace(id="c1")
        return self.container


@pytest.mark.parametrize("swapped", [False, True])
def test_a_link_swapped_in_before_the_engine_mounts_ends_the_start(tmp_path: Path,
                                                                   swapped: bool):
    root, host = tmp_path / "proj", tmp_path / "host"
    (root / "sub" / ".git" / "hooks").mkdir(parents=True)
    (host / ".git" / "hooks").mkdir(parents=True)

    def swap() -> None:
        if swapped:
            os.rename(root / "sub", root / "sub.old")
            (root / "sub").symlink_to(host)

    config = SandboxConfig(root=root, session_id="s", lock_dir=tmp_path / "locks")
    box = DockerSandbox(config)
    box._assemble(_Racing(config, swap), box.runtime)
    box.git.protect()
    assert "sub/.git" in box.git.protected.existing
    if not swapped:
        box.blueprint.create()
        return
    with pytest.raises(SandboxError, match=r"protected paths changed while the sandbox was "
                                           r"made \(sub/\.git\)"):
        box.blueprint.create()
