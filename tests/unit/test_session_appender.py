"""A session file held open between appends: same lines, same repairs, never through a link."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from executor import durable
from executor.errors import SessionError
from executor.messages import Message
from executor.session import NdjsonSessionStore, read_session


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NdjsonSessionStore:
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "proj"
    root.mkdir()
    return NdjsonSessionStore.create(root, name="s")


def test_a_torn_line_left_by_someone_else_is_cut_before_the_next_append(
        store: NdjsonSessionStore) -> None:
    store.append(Message.user("one"))
    with open(store.path, "ab") as other:  # a writer killed half-way through its line
        other.write(b'{"type": "message", "ro')
    store.append(Message.user("two"))
    contents = read_session(store.path)
    assert [m.content for m in contents.messages] == ["one", "two"]
    assert [e.event for e in contents.entries if e.event] == ["torn_line_dropped"]


def test_lines_another_writer_appended_are_kept_and_followed(store: NdjsonSessionStore) -> None:
    store.append(Message.user("one"))
    NdjsonSessionStore.open(store.root, "s").append(Message.user("other"))
    store.append(Message.user("two"))
    assert [m.content for m in store.load()] == ["one", "other", "two"]


def test_a_file_replaced_by_a_link_is_never_written_through(store: NdjsonSessionStore,
                                                            tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("original\n")
    store.append(Message.user("one"))
    store.path.rename(tmp_path / "moved.ndjson")
    store.path.symlink_to(target)
    with pytest.raises(SessionError):
        store.append(Message.user("two"))
    assert target.read_text() == "original\n"
    lines = (tmp_path / "moved.ndjson").read_bytes().splitlines()
    assert json.loads(lines[-1])["content"] == "one"


def test_close_lets_go_of_the_file(store: NdjsonSessionStore) -> None:
    store.append(Message.user("one"))
    durable.SYNCER.flush()  # its own descriptor of the file lives until the fsync
    held = [fd for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == str(store.path.resolve())]
    store.close()
    after = [fd for fd in os.listdir("/proc/self/fd")
             if os.path.realpath(f"/proc/self/fd/{fd}") == str(store.path.resolve())]
    assert len(held) == 1 and held[0] not in after
    store.append(Message.user("two"))  # opened again
    assert [m.content for m in store.load()] == ["one", "two"]


def test_threads_appending_at_once_keep_every_line_whole(store: NdjsonSessionStore) -> None:
    def write(name: str) -> None:
        for n in range(100):
            store.append(Message.user(f"{name}{n}"))

    threads = [threading.Thread(target=write, args=(name,)) for name in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = [m.content for m in store.load()]
    assert sorted(got) == sorted(f"{name}{n}" for name in "abc" for n in range(100))
