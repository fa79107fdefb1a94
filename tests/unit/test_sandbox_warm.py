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


NONCE = b"0123456789abcdef" * 2


def standby_program(ttl: int = 0) -> subprocess.Popen[bytes]:
    """The standby's PID 1 program, armed with `NONCE` and `ttl`."""
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", boot.standby_toolbox()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(init.STANDBY_ARM + NONCE + b"%08d" % ttl)
    proc.stdin.flush()
    assert proc.stdout.readline() == init.STANDBY_ARMED
    return proc


def ask(proc: subprocess.Popen[bytes], nonce: bytes = NONCE) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(init.STANDBY_ASK + nonce)
    proc.stdin.flush()
    return proc.stdout.readline()


def test_the_standby_pid_1_refuses_once_a_process_was_made_beside_it():
    proc = standby_program()
    try:
        waiting(proc.pid)
        subprocess.run(["true"], check=True)  # a pid taken after it began
        assert ask(proc) == init.STANDBY_USED
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_the_standby_pid_1_refuses_a_wrong_nonce_and_answers_once():
    proc = standby_program()
    try:
        waiting(proc.pid)
        assert ask(proc, b"f" * init.NONCE_SIZE) == init.STANDBY_USED
        assert proc.wait(timeout=10) == 0  # and nobody may ask again
    finally:
        proc.kill()
        proc.wait()


def test_a_left_standby_pid_1_ends_at_its_ttl():
    proc = standby_program(ttl=1)
    try:
        assert proc.wait(timeout=10) == 0  # nobody asked within its TTL
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


# -- a standby's record for the next process (warm.leave / warm.left) ------------------------


class FakeContainer:
    id = "c" * 64
    name = "sandbox-agent-abc"
    labels: dict[str, str] = {warm.LABEL_STANDBY: "maker"}
    status = "running"


class FakeClient:
    """Hands out `FakeContainer` by its id; attaching gives a placeholder stream."""

    def __init__(self) -> None:
        self.containers = self
        self.api = self

    def get(self, container_id: str) -> FakeContainer:
        assert container_id == FakeContainer.id
        return FakeContainer()

    def attach_socket(self, container_id: str, params: Any) -> object:
        return object()


def left_standby(tmp_path: Path, ttl: int = 60) -> tuple[Path, Path]:
    """A standby left for `root` (a lock dir beside it), as `warm.leave` writes it."""
    root, lock_dir = tmp_path / "proj", tmp_path / "locks"
    root.mkdir(parents=True)
    lock_dir.mkdir(mode=0o700)
    (lock_dir / "sandbox-agent-abc.lock").touch(mode=0o600)
    standby = warm.Standby("sandbox-agent-abc", FakeContainer(), None, None, None, "digest",
                           warm.identities(root, ["."]), [], None, None, NONCE, ttl,
                           time.time(), "maker", "s1", str(root))
    warm.leave(standby, lock_dir, read_only=True)
    return root, lock_dir


def test_a_left_standby_is_claimed_once_and_waits_meanwhile(tmp_path: Path):
    root, lock_dir = left_standby(tmp_path)
    (record,) = (lock_dir / warm.LEFT).iterdir()
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert warm.waiting(FakeContainer(), lock_dir)  # `gc` leaves it alone
    assert warm.waiting_named(lock_dir, "sandbox-agent-abc")  # and so does the next start
    assert warm.left(lock_dir, root, read_only=False, client=FakeClient()) is None  # rw: not it
    found = warm.left(lock_dir, root, read_only=True, client=FakeClient())
    assert found is not None and found.nonce == NONCE and found.maker == "maker"
    assert found.identities == warm.identities(root, ["."])
    assert warm.left(lock_dir, root, read_only=True, client=FakeClient()) is None  # once
    assert not warm.waiting(FakeContainer(), lock_dir)
    assert not warm.waiting_named(lock_dir, "sandbox-agent-abc")
    assert found.lock_fd is not None
    os.close(found.lock_fd)


def test_a_left_standby_whose_lock_is_held_is_not_claimed(tmp_path: Path):
    import fcntl

    root, lock_dir = left_standby(tmp_path)
    held = os.open(lock_dir / "sandbox-agent-abc.lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert warm.left(lock_dir, root, read_only=True, client=FakeClient()) is None
    finally:
        os.close(held)


def test_a_left_standby_record_swapped_for_a_link_or_expired_is_refused(tmp_path: Path):
    root, lock_dir = left_standby(tmp_path)
    (record,) = (lock_dir / warm.LEFT).iterdir()
    aside = tmp_path / "aside.json"
    record.rename(aside)
    record.symlink_to(aside)  # its bytes are ours, but reached through a link
    assert warm.left(lock_dir, root, read_only=True, client=FakeClient()) is None
    assert not record.exists() and not record.is_symlink()  # claimed away all the same

    root2, lock_dir2 = left_standby(tmp_path / "two", ttl=1)  # within the claim's margin
    assert warm.left(lock_dir2, root2, read_only=True, client=FakeClient()) is None


def test_a_left_standby_record_of_another_root_or_with_bad_values_is_refused(tmp_path: Path):
    import json

    root, lock_dir = left_standby(tmp_path)
    (record,) = (lock_dir / warm.LEFT).iterdir()
    good = json.loads(record.read_text())
    for bad in ({"root": "/elsewhere"}, {"made": ["../outside"]}, {"nonce": "short"},
                {"name": "not-ours"}, {"container": "x"}, {"ttl": 10**9}):
        record.write_text(json.dumps({**good, **bad}))
        assert warm.left(lock_dir, root, read_only=True, client=FakeClient()) is None, bad


def test_a_left_standby_dir_open_to_others_is_not_read(tmp_path: Path):
    root, lock_dir = left_standby(tmp_path)
    (lock_dir / warm.LEFT).chmod(0o777)
    assert warm.left(lock_dir, root, read_only=True, client=FakeClient()) is None
