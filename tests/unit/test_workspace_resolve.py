"""Where a link leads once changes are in: followed component by component, `..` applied to
where the walk has got to (never to the text), links in the changes and in the tree alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.workspace.manifest import Entry
from executor.workspace.resolve import after_state, host_state, leaves_root, resolve


def link(target: str) -> Entry:
    return Entry("symlink", target=target)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("a\n")
    return root


@pytest.mark.parametrize(("planned", "path", "target", "leaves"), [
    ({}, "notes", "docs/a.md", False),
    ({}, "notes", "/etc/passwd", True),
    ({}, "docs/n", "../../x", True),
    ({}, "docs/n", "../docs/./a.md", False),
    ({"docs/root": link("..")}, "notes", "docs/root/../x", True),  # the red team's
    ({"docs/root": link("..")}, "notes", "docs/root/docs/a.md", False),
    ({"up": link("docs/up2"), "docs/up2": link("../..")}, "n", "up/x", True),
    ({"a": link("b"), "b": link("a")}, "n", "a/x", True),  # a loop: cannot be followed
    ({"deep": link("docs/../..")}, "n", "deep", True),
])
def test_links_are_judged_by_where_they_lead(root: Path, planned: dict[str, Entry], path: str,
                                             target: str, leaves: bool):
    assert leaves_root(root, path, target, after_state(root, planned)) is leaves


def test_links_already_in_the_tree_are_followed(root: Path):
    (root / "up").symlink_to("..")
    assert leaves_root(root, "notes", "up/secret", host_state(root))
    assert not leaves_root(root, "notes", "up/proj/docs/a.md", after_state(root, {"up": None}))


def test_a_walk_from_outside_follows_the_host_and_names_its_steps(root: Path, tmp_path: Path):
    (tmp_path / "home").symlink_to(root)
    walk = resolve(root, [], str(tmp_path / "home" / "cfg" / "app"),
                   after_state(root, {"cfg": link("docs")}))
    assert walk.inside(root) == "docs/app"
    assert walk.steps == ["cfg", "docs", "docs/app"]
