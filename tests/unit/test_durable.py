"""The fsync policy (executor/durable.py): when session and audit lines reach the disk."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from executor import durable
from executor.config import Settings
from executor.durable import Syncer
from executor.messages import Message
from executor.session import NdjsonSessionStore


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, int]]]:
    """Every fsync as (thread name, (dev, inode) of the file), then the real fsync."""
    seen: list[tuple[str, tuple[int, int]]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        st = os.fstat(fd)
        seen.append((threading.current_thread().name, (st.st_dev, st.st_ino)))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _write(path: Path, syncer: Syncer, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        syncer.sync(fd)
    finally:
        os.close(fd)


def test_always_fsyncs_before_the_write_returns(tmp_path: Path, fsyncs: list) -> None:
    path = tmp_path / "f"
    _write(path, Syncer("always"), b"a\n")
    assert fsyncs == [(threading.current_thread().name, _inode(path))]


def test_background_fsyncs_on_its_thread_once_per_file_for_a_burst(
        tmp_path: Path, fsyncs: list) -> None:
    syncer = Syncer("background", delay=0.2)
    one, two = tmp_path / "one", tmp_path / "two"
    for _ in range(5):
        _write(one, syncer, b"x\n")
    _write(two, syncer, b"y\n")
    assert fsyncs == []  # nothing waited for the disk
    assert syncer.flush(timeout=10) == []
    assert sorted(fsyncs) == sorted([("fsync", _inode(one)), ("fsync", _inode(two))])
    assert one.read_bytes() == b"x\n" * 5


def test_a_write_after_the_fsync_began_gets_one_of_its_own(tmp_path: Path, fsyncs: list) -> None:
    syncer = Syncer("background", delay=0)
    path = tmp_path / "f"
    _write(path, syncer, b"1\n")
    syncer.flush(timeout=10)
    _write(path, syncer, b"2\n")
    syncer.flush(timeout=10)
    assert [inode for _, inode in fsyncs] == [_inode(path)] * 2


def test_background_sync_does_not_hold_the_writers_flock(tmp_path: Path) -> None:
    """The file is fsynced through a descriptor of its own: the caller's lock ends at close."""
    syncer = Syncer("background", delay=5)
    path = tmp_path / "locked"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"x\n")
    syncer.sync(fd)
    os.close(fd)
    other = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
    finally:
        os.close(other)
    syncer.flush(timeout=10)


def test_flush_reports_a_failed_fsync_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    syncer = Syncer("background", delay=0)
    monkeypatch.setattr(os, "fsync", failing)
    _write(tmp_path / "f", syncer, b"x\n")
    errors = syncer.flush(timeout=10)
    assert [e.errno for e in errors] == [5]
    assert syncer.flush(timeout=10) == []


def test_session_appends_go_through_the_policy(tmp_path: Path, fsyncs: list,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "proj"
    root.mkdir()
    store = NdjsonSessionStore.create(root)
    monkeypatch.setattr(durable, "SYNCER", Syncer("always"))
    fsyncs.clear()
    store.append(Message.user("hi"))
    assert [inode for _, inode in fsyncs] == [_inode(store.path)]
    assert store.load()[-1].content == "hi"


def test_the_setting_takes_the_two_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().fsync == "background"
    monkeypatch.setenv("SANDBOX_AGENT_FSYNC", "always")
    assert Settings().fsync == "always"
    monkeypatch.setenv("SANDBOX_AGENT_FSYNC", "never")
    with pytest.raises(ValueError):
        Settings()
