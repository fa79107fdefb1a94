"""Run records: what a bind session's end-of-session checks need, found only when abandoned."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from executor.gitsafety.walk import TreeScan
from executor.sandbox import runrecord


def record(name: str = "sandbox-agent-s1", root: str = "/p") -> runrecord.RunRecord:
    return runrecord.RunRecord(name=name, root=root, started_ns=5,
                               tree=TreeScan({".git": "dir"}, ("bare",)),
                               identities={".git": (1, 2), ".husky": None}, made_dirs=[".husky"])


def test_a_record_comes_back_as_written_once_its_lock_is_free(tmp_path: Path):
    record().save(tmp_path)
    [back] = runrecord.abandoned(tmp_path, Path("/p"))
    assert back == record()
    assert runrecord.abandoned(tmp_path, Path("/other")) == []
    runrecord.forget(tmp_path, "sandbox-agent-s1")
    assert runrecord.abandoned(tmp_path) == []


def test_a_session_that_holds_its_lock_is_not_abandoned(tmp_path: Path):
    record().save(tmp_path)
    fd = os.open(tmp_path / "sandbox-agent-s1.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert runrecord.abandoned(tmp_path) == []
    finally:
        os.close(fd)
    assert len(runrecord.abandoned(tmp_path)) == 1


def test_links_fifos_odd_names_and_garbage_are_never_taken(tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    record().save(elsewhere)
    record(name="sandbox-agent-s5").save(elsewhere)
    saved = {p.name.split(".", 1)[1]: p for p in (elsewhere / runrecord.RUNS).iterdir()}
    good = saved["sandbox-agent-s1.run.json"].read_text()
    locks = tmp_path / "locks"
    for folder, named in ((locks / runrecord.RUNS, lambda n: runrecord._file_name("/p", n)),
                          (locks, lambda n: f"{n}{runrecord.SUFFIX}")):  # an older version's
        folder.mkdir(parents=True, exist_ok=True)
        (folder / named("sandbox-agent-s1")).symlink_to(saved["sandbox-agent-s1.run.json"])
        os.mkfifo(folder / named("sandbox-agent-s2"))
        (folder / named("sandbox-agent-s3")).write_text("{not json")
        (folder / named("sandbox-agent-s4")).write_text(
            good.replace('"sandbox-agent-s1"', '"../../etc"'))
        (folder / named("sandbox-agent-s6")).write_text(  # a record filed under another name
            saved["sandbox-agent-s5.run.json"].read_text())
    assert runrecord.abandoned(locks) == [] and runrecord.abandoned(locks, Path("/p")) == []


def test_a_start_lists_only_its_roots_records_not_the_lock_dir(tmp_path: Path):
    for i in range(50):  # every session leaves its lock; other roots' records are not read
        (tmp_path / f"sandbox-agent-x{i}.lock").touch()
    record(root="/other").save(tmp_path)
    record(name="sandbox-agent-s2").save(tmp_path)
    assert [r.name for r in runrecord.abandoned(tmp_path, Path("/p"))] == ["sandbox-agent-s2"]
    assert len(runrecord.abandoned(tmp_path)) == 2


def test_the_lock_dir_a_container_label_names_is_taken_only_in_its_own_shape():
    name = "sandbox-agent-s1"
    assert runrecord.lock_dir_named(f"/run/user/1/sandbox-agent-locks/{name}.lock", name) == \
        Path("/run/user/1/sandbox-agent-locks")
    for label in ("", f"locks/{name}.lock", f"/a/../b/{name}.lock", "/a/sandbox-agent-s2.lock",
                  f"/a/{name}.lock/x", f"/a/{name}"):
        assert runrecord.lock_dir_named(label, name) is None, label
    assert runrecord.lock_dir_named("/a/evil name.lock", "evil name") is None
