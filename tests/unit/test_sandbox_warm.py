"""Warm starts without an engine (executor/sandbox/warm.py): the pool hands each standby out
once, a replaced mount source is seen, which sessions may have one, and the standby's PID 1
program refuses once a process was made beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from executor.sandbox import boot, warm
from executor.sandbox.boot import init
from executor.sandbox.config import SandboxConfig


class FakeStandby(warm.Standby):
    """A standby with no container: records what is done to it."""

    def __init__(self, name: str) -> None:
        super().__init__(name, None, None, None, None, "digest")
        self.settled = 0

    def settle(self, warn: Any) -> None:
        self.settled += 1


def test_a_reserved_id_and_its_standby_are_handed_out_once():
    pool = warm.Pool()
    standby = FakeStandby("sandbox-agent-abc")
    pool.put("children", "abc", standby)
    assert pool.reserve("others") is None
    assert pool.reserve("children") == "abc" and pool.reserve("children") is None
    assert pool.take("sandbox-agent-abc") is standby
    assert pool.take("sandbox-agent-abc") is None
    pool.close()
    assert standby.settled == 0  # taken: the session that took it owns it


def test_close_settles_what_no_session_took_and_only_its_key():
    pool = warm.Pool()
    mine, theirs = FakeStandby("sandbox-agent-a1"), FakeStandby("sandbox-agent-b2")
    pool.put("mine", "a1", mine)
    pool.put("theirs", "b2", theirs)
    pool.close("mine")
    assert (mine.settled, theirs.settled) == (1, 0)
    assert pool.reserve("mine") is None and pool.reserve("theirs") == "b2"
    pool.close()
    assert theirs.settled == 1


def test_a_standby_that_could_not_be_made_is_said_and_never_handed_out():
    pool, said = warm.Pool(), []

    class Broken:
        def standby(self) -> warm.Standby | None:
            raise RuntimeError("engine gone")

    pool.prepare("k", "c3", "sandbox-agent-c3", Broken, said.append)
    assert pool.take("sandbox-agent-c3") is None
    assert said and "engine gone" in said[0]


def test_a_replaced_directory_has_another_identity(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    before = warm.identities(tmp_path, [".", ".git", "missing"])
    assert before["missing"] is None and before[".git"] is not None
    held = os.open(tmp_path / ".git", os.O_RDONLY)  # as the standby's mount holds it
    try:
        shutil.rmtree(tmp_path / ".git")
        (tmp_path / ".git").mkdir()
        assert warm.identities(tmp_path, [".", ".git", "missing"]) != before
    finally:
        os.close(held)


def test_a_directory_made_again_on_its_old_inode_is_not_the_same(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    before = warm.identities(tmp_path, [".git"])
    time.sleep(0.01)
    os.utime(tmp_path / ".git")  # what a new directory on a reused inode number differs in
    assert warm.identities(tmp_path, [".git"]) != before


def test_only_a_quick_bind_session_without_a_network_may_have_a_standby(tmp_path: Path):
    config = SandboxConfig(root=tmp_path, session_id="s1")
    assert warm.eligible(config, (), quick=True) == ""
    assert "exec" in warm.eligible(config, (), quick=False)
    assert "mountpoints" in warm.eligible(config, (".git",), quick=True)
    assert "copy" in warm.eligible(config.model_copy(update={"workspace": "copy"}), (),
                                   quick=True)
    assert "network" in warm.eligible(config.model_copy(update={"network": True}), (),
                                      quick=True)


def waiting(pid: int) -> None:
    """Until the program waits on its stdin (it read the last pid before that)."""
    deadline = time.monotonic() + 20
    while "poll" not in Path(f"/proc/{pid}/wchan").read_text():
        assert time.monotonic() < deadline, "the standby program never waited"
        time.sleep(0.01)


def test_the_standby_pid_1_refuses_once_a_process_was_made_beside_it():
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", boot.standby_toolbox()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        waiting(proc.pid)
        subprocess.run(["true"], check=True)  # a pid taken after it began
        proc.stdin.write(init.STANDBY_ASK)
        proc.stdin.flush()
        assert proc.stdout.readline() == init.STANDBY_USED
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_the_standby_pid_1_ends_when_nobody_will_ever_ask():
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", boot.standby_toolbox()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    assert proc.stdout.read() == init.STANDBY_USED  # told nothing: fresh is never said
