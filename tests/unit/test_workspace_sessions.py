"""A copy session's base: kept before the first tool runs, written while the copy arrives."""

from __future__ import annotations

import time
from pathlib import Path

from executor.workspace.changes import load_base
from executor.workspace.manifest import Manifest
from executor.workspace.sessions import CopyWorkspace
from executor.workspace.store import session_dir
from tests.fakes.sandbox import FakeSandbox


class Arriving(FakeSandbox):
    """A copy read in full at once, arriving later; its .git part adds a note on the way."""

    def __init__(self, root: Path, *, early: bool) -> None:
        super().__init__(files={"app.py": b"v1\n", "src/lib.py": b"x = 1\n"})
        self.root, self.early = root, early
        self.notes = ["skipped pipe: fifo"]
        self.base_kept_while_arriving: bool | None = None

    def copy_sent(self) -> Manifest | None:
        return self.copied if self.early else None

    def copy_manifest(self) -> Manifest | None:
        """Arrives when the base is on disk, or after a second (so it was not written)."""
        base, deadline = session_dir(self.root, "s1") / "base.json", time.monotonic() + 1
        while not base.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.base_kept_while_arriving = base.exists()
        self.notes.append("skipped .git/index: Permission denied")
        return self.copied

    @property
    def copy_notes(self) -> list[str]:
        return self.notes


def _first_call(root: Path, backend: Arriving) -> None:
    with CopyWorkspace(backend, root=root, session="s1") as workspace:
        assert workspace.call("read_file", {"path": "app.py"}).ok
    assert backend.tools_called[:2] == ["baseline", "read_file"]


def test_the_base_is_written_while_the_copy_arrives_then_with_its_late_notes(tmp_path: Path):
    backend = Arriving(tmp_path, early=True)
    _first_call(tmp_path, backend)
    assert backend.base_kept_while_arriving is True
    base = load_base(session_dir(tmp_path, "s1"))
    assert base is not None and set(base.manifest) == {"app.py", "src", "src/lib.py"}
    assert base.notes == ["skipped pipe: fifo", "skipped .git/index: Permission denied"]


def test_without_an_early_manifest_the_base_is_written_once_the_copy_is_in(tmp_path: Path):
    backend = Arriving(tmp_path, early=False)
    _first_call(tmp_path, backend)
    assert backend.base_kept_while_arriving is False
    base = load_base(session_dir(tmp_path, "s1"))
    assert base is not None and base.notes[-1] == "skipped .git/index: Permission denied"
