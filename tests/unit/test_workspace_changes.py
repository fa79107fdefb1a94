"""Collecting a copy's changes: every value the sandbox sends back is checked first."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from executor.errors import WorkspaceError
from executor.messages import ToolResult
from executor.workspace.changes import Base, collect, load_changes, save_changes
from executor.workspace.manifest import Entry
from executor.workspace.store import BlobStore, ensure_session_dir
from tests.fakes.sandbox import FakeSandbox


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def listing(rows: list[list[Any]], complete: bool = True) -> ToolResult:
    return ToolResult(ok=True, output="", meta={"entries": rows, "complete": complete})


def serving(files: dict[str, bytes]) -> Any:
    def answer(args: dict[str, Any]) -> ToolResult:
        found = []
        for path, offset, length in args["files"]:
            data = files[path][offset:offset + length]
            found.append({"path": path, "offset": offset, "data": base64.b64encode(data).decode()})
        return ToolResult(ok=True, output="", meta={"files": found})
    return answer


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "app.py").write_bytes(b"v1\n")
    return root


BASE = Base({"app.py": Entry("file", 0o644, 3, sha(b"v1\n"))}, "t0")


def run(root: Path, rows: list[list[Any]], files: dict[str, bytes]) -> Any:
    box = FakeSandbox({"manifest": listing(rows), "read_files": serving(files)})
    box.start()
    return collect(box.call, root, "s1", BASE, BlobStore.for_root(root))


def test_changes_come_back_with_their_content_and_the_base_content(root: Path):
    rows = [["app.py", "file", 0o644, 3, sha(b"v2\n"), None],
            ["run.sh", "file", 0o4755, 5, sha(b"echo\n"), None]]
    changeset = run(root, rows, {"app.py": b"v2\n", "run.sh": b"echo\n"})
    changes = changeset.by_path()
    assert changes["app.py"].before == BASE.manifest["app.py"]
    assert changes["app.py"].after == Entry("file", 0o644, 3, sha(b"v2\n"))
    assert (changes["app.py"].added, changes["app.py"].removed) == (1, 1)
    assert changes["run.sh"].after is not None and changes["run.sh"].after.mode == 0o755
    assert "gains the executable bit" in changes["run.sh"].flags
    blobs = BlobStore.for_root(root)
    assert blobs.get(sha(b"v2\n")) == b"v2\n" and blobs.get(sha(b"v1\n")) == b"v1\n"
    save_changes(ensure_session_dir(root, "s1"), changeset)
    assert load_changes(root, "s1").by_path().keys() == changes.keys()  # type: ignore[union-attr]


@pytest.mark.parametrize(("row", "why"), [
    (["/etc/cron.d/x", "file", 0o644, 1, "0" * 64, None], "absolute"),
    (["../x", "file", 0o644, 1, "0" * 64, None], "plain relative"),
    ([".git/hooks/pre-commit", "file", 0o755, 1, "0" * 64, None], "git"),
    (["sub/.GIT/config", "file", 0o644, 1, "0" * 64, None], "git"),
    (["a\0b", "file", 0o644, 1, "0" * 64, None], "NUL"),
    (["fifo", "other", 0o644, 0, None, None], "not a regular file"),
    (["x", "file", "0644", 1, "0" * 64, None], "invalid mode"),
    (["x", "file", 0o644, 1, "not-a-hash", None], "sha256"),
    (["x", "device", 0o644, 1, None, None], "kind"),
    (["x", "symlink", 0o777, 0, None, "a\0b"], "target"),
    (["big", "file", 0o644, 65 << 20, "0" * 64, None], "larger than"),
    (["short"], "malformed"),
])
def test_hostile_entries_are_refused_with_a_reason(root: Path, row: list[Any], why: str):
    changeset = run(root, [["app.py", "file", 0o644, 3, sha(b"v1\n"), None], row], {})
    assert changeset.changes == []
    [refused] = changeset.refused
    assert why in refused["reason"], refused


def test_content_that_does_not_match_its_hash_is_refused(root: Path):
    rows = [["app.py", "file", 0o644, 3, sha(b"v2\n"), None]]
    changeset = run(root, rows, {"app.py": b"EVIL"})
    assert changeset.changes == [] and "did not arrive" in changeset.refused[0]["reason"]
    assert not BlobStore.for_root(root).has(sha(b"EVIL"))


def test_deletions_links_and_new_directories(root: Path):
    rows = [["docs", "dir", 0o755, 0, None, None],
            ["docs/x", "symlink", 0o777, 0, None, "/etc/passwd"]]
    changeset = run(root, rows, {})
    changes = changeset.by_path()
    assert changes["app.py"].status == "D" and changes["docs"].status == "A"
    assert changes["docs/x"].flags == ["link leaving the project (-> /etc/passwd)"]


def test_an_incomplete_listing_is_an_error_not_a_list_of_deletions(root: Path):
    box = FakeSandbox({"manifest": listing([], complete=False)})
    box.start()
    with pytest.raises(WorkspaceError, match="cannot be told apart"):
        collect(box.call, root, "s1", BASE, BlobStore.for_root(root))


def test_a_row_listing_the_base_entry_is_that_entry_and_any_other_is_checked(root: Path):
    weird = Base({**BASE.manifest, ".git/config": Entry("file", 0o644, 3, sha(b"v1\n")),
                  "big": Entry("file", 0o644, 65 << 20, "0" * 64)}, "t0")
    rows = [["app.py", "file", 0o644, 3, sha(b"v1\n"), None],  # as in the base: unchanged
            [".git/config", "file", 0o644, 3, sha(b"v1\n"), None],  # in the base, still refused
            ["big", "file", 0o644, 65 << 20, "0" * 64, None],  # in the base, still too big
            ["new", "file", "0644", 3, sha(b"v1\n"), None]]
    box = FakeSandbox({"manifest": listing(rows), "read_files": serving({})})
    box.start()
    changeset = collect(box.call, root, "s1", weird, BlobStore.for_root(root))
    reasons = {r["path"]: r["reason"] for r in changeset.refused}
    assert "git" in reasons[".git/config"] and "larger than" in reasons["big"]
    assert reasons["new"] == "invalid mode"
    assert "app.py" not in reasons and changeset.changes == []


def test_entries_named_unchanged_since_the_copy_are_what_was_copied(root: Path):
    copied = {**BASE.manifest, "put.txt": Entry("file", 0o644, 4, sha(b"new\n"))}
    answers: list[dict[str, Any]] = []

    def manifest(args: dict[str, Any]) -> ToolResult:
        answers.append(args)
        return ToolResult(ok=True, output="", meta={
            "entries": [["run.sh", "file", 0o755, 5, sha(b"echo\n"), None]],
            "same": ["app.py", "put.txt"], "complete": True})

    box = FakeSandbox({"manifest": manifest,
                       "read_files": serving({"run.sh": b"echo\n", "put.txt": b"new\n"})})
    box.start()
    changeset = collect(box.call, root, "s1", BASE, BlobStore.for_root(root), copied)
    assert answers == [{"since_baseline": True}]
    changes = changeset.by_path()
    assert set(changes) == {"put.txt", "run.sh"}  # put back into the copy: still a change
    assert changes["put.txt"].after == copied["put.txt"] and changes["put.txt"].before is None
    assert [tool for tool, _ in box.calls].count("read_files") == 1


def test_a_name_called_unchanged_that_was_never_copied_makes_it_list_everything(root: Path):
    asked: list[dict[str, Any]] = []

    def manifest(args: dict[str, Any]) -> ToolResult:
        asked.append(args)
        if args.get("since_baseline"):
            return ToolResult(ok=True, output="", meta={
                "entries": [], "same": ["app.py", "stray.txt"], "complete": True})
        return listing([["app.py", "file", 0o644, 3, sha(b"v1\n"), None],
                        ["stray.txt", "file", 0o644, 2, sha(b"s\n"), None]])

    box = FakeSandbox({"manifest": manifest, "read_files": serving({"stray.txt": b"s\n"})})
    box.start()
    changeset = collect(box.call, root, "s1", BASE, BlobStore.for_root(root), BASE.manifest)
    assert asked == [{"since_baseline": True}, {}]
    assert [(c.path, c.status) for c in changeset.changes] == [("stray.txt", "A")]
