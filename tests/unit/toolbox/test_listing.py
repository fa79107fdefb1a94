"""The toolbox: list_files."""

from __future__ import annotations

from pathlib import Path

from tests.unit.toolbox.boxes import Box, failed


def test_list_is_sorted_and_skips_git_and_state(box: Box, root: Path):
    (root / "src" / "pkg").mkdir()
    (root / "src" / "pkg" / "m.py").write_text("")
    (root / ".env").write_text("")
    (root / "a.txt").write_text("")
    reply = box.call("list_files")
    assert reply["output"].splitlines() == [".env", "README.md", "a.txt", "src/", "src/app.py",
                                            "src/pkg/", "src/pkg/m.py"]
    assert reply["meta"]["entries"] == 7 and reply["meta"]["truncated"] is False


def test_list_depth_glob_and_subpaths(box: Box, root: Path):
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "deep.py").write_text("")
    shallow = box.call("list_files", depth=1)
    assert shallow["output"].splitlines()[:3] == ["README.md", "a/", "src/"]
    assert "not expanded" in shallow["output"]
    default = box.call("list_files")["output"]
    assert "a/b/c/" in default and "deep.py" not in default and "depth=3" in default
    assert box.call("list_files", glob="*.py")["output"] == "a/b/c/deep.py\nsrc/app.py"
    assert box.call("list_files", path="src")["output"] == "src/app.py"
    assert box.call("list_files", path="src/app.py")["output"] == "src/app.py"
    assert box.call("list_files", glob="*.rs")["output"] == "no entries match '*.rs' in ."
    (root / "void").mkdir()
    assert box.call("list_files", path="void")["output"] == "(empty directory)"
    failed(box.call("list_files", path="nope"), "file not found: nope")


def test_list_is_capped(box: Box, root: Path):
    (root / "many").mkdir()
    for i in range(1100):
        (root / "many" / f"f{i:04}").write_text("")
    reply = box.call("list_files")
    assert reply["meta"]["truncated"] is True and reply["meta"]["entries"] == 1000
    assert "stopped at 1000 entries" in reply["output"]
    assert reply["output"].splitlines()[0] == "README.md"

