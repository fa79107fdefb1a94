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
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "sandbox-agent-s1.run.json").symlink_to(elsewhere / "sandbox-agent-s1.run.json")
    os.mkfifo(locks / "sandbox-agent-s2.run.json")
    (locks / "sandbox-agent-s3.run.json").write_text("{not json")
    good = (elsewhere / "sandbox-agent-s1.run.json").read_text()
    (locks / "sandbox-agent-s4.run.json").write_text(good.replace('"sandbox-agent-s1"',
                                                                  '"../../etc"'))
    record(name="sandbox-agent-s5").save(elsewhere)
    os.replace(elsewhere / "sandbox-agent-s5.run.json", locks / "sandbox-agent-s6.run.json")
    assert runrecord.abandoned(locks) == []
