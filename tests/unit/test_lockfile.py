"""Lock files whose names go when they are let go (lockfile.py): never two holders, even when a
name is unlinked between a locker's open and its flock."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.errors import SandboxError
from executor.sandbox import gc, lockfile, rootlock, runrecord
from executor.sandbox.config import SandboxConfig
from executor.sandbox.deployment import Deployment

REPO = Path(__file__).resolve().parents[2]


def _between_open_and_flock(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]
                            ) -> None:
    """Run `meanwhile` once, right after the next lock file is opened, before its flock: the
    window in which another process can unlink the name and a third make a new one."""
    real = lockfile._open
    pending = [meanwhile]

    def open_then(path: Path | str, *, create: bool) -> int:
        fd = real(path, create=create)
        if pending:
            pending.pop()()
        return fd

    monkeypatch.setattr(lockfile, "_open", open_then)


def _handover(path: Path, holder: int, third: list[int]) -> Callable[[], None]:
    """The holder lets go (its name goes with it) and a third locker takes a new file there."""
    def run() -> None:
        lockfile.release(holder, path)
        third.append(lockfile.acquire(path))
    return run


def test_a_locker_whose_inode_was_unlinked_under_it_does_not_hold_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "sandbox-agent-s1.lock"
    third: list[int] = []
    _between_open_and_flock(monkeypatch, _handover(path, lockfile.acquire(path), third))
    with pytest.raises(BlockingIOError):  # the third holds what the name leads to now
        lockfile.acquire(path)
    assert lockfile.held(path)
    lockfile.release(third[0], path)
    assert not path.exists() and not lockfile.held(path)


def test_the_locker_takes_the_new_file_when_nobody_holds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Unlinked under it and nobody took the name since: it makes the file again and holds it,
    the one the name leads to."""
    path = tmp_path / "sandbox-agent-s1.lock"
    holder = lockfile.acquire(path)
    _between_open_and_flock(monkeypatch, lambda: lockfile.release(holder, path))
    fd = lockfile.acquire(path)
    assert os.fstat(fd).st_ino == os.lstat(path).st_ino
    assert lockfile.held(path)
    lockfile.release(fd, path)


def test_a_probe_that_locked_an_unlinked_inode_asks_the_name_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`gc`'s probe: the old file was free when it took it, but a live session holds the name's
    new one, so the session's container is in use, not an orphan."""
    path = tmp_path / "sandbox-agent-s1.lock"
    third: list[int] = []
    _between_open_and_flock(monkeypatch, _handover(path, lockfile.acquire(path), third))
    assert runrecord.held(str(path))
    lockfile.release(third[0], path)


def test_gc_never_unlinks_a_name_another_session_took_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "sandbox-agent-s1.lock"
    third: list[int] = []
    _between_open_and_flock(monkeypatch, _handover(path, lockfile.acquire(path), third))
    assert lockfile.sweep([path]) == 0
    assert os.fstat(third[0]).st_ino == os.lstat(path).st_ino  # still its lock
    lockfile.release(third[0], path)


_CONTENDER = """
import os, sys, time
from executor.sandbox import lockfile
path, ledger, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
for _ in range(rounds):
    fd = lockfile.acquire(path, tries=10**6, pause=0)
    with open(ledger, "a") as out:
        out.write(f"in {os.getpid()}\\n")
    time.sleep(0.0005)
    with open(ledger, "a") as out:
        out.write(f"out {os.getpid()}\\n")
    lockfile.release(fd, path)
"""


def test_processes_taking_and_removing_one_lock_never_hold_it_at_once(tmp_path: Path):
    """Four processes take the lock, note it, let it go (its name removed), over and over:
    the ledger never shows two inside."""
    path, ledger = tmp_path / "sandbox-agent-s1.lock", tmp_path / "ledger"
    procs = [subprocess.Popen([sys.executable, "-c", _CONTENDER, str(path), str(ledger), "150"],
                              cwd=REPO) for _ in range(4)]
    assert [proc.wait(timeout=120) for proc in procs] == [0] * 4
    lines = ledger.read_text().splitlines()
    assert len(lines) == 4 * 150 * 2
    for entered, left in zip(lines[::2], lines[1::2], strict=True):
        assert (entered.split()[0], left.split()[0]) == ("in", "out")
        assert entered.split()[1] == left.split()[1]
    assert not path.exists()


def test_a_free_lock_file_and_none_are_the_same(tmp_path: Path):
    path = tmp_path / "sandbox-agent-s1.lock"
    assert not lockfile.held(path)
    fd = lockfile.acquire(path)
    assert lockfile.held(path) and runrecord.held(str(path))
    lockfile.release(fd, path)
    assert not path.exists() and not lockfile.held(path)


def test_what_is_not_a_lock_file_of_ours_is_never_taken_or_removed(tmp_path: Path):
    os.mkfifo(tmp_path / "sandbox-agent-f.lock")
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "sandbox-agent-l.lock").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "sandbox-agent-d.lock").mkdir()
    for name in ("f", "l", "d"):
        path = tmp_path / f"sandbox-agent-{name}.lock"
        assert lockfile.held(path)  # and no hang on the FIFO
        with pytest.raises(OSError):
            lockfile.acquire(path)
        assert lockfile.sweep([path]) == 0
        assert path.is_symlink() or path.exists()


def _aged(path: Path, seconds: float = gc.SWEPT_AFTER + 60) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


def test_gc_sweeps_old_free_locks_and_nothing_else(tmp_path: Path):
    for name in ("sandbox-agent-old.lock", f"root-{'a' * 32}.lock", "sandbox-agent-held.lock",
                 "sandbox-agent-young.lock", "notes.lock", "sandbox-agent-old.run.json"):
        (tmp_path / name).write_text("")
        os.chmod(tmp_path / name, 0o600)
        if name != "sandbox-agent-young.lock":
            _aged(tmp_path / name)
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "sandbox-agent-link.lock").symlink_to(tmp_path / "elsewhere")
    _aged(tmp_path / "sandbox-agent-link.lock")
    fd = os.open(tmp_path / "sandbox-agent-held.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert gc.sweep_locks(tmp_path) == 2
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere", "notes.lock", "sandbox-agent-held.lock", "sandbox-agent-link.lock",
        "sandbox-agent-old.run.json", "sandbox-agent-young.lock"]


def test_a_sessions_lock_goes_when_its_session_lets_go(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    config = SandboxConfig(root=root, session_id="s1", lock_dir=tmp_path / "locks")
    place = Deployment(config, warn=lambda _: None)
    place.lock()
    assert place.lock_path.exists() and runrecord.held(str(place.lock_path))
    other = Deployment(config, warn=lambda _: None)
    with pytest.raises(SandboxError, match="in use by another process"):
        other.lock()
    place.unlock()
    assert not place.lock_path.exists()
    other.lock()  # a resume takes it again: a new file
    assert runrecord.held(str(place.lock_path))
    other.unlock()
    assert list((tmp_path / "locks").glob("*.lock")) == []


def test_a_roots_lock_goes_with_its_last_holder(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    key = rootlock.hold(tmp_path, root, "sess-a")
    again = rootlock.hold(tmp_path, root, "sess-a-child")
    path = str(rootlock.lock_path(tmp_path, root))
    rootlock.release(again)
    assert Path(path).exists() and lockfile.held(path)
    rootlock.release(key)
    assert not Path(path).exists()
