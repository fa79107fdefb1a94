"""The toolbox: FIFOs a command leaves in the project are removed (red-team round 23: a FIFO
at `.gitignore` or `.mailmap` made git on the host block for ever, during and after)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.unit.toolbox.boxes import Box, shell


def test_fifos_a_command_leaves_are_removed(box: Box, root: Path):
    os.mkfifo(root / "theirs")  # in the tree before the session: the person's, left alone
    reply = shell(box, "mkdir -p d && mkfifo .gitignore d/.gitignore .mailmap && "
                       "t=$(mktemp -u) && mkfifo $t && ln -s $t link && echo made")
    for name in (".gitignore", "d/.gitignore", ".mailmap"):
        assert not os.path.lexists(root / name), name
    assert stat.S_ISFIFO(os.lstat(root / "theirs").st_mode)
    assert os.path.islink(root / "link")  # a link is not a FIFO: never followed
    assert sorted(reply["meta"]["fifos_removed"]) == [".gitignore", ".mailmap", "d/.gitignore"]
    assert "removed the FIFO ./.gitignore: git and editors on the host block" in reply["output"]
    assert "outside_changes" not in shell(box, "true")["meta"]  # our unlink is in the index


def test_a_fifo_a_command_uses_within_itself_is_fine(box: Box, root: Path):
    reply = shell(box, "mkfifo p && (echo through > p &) && cat p && rm p")
    assert "through" in reply["output"] and "fifos_removed" not in reply["meta"]
