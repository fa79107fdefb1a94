"""Writing into the person's tree: never through a link, atomic per file, plain modes."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from executor.workspace import hostfs
from executor.workspace.manifest import Entry


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("v1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "target.txt").write_text("keep me\n")
    return root


def test_state_reads_kind_mode_hash_and_target(tree: Path):
    (tree / "run.sh").write_text("x\n")
    (tree / "run.sh").chmod(0o4755)
    (tree / "link").symlink_to("src/app.py")
    assert hostfs.state(tree, "src/app.py") == Entry(
        "file", 0o644, 3, hashlib.sha256(b"v1\n").hexdigest())
    assert hostfs.state(tree, "run.sh").mode == 0o755  # type: ignore[union-attr]
    assert hostfs.state(tree, "link") == Entry("symlink", 0o777, target="src/app.py")
    assert hostfs.state(tree, "src") == Entry("dir", 0o755)
    assert hostfs.state(tree, "missing/file") is None


def test_a_link_on_the_way_is_refused_for_reading_and_writing(tree: Path, tmp_path: Path):
    (tree / "via").symlink_to(tmp_path / "outside")
    with pytest.raises(hostfs.Unsafe):
        hostfs.state(tree, "via/target.txt")
    with pytest.raises(OSError) as caught:
        hostfs.write_file(tree, "via/target.txt", b"pwned\n", 0o644)
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError):
        hostfs.remove(tree, "via/target.txt", "file")
    assert (tmp_path / "outside" / "target.txt").read_text() == "keep me\n"
    assert hostfs.read_file(tree, "via/target.txt", 100) is None


def test_writing_replaces_a_link_instead_of_following_it(tree: Path, tmp_path: Path):
    (tree / "config").symlink_to(tmp_path / "outside" / "target.txt")
    hostfs.write_file(tree, "config", b"new\n", 0o4755)
    assert not (tree / "config").is_symlink() and (tree / "config").read_bytes() == b"new\n"
    assert (tree / "config").stat().st_mode & 0o7777 == 0o755  # never a set-id bit
    assert (tmp_path / "outside" / "target.txt").read_text() == "keep me\n"


def test_writes_are_atomic_and_leave_no_temporary_file(tree: Path):
    hostfs.write_file(tree, "src/app.py", b"v2\n", 0o644)
    hostfs.write_link(tree, "src/alias", "app.py")
    hostfs.make_dir(tree, "src/new")
    assert sorted(os.listdir(tree / "src")) == ["alias", "app.py", "new"]
    assert (tree / "src" / "app.py").read_text() == "v2\n"
    with pytest.raises(IsADirectoryError):
        hostfs.write_file(tree, "src/new", b"x", 0o644)
    assert sorted(os.listdir(tree / "src")) == ["alias", "app.py", "new"]


def test_a_fifo_is_refused_without_blocking(tree: Path):
    os.mkfifo(tree / "pipe")
    with pytest.raises(hostfs.Unsafe):
        hostfs.state(tree, "pipe")
    assert hostfs.read_file(tree, "pipe", 10) is None


@pytest.mark.parametrize(("current", "wanted", "written"), [
    (None, 0o644, 0o644), (None, 0o755, 0o755),   # a new file: its normal mode
    (0o600, 0o644, 0o600), (0o600, 0o755, 0o700),  # private stays private
    (0o640, 0o755, 0o750), (0o755, 0o644, 0o644), (0o4755, 0o755, 0o755),
    (0o200, 0o755, 0o300), (0o666, 0o644, 0o666),
])
def test_a_file_written_over_another_keeps_its_permission_bits(tree: Path, current: int | None,
                                                               wanted: int, written: int):
    if current is not None:
        (tree / "f").write_text("old\n")
        (tree / "f").chmod(current)
    hostfs.write_file(tree, "f", b"new\n", wanted)
    assert (tree / "f").stat().st_mode & 0o7777 == written
