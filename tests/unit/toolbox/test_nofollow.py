"""toolbox/nofollow.py: reaching below a directory without following a link (host and toolbox)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from executor.toolbox.nofollow import open_beneath, open_dir, open_parent, read_plain


def test_the_shared_no_follow_helpers_refuse_links_and_fifos(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    fd = open_beneath(tmp_path, ["real"])
    os.close(fd)
    with pytest.raises(OSError):
        open_beneath(tmp_path, ["link"])
    (tmp_path / "real" / "f").write_bytes(b"data")
    os.mkfifo(tmp_path / "fifo")
    assert read_plain(tmp_path / "real" / "f") == b"data"
    assert read_plain(tmp_path / "link" / "f") == b"data"  # only the last name is no-follow
    (tmp_path / "flink").symlink_to("real/f")
    assert read_plain(tmp_path / "flink") is None
    assert read_plain(tmp_path / "fifo") is None  # never blocks
    assert read_plain(tmp_path / "real" / "f", most=3) is None
    assert read_plain(tmp_path / "real" / "f", owner=os.geteuid() + 1) is None


def test_a_descriptor_root_is_kept_by_its_caller(tmp_path: Path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = open_beneath(root, ["a", "b"], os.O_RDONLY)
        assert os.listdir(fd) == []
        os.close(fd)
        os.fstat(root)  # still open
        parent, leaf = open_parent(tmp_path, "a/b")
        assert leaf == "b" and os.lstat(leaf, dir_fd=parent).st_ino == (tmp_path / "a" / "b").stat().st_ino
        os.close(parent)
    finally:
        os.close(root)


def test_a_directory_of_ours_is_opened_only_when_it_is_no_link(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    fd = open_dir(tmp_path / "real")
    try:
        os.mkfifo("f", dir_fd=fd)  # a descriptor the *at calls work beneath
        assert (tmp_path / "real" / "f").exists()
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        open_dir(tmp_path / "link")
    with pytest.raises(OSError):
        open_dir(tmp_path / "real" / "f")  # a FIFO is no directory
