"""The toolbox: Set-id bits a command adds are removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import Box, by_path, shell, stat_mode


def test_setid_bits_a_command_adds_are_removed(box: Box, root: Path):
    (root / "old-suid").write_text("x")
    (root / "old-suid").chmod(0o4755)  # in the tree before the session: left alone
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)  # set-gid directories only pass on their group
    reply = shell(box, "printf '#!/bin/sh\\n' > tool && chmod 4755 tool && : > g && "
                       "chmod 2711 g && chmod g+s old-suid && mkdir shared/sub")
    assert stat_mode(root / "tool") == 0o755 and stat_mode(root / "g") == 0o711
    assert stat_mode(root / "old-suid") == 0o4755
    assert stat_mode(root / "shared" / "sub") & 0o2000
    assert reply["meta"]["setid_cleared"] == [
        {"path": "g", "removed": ["set-gid"], "mode_before": "2711", "mode_after": "0711"},
        {"path": "old-suid", "removed": ["set-gid"], "mode_before": "6755",
         "mode_after": "4755"},
        {"path": "tool", "removed": ["set-uid"], "mode_before": "4755", "mode_after": "0755"},
    ]
    assert "removed set-uid bit from ./tool: set-id files are not allowed in the project" \
        in reply["output"]
    assert "removed set-gid bit from ./g: set-id files" in reply["output"]
    assert by_path(reply)["tool"]["mode_after"] == "4755"  # what the command did
    assert "outside_changes" not in shell(box, "true")["meta"]  # our chmod is in the index


def test_setid_chmod_never_follows_a_swapped_in_link(root: Path, tmp_path: Path):
    outside = tmp_path / "outside-suid"
    outside.write_text("x")
    outside.chmod(0o4755)
    (root / "d").mkdir()
    (root / "d" / "tool").write_text("x")
    ino = (root / "d" / "tool").stat().st_ino
    shutil.rmtree(root / "d")
    (root / "d").symlink_to(tmp_path)
    (tmp_path / "tool").symlink_to(outside)
    with pytest.raises(OSError):
        toolbox._chmod_nofollow(str(root), "d/tool", ino, 0o755)
    assert stat_mode(outside) == 0o4755

