"""The after-session check changes nothing through a link: another session's container may
still be writing the tree while it runs (red-team round 17)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from executor.gitsafety.aftercheck import clear_setid, sweep
from executor.gitsafety.walk import scan


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_set_id_bits_are_cleared_on_the_entry_itself(tmp_path: Path):
    (tmp_path / "d").mkdir()
    os.chmod(tmp_path / "d", 0o2775)
    (tmp_path / "d" / "f").write_text("x")
    os.chmod(tmp_path / "d" / "f", 0o4755)
    assert clear_setid(tmp_path, "d") and clear_setid(tmp_path, "d/f")
    assert (_mode(tmp_path / "d"), _mode(tmp_path / "d" / "f")) == (0o775, 0o755)
    assert not clear_setid(tmp_path, "d/f")  # nothing left to clear


def test_a_name_swapped_for_a_link_changes_nothing_outside(tmp_path: Path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "etc").mkdir()
    secret = outside / "etc" / "target"
    secret.write_text("host")
    os.chmod(secret, 0o4600)
    (root / "x").symlink_to(outside)  # was a directory when the walk listed x/etc/target
    (root / "leaf").symlink_to(secret)  # was a set-id file when the walk saw it
    with pytest.raises(OSError):
        clear_setid(root, "x/etc/target")
    assert not clear_setid(root, "leaf")
    assert _mode(secret) == 0o4600


def test_the_sweep_still_clears_what_a_session_set(tmp_path: Path):
    before = scan(tmp_path)
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "tool", 0o6755)
    done = sweep(tmp_path, before, 0)
    assert done.setid_cleared == ["tool"] and _mode(tmp_path / "tool") == 0o755
