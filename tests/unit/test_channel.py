"""The toolbox's FIFO channel (`--channel`): the host's FifoChannel against a real toolbox
process, without a container (the Docker suite runs it through the engine)."""

from __future__ import annotations

import hmac
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.errors import ToolboxError, ToolboxTimeoutError
from executor.sandbox import channel as channel_module
from executor.sandbox.channel import Channel, FifoChannel
from executor.sandbox.fifos import fifo_pair, hold_life, make_life, unlink_fifos
from executor.sandbox.runtime import Toolbox
from tests.unit import toolbox_view as toolbox

KEY = bytes(range(32))


class Started:
    """A toolbox told to use `directory`'s FIFOs; the test holds the host's ends."""

    def __init__(self, root: Path, directory: Path) -> None:
        self.directory = directory
        self.pipes = fifo_pair(directory)
        self.proc = subprocess.Popen(
            [*toolbox.COMMAND, "--root", str(root), "--sign",
             "--channel", str(directory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(KEY.hex().encode() + b"\n")
        self.proc.stdin.flush()
        self.first = self.proc.stdout.readline()

    def said(self) -> bytes:
        """The first line on stdout, its signature checked and taken off."""
        mac, line = self.first.rstrip(b"\n").split(b" ", 1)
        assert mac == hmac.new(KEY, line, "sha256").hexdigest()[:32].encode()
        return line

    def channel(self) -> FifoChannel:
        """The host's side, the FIFOs' names gone (as Toolbox.start does)."""
        assert self.pipes is not None
        unlink_fifos(self.directory)
        ours, self._theirs = socket.socketpair()  # stands in for the engine's stream
        return FifoChannel(*self.pipes, KEY, Channel(ours, KEY))

    def end(self) -> tuple[int, str]:
        """Exit code and stderr, once it is gone."""
        try:
            code = self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code, err


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.txt").write_text("hello\n")
    (tmp_path / "chan").mkdir()
    box = Started(tmp_path / "proj", tmp_path / "chan")
    yield box
    if box.proc.poll() is None:
        box.proc.kill()
        box.end()


def deadline() -> float:
    return time.monotonic() + 30


def test_the_toolbox_moves_to_the_fifos_and_answers_there(started: Started):
    assert started.said() == b'{"channel": "fifo"}'
    channel = started.channel()
    assert not os.listdir(started.directory)  # nothing left to open
    ready = channel.read_json(deadline())
    assert ready["ready"] is True and ready["channel"] == "fifo"
    reply = channel.request({"id": 1, "tool": "read_file", "args": {"path": "a.txt"}},
                            deadline())
    assert reply["id"] == 1 and reply["ok"] and "hello" in reply["output"]
    big = "x" * 300_000  # more than a pipe holds: written as the toolbox reads
    reply = channel.request({"id": 2, "tool": "write_file",
                             "args": {"path": "b.txt", "content": big}}, deadline())
    assert reply["ok"], reply
    channel.close()  # EOF on `in`: the toolbox ends as on stdin's EOF
    assert started.end()[0] == 0


def test_a_line_someone_else_writes_into_the_channel_is_dropped(started: Started):
    """A process that opened `in` before the names were gone can neither ask the toolbox
    anything nor play a request of the host's again."""
    stray = os.open(started.directory / "in", os.O_WRONLY | os.O_NONBLOCK)
    try:
        channel = started.channel()
        channel.read_json(deadline())
        assert channel.request({"id": 1, "tool": "ping"}, deadline())["output"] == "pong"
        host_line = _signed_request(0, b'{"id": 1, "tool": "ping"}')  # what went first
        os.write(stray, b'{"id": 2, "tool": "write_file", "args": {"path": "x", '
                        b'"content": "planted"}}\n')
        os.write(stray, host_line)  # played again
        reply = channel.request({"id": 2, "tool": "read_file", "args": {"path": "a.txt"}},
                                deadline())
        assert reply["id"] == 2 and "hello" in reply["output"]
    finally:
        os.close(stray)
    channel.close()
    code, err = started.end()
    assert code == 0 and err.count("dropped a request line the host did not sign") == 2
    assert not (started.directory.parent / "proj" / "x").exists()


def _signed_request(number: int, body: bytes) -> bytes:
    key = toolbox.request_key(KEY)
    return toolbox.request_mac(key, number, body) + b" " + body + b"\n"


def test_the_host_signs_requests_as_the_toolbox_checks_them():
    """The host's FifoChannel and the toolbox's Verified agree (two copies of one rule)."""
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel = FifoChannel(os.dup(reader), writer, KEY, Channel(ours, KEY))
        channel.send_line(b'{"id": 1, "tool": "ping"}\n', deadline())
        channel.send_line(b'{"id": 2, "tool": "ping"}\n', deadline())
        sent = os.read(reader, 4096)
    os.close(reader)
    assert sent == _signed_request(0, b'{"id": 1, "tool": "ping"}') + \
        _signed_request(1, b'{"id": 2, "tool": "ping"}')


def test_the_end_of_the_toolbox_is_seen_on_the_channel(started: Started):
    channel = started.channel()
    channel.read_json(deadline())
    started.proc.kill()
    with pytest.raises(ToolboxError, match="exited"):
        channel.request({"id": 1, "tool": "ping"}, deadline())
    channel.close()
    started.end()


def test_without_the_fifos_the_toolbox_stays_on_stdio(tmp_path: Path):
    (tmp_path / "chan").mkdir()
    done = subprocess.run(
        [*toolbox.COMMAND, "--root", str(tmp_path), "--sign",
         "--channel", str(tmp_path / "chan")],
        input=KEY.hex().encode() + b"\n", capture_output=True, timeout=60, check=False)
    line = done.stdout.splitlines()[0].split(b" ", 1)[1]
    assert b'"ready": true' in line and b'"channel": "stdio: No such file or directory"' in line


def test_fifos_nobody_holds_open_are_not_waited_on(tmp_path: Path):
    """FIFOs the host did not hold (a stale pair, an engine on another machine that shows its
    own): the toolbox's opens fail at once and it stays on stdio."""
    chan = tmp_path / "chan"
    chan.mkdir()
    os.mkfifo(chan / "in")
    os.mkfifo(chan / "out")
    done = subprocess.run(
        [*toolbox.COMMAND, "--root", str(tmp_path), "--sign",
         "--channel", str(chan)],
        input=KEY.hex().encode() + b"\n", capture_output=True, timeout=60, check=False)
    line = done.stdout.splitlines()[0].split(b" ", 1)[1]
    assert b'"channel": "stdio: No such device or address"' in line, line


def _answers(*lines: bytes) -> int:
    """A pipe holding the toolbox's signed `lines` (its `out`), for a FifoChannel to read."""
    reader, writer = os.pipe()
    for line in lines:
        mac = hmac.new(KEY, line, "sha256").hexdigest()[:32].encode()
        os.write(writer, mac + b" " + line + b"\n")
    os.close(writer)
    return reader


def test_progress_of_another_call_is_not_taken_for_this_ones():
    """Red-team round 12: a progress line stolen from an earlier call and written back into
    `out` (signed: it is the toolbox's own) was shown as this call's live output."""
    reader = _answers(b'{"id": 1, "progress": {"stream": "stdout", "text": "OLD"}}',
                      b'{"id": 2, "progress": {"stream": "stdout", "text": "new"}}',
                      b'{"id": 2, "ok": true, "output": "", "meta": {}}')
    sink_r, sink_w = os.pipe()
    ours, theirs = socket.socketpair()
    seen: list[str] = []
    with ours, theirs:
        channel = FifoChannel(reader, sink_w, KEY, Channel(ours, KEY))
        reply = channel.request({"id": 2, "tool": "run_shell_command", "progress": True},
                                deadline(), lambda p: seen.append(p["text"]))
        channel.close()
    os.close(sink_r)
    assert reply["id"] == 2 and seen == ["new"] and channel.dropped == 1


def test_a_request_the_toolbox_never_takes_ends_at_its_deadline_or_its_end():
    """Red-team round 12: we hold `in` open for reading too, so writing to a toolbox that is
    gone never fails; a request larger than the pipe waited forever. It now ends at the
    deadline, or as soon as the process's stream says the toolbox ended."""
    big = b'{"id": 1, "tool": "run_shell_command", "args": {"command": "' + b"x" * 300_000 + \
        b'"}}\n'
    for ended in (False, True):
        reader, writer = os.pipe()  # nobody reads it: the toolbox is gone
        ours, theirs = socket.socketpair()
        with ours, theirs:
            channel = FifoChannel(os.dup(reader), writer, KEY, Channel(ours, KEY))
            if ended:
                theirs.close()  # the engine's stream ends with the process
            started = time.monotonic()
            with pytest.raises(ToolboxError, match="exited" if ended else "in time"):
                channel.send_line(big, time.monotonic() + 1.5)
            assert time.monotonic() - started < 5
            channel.close()
        os.close(reader)


def frame(line: bytes) -> bytes:
    """`line` as one stdout frame of the engine's multiplexed stream."""
    return struct.pack(">BxxxI", 1, len(line)) + line


def test_a_stream_that_outlives_its_process_ends_when_the_engine_says_it_is_gone(
        monkeypatch: pytest.MonkeyPatch):
    """Under gVisor the exec stream of a sandbox the host's kernel killed for memory stays
    open until the call's deadline (measured: 25 s of a 25 s deadline). Asked between
    silences, the engine's word ends the wait, as a death (the toolbox is restarted), not a
    timeout; while it says the process runs, the answer is still taken."""
    monkeypatch.setattr(channel_module, "_WATCH_EVERY", 0.05)
    dead = threading.Event()
    asked: list[str | None] = []

    def gone() -> str | None:
        why = "its container exited: the host's kernel killed it for memory"
        asked.append(why if dead.is_set() else None)
        return asked[-1]

    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel = Channel(ours, gone=gone)
        threading.Timer(0.3, lambda: theirs.sendall(frame(b'{"id": 1, "ok": true}\n'))).start()
        assert channel.request({"id": 1}, time.monotonic() + 60) == {"id": 1, "ok": True}
        assert asked and set(asked) == {None}  # asked while silent, the answer still taken
        dead.set()
        with pytest.raises(ToolboxError, match="killed it for memory") as caught:
            channel.request({"id": 2}, time.monotonic() + 60)
    assert not isinstance(caught.value, ToolboxTimeoutError) and channel.closed


def test_without_a_watch_a_silent_stream_ends_at_its_deadline():
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(ToolboxTimeoutError):
        Channel(ours).request({"id": 1}, time.monotonic() + 0.3)


def test_the_fifos_are_never_unlinked_through_a_link(tmp_path: Path):
    """Red-team round 12: with the lock dir where the sandbox could write, `<name>.channel`
    became a link to a host directory and the host unlinked `in` and `out` there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "in").write_text("keep")
    (victim / "out").write_text("keep")
    (tmp_path / "sandbox-agent-s.channel").symlink_to(victim)
    unlink_fifos(tmp_path / "sandbox-agent-s.channel")
    assert fifo_pair(tmp_path / "sandbox-agent-s.channel") is None
    make_life(tmp_path / "sandbox-agent-s.channel")
    assert hold_life(tmp_path / "sandbox-agent-s.channel", timeout=0.01) is None
    assert sorted(os.listdir(victim)) == ["in", "out"]


def test_a_lock_dir_inside_the_project_is_refused(tmp_path: Path):
    """What the lock dir holds is mounted into the container (the hosts file, the channel
    directory): inside the project the sandbox could replace it with a link."""
    from executor.errors import ConfigError
    from executor.sandbox.config import SandboxConfig
    from executor.sandbox.deployment import Deployment

    (tmp_path / "proj").mkdir()
    config = SandboxConfig(root=tmp_path / "proj", session_id="s1",
                           lock_dir=tmp_path / "proj" / ".cache" / "locks")
    with pytest.raises(ConfigError, match=r"the lock dir .* is inside the project root"):
        Deployment(config, warn=print).lock()
    assert not (tmp_path / "proj" / ".cache").exists()


def test_a_toolbox_offered_the_fifos_that_answers_on_its_stream_is_not_taken(tmp_path: Path):
    """Red-team round 18: what took the key in a toolbox's place (from a stopped toolbox's
    stdin) started its own without `--channel` and answered on stdio, and the host took it."""
    (tmp_path / "chan").mkdir()
    ours, theirs = socket.socketpair()

    def impostor() -> None:
        assert theirs.recv(1) == b"\n"  # the host's go
        theirs.sendall(frame(b"00\n"))  # another bytecode format: the host sends the source
        got = b""
        while b"\n" not in got:
            got += theirs.recv(1 << 16)
        header, _, rest = got.partition(b"\n")  # `source N`, N bytes, then the key's hex line
        size = int(header.split()[1])
        while len(rest) < size + 65:
            rest += theirs.recv(1 << 16)
        key = bytes.fromhex(rest[size:size + 64].decode())
        line = b'{"ready": true, "pid": 7, "channel": "stdio"}'
        mac = hmac.new(key, line, "sha256").hexdigest()[:32].encode()
        theirs.sendall(frame(mac + b" " + line + b"\n"))

    helper = threading.Thread(target=impostor, daemon=True)
    helper.start()
    box = Toolbox("api", "cid", "1000", ["--root", "/workspace", "--sign"], attached=ours,
                  channel=tmp_path / "chan")
    with pytest.raises(ToolboxError, match="did not take the FIFO channel"):
        box.start()
    helper.join(10)
    assert not os.listdir(tmp_path / "chan")  # the FIFOs are gone all the same
    theirs.close()
