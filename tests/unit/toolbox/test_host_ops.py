"""The toolbox's host operations (manifest, read_files, snapshot): what a copy workspace and
bind-mode undo read from the sandbox. The model is never offered them; the host validates
everything they return, and they never follow a link."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

from tests.unit.toolbox.boxes import Box, failed, sha


def entries(box: Box) -> dict[str, list[object]]:
    reply = box.call("manifest")
    assert reply["ok"] and reply["meta"]["complete"] is True, reply
    return {row[0]: row[1:] for row in reply["meta"]["entries"]}


def test_manifest_lists_kinds_modes_hashes_and_link_targets(box: Box, root: Path):
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "src" / "link").symlink_to("../README.md")
    os.mkfifo(root / "pipe")
    found = entries(box)
    app = (root / "src/app.py").read_bytes()
    assert found["src/app.py"] == ["file", 0o644, len(app), sha(app), None]
    assert found["run.sh"][:2] == ["file", 0o755]
    assert found["src"] == ["dir", 0o755, 0, None, None]
    assert found["src/link"] == ["symlink", 0o777, 0, None, "../README.md"]
    assert found["pipe"][0] == "other"  # the host refuses it; the toolbox only reports it


def test_manifest_leaves_out_repositories_and_hidden_names(box: Box, root: Path):
    (root / "sub" / ".git").mkdir(parents=True)
    (root / "sub" / ".git" / "HEAD").write_text("ref\n")
    (root / "sub" / ".git.quarantined-1234abcd").mkdir()
    found = entries(box)
    assert not any(".git" in path.split("/")[-1] or path.startswith(".sandbox-agent")
                   for path in found)
    skipped = box.call("manifest")["meta"]["skipped"]
    assert [".git", "git repository"] in skipped and ["sub/.git", "git repository"] in skipped


def test_manifest_after_a_command_reuses_the_index(box: Box, root: Path):
    assert box.call("run_shell_command", command="echo new > made.txt")["ok"]
    assert entries(box)["made.txt"][3] == sha(b"new\n")


def test_a_manifest_since_the_baseline_reads_only_what_changed_mtimes_aside(box: Box,
                                                                           root: Path):
    (root / "same.txt").write_text("kept\n")
    (root / "moved.txt").write_text("abcd\n")
    (root / "gone.txt").write_text("bye\n")
    assert box.call("baseline")["meta"]["kept"] is True
    app = root / "src/app.py"
    st = app.stat()
    with app.open("r+b") as f:  # same size, same inode, mtime put back: only ctime tells
        f.write(b"#")
    os.utime(app, ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / "gone.txt").unlink()
    (root / "moved.txt").rename(root / "README.md")  # over a copied name
    (root / "new.txt").write_text("new\n")
    meta = box.call("manifest", since_baseline=True)["meta"]
    listed = {row[0]: row[1:] for row in meta["entries"]}
    assert sorted(meta["same"]) == ["same.txt", "src"]
    assert set(listed) == {"README.md", "new.txt", "src/app.py"}
    assert app.stat().st_mtime_ns == st.st_mtime_ns
    assert listed["src/app.py"][3] == sha(app.read_bytes())
    assert listed["README.md"][3] == sha(b"abcd\n")
    assert "same" not in box.call("manifest")["meta"]  # not asked: every file is read


def test_without_a_baseline_a_manifest_lists_everything(box: Box, root: Path):
    meta = box.call("manifest", since_baseline=True)["meta"]
    assert "same" not in meta and entries(box) == {row[0]: row[1:] for row in meta["entries"]}


def test_read_files_returns_chunks_and_never_follows_links(box: Box, root: Path):
    (root / "data.bin").write_bytes(bytes(range(256)) * 10)
    (root / "link").symlink_to("README.md")
    (root / "via").symlink_to("src")
    reply = box.call("read_files", files=[["data.bin", 10, 20], ["link", 0, 10],
                                          ["via/app.py", 0, 10], ["../secret.txt", 0, 10],
                                          ["/etc/passwd", 0, 10], [".sandbox-agent/x", 0, 1],
                                          ["src", 0, 10], "bad"])
    files = reply["meta"]["files"]
    assert base64.b64decode(files[0]["data"]) == (bytes(range(256)) * 10)[10:30]
    assert files[0]["size"] == 2560
    assert all("error" in item and "data" not in item for item in files[1:]), files


def test_snapshot_is_what_a_write_would_overwrite(box: Box, root: Path):
    (root / "alias.py").symlink_to("src/app.py")
    reply = box.call("snapshot", path="alias.py", max_bytes=1000)
    meta = reply["meta"]
    assert meta["resolved"] == "src/app.py" and meta["exists"] and meta["kind"] == "file"
    assert base64.b64decode(meta["data"]) == (root / "src/app.py").read_bytes()
    assert meta["sha256"] == sha((root / "src/app.py").read_bytes())
    big = box.call("snapshot", path="src/app.py", max_bytes=4)["meta"]
    assert big["data"] is None and big["sha256"] == meta["sha256"]
    absent = box.call("snapshot", path="new/file.txt", max_bytes=10)["meta"]
    assert (absent["resolved"], absent["exists"]) == ("new/file.txt", False)


def test_snapshot_refuses_what_writes_refuse(box: Box):
    failed(box.call("snapshot", path=".git/config", max_bytes=10), "read-only")
    failed(box.call("snapshot", path="../secret.txt", max_bytes=10), "outside the project root")


def test_host_operations_are_not_listed_as_tools(make_box: Callable[..., Box]):
    reply = make_box().call("no_such_tool")
    assert "manifest" not in reply["output"] and "snapshot" not in reply["output"]
