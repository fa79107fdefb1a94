"""The toolbox fixtures: a project root, and toolbox processes on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.unit.toolbox.boxes import HAS_RG, SECRET, Box


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small project with a secret file next to it (not inside)."""
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "README.md").write_text("# demo\n")
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    (project / ".sandbox-agent").mkdir()
    (project / ".sandbox-agent" / "audit.ndjson").write_text('{"seq": 0}\n')
    return project


@pytest.fixture
def make_box(root: Path) -> Iterator[Callable[..., Box]]:
    """Start toolboxes on `root` with extra argv; all are closed at the end."""
    boxes: list[Box] = []

    def make(*args: str, env: dict[str, str] | None = None, fsize: int | None = None) -> Box:
        boxes.append(Box(root, *args, env=env, fsize=fsize))
        return boxes[-1]

    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def box(make_box: Callable[..., Box]) -> Box:
    """A toolbox on `root` with the host's usual argv."""
    return make_box("--readonly-dir", ".git")


@pytest.fixture(params=["rg", "python"])
def engine_box(request: pytest.FixtureRequest, make_box: Callable[..., Box]) -> Box:
    """A toolbox searching with ripgrep, or with the forced Python fallback."""
    if request.param == "rg" and not HAS_RG:
        pytest.skip("ripgrep is not installed")
    return make_box() if request.param == "rg" else make_box("--no-rg")


@pytest.fixture(scope="module")
def shared_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """One toolbox for the property test (hypothesis reuses function fixtures)."""
    base = tmp_path_factory.mktemp("fuzz")
    (base / "secret.txt").write_text(SECRET)
    (base / "project").mkdir()
    (base / "project" / "a.txt").write_text("alpha\nbeta\n")
    box = Box(base / "project")
    yield box
    assert box.close() == 0

