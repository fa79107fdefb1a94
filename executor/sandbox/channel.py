"""JSON lines over a Docker exec's attached stdin/stdout.

Without a TTY, Docker multiplexes the process's stdout and stderr on one socket in frames
of an 8-byte header (stream id, 3 zero bytes, big-endian length) plus payload. A frame may
hold part of a line or several lines, so stdout is re-split into lines here.

With a key, every line must carry the toolbox's signature (`<32 hex of HMAC-SHA256> <line>`):
under gVisor a command the toolbox runs can open the toolbox's /proc/PID/fd entries and write
into its stdout; such lines are dropped, so they can neither answer a request nor stop one.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from executor.errors import ToolboxError, ToolboxTimeoutError

_HEADER = struct.Struct(">BxxxI")
_STDOUT, _STDERR = 1, 2
_MAX_LINE = 64 * 1024 * 1024  # a response larger than this means the toolbox went wrong
_MAC_HEX = 32  # hex digits of the signature before each line (with a key)
_PIPE = 1 << 16  # what a pipe holds (Linux's default): one read takes all of it
_WATCH_EVERY = 2.0  # seconds of silence between two asks of `gone` (an engine round trip)
log = logging.getLogger(__name__)

OnProgress = Callable[[dict[str, Any]], None]
Gone = Callable[[], str | None]
"""Why the process is gone though its stream stays open (None: it runs)."""


class Channel:
    """Request/response lines over one attached socket, each read bounded by a deadline."""

    def __init__(self, sock: socket.socket, key: bytes | None = None,
                 end_mark: bytes | None = None, gone: Gone | None = None) -> None:
        self._sock = sock
        self._key = key
        self._end_mark = end_mark
        """A line on stderr that means the process is gone though the stream stays open (a
        container's first process: the engine keeps its stdout while the container runs)."""
        self._why_gone = gone
        """Asked after each `_WATCH_EVERY` s of silence: gVisor's exec stream stays open after
        the host's kernel killed the sandbox for memory, until the call's deadline."""
        self._err = b""
        self.ended = False
        self.dropped = 0
        """Lines dropped because their signature was missing or wrong (with `key`)."""
        self._buf = bytearray()
        self._lines: deque[bytes] = deque()
        self._partial = bytearray()
        self._stderr: deque[str] = deque(maxlen=50)
        self.closed = False

    def send(self, data: bytes) -> None:
        """Write raw bytes to the process's stdin."""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.closed = True
            raise ToolboxError(f"toolbox stdin closed: {exc}") from exc

    def send_line(self, data: bytes, deadline: float) -> None:
        """Write one request line (the engine's stream takes it at once)."""
        self.send(data)

    def request(self, payload: dict[str, Any], deadline: float,
                on_progress: OnProgress | None = None) -> dict[str, Any]:
        """Send one JSON line and wait for its response until `deadline` (monotonic).

        Progress lines before the response (objects with a "progress" key and the request's
        id, sent only to a request that asked for them) go to `on_progress`; one of another id
        (an earlier call's, played again) is dropped; a failing callback is logged, never
        allowed to leave the response unread.
        """
        self.send_line(json.dumps(payload, ensure_ascii=True).encode() + b"\n", deadline)
        while True:
            reply = self.read_json(deadline)
            progress = reply.get("progress")
            if progress is None:
                return reply
            if reply.get("id") != payload.get("id"):
                self.dropped += 1
                continue
            if on_progress is not None and isinstance(progress, dict):
                try:
                    on_progress(progress)
                except Exception:
                    log.exception("a progress callback failed")

    def read_json(self, deadline: float) -> dict[str, Any]:
        """The next stdout line, parsed as a JSON object; with a key, the next *signed* one
        (a line someone else wrote into the process's stdout is dropped and counted)."""
        line = self.read_line(deadline)
        while self._key is not None and not self._signed(line):
            self.dropped += 1
            log.warning("dropped a toolbox line without its signature: %r", line[:200])
            line = self.read_line(deadline)
        if self._key is not None:
            line = line[_MAC_HEX + 1:]
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ToolboxError(f"toolbox sent a line that is not JSON: {line[:200]!r}") from exc
        if not isinstance(value, dict):
            raise ToolboxError(f"toolbox sent {type(value).__name__}, not an object")
        return value

    def _signed(self, line: bytes) -> bool:
        assert self._key is not None
        mac, body = line[:_MAC_HEX], line[_MAC_HEX + 1:]
        expected = hmac.new(self._key, body, "sha256").hexdigest()[:_MAC_HEX].encode()
        return line[_MAC_HEX:_MAC_HEX + 1] == b" " and hmac.compare_digest(mac, expected)

    def read_line(self, deadline: float) -> bytes:
        """The next complete stdout line (without the newline)."""
        while not self._lines:
            if self.ended:
                raise self._exited()
            self._fill(deadline)
        return self._lines.popleft()

    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr (for error messages)."""
        return "".join(self._stderr).strip()

    def until_end(self, deadline: float) -> bool:
        """Read the stream to its end (a short-lived process's); whether it ended by
        `deadline`. What it said: `said()`."""
        try:
            while True:
                self._fill(deadline)
        except ToolboxTimeoutError:
            return False
        except ToolboxError:
            return True

    def said(self) -> str:
        """Everything read so far: stdout's lines, then the end of stderr."""
        out = b"\n".join([*self._lines, bytes(self._partial)]).decode("utf-8", "replace")
        return f"{out}\n{self.stderr_tail()}".strip()

    def close(self) -> None:
        """Close stdin (the toolbox exits on EOF) and the socket."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def abort(self) -> None:
        """End both directions at once, from another thread: a send or read blocked on this
        socket returns with an error instead of waiting for the other end."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ToolboxTimeoutError("the toolbox did not answer in time")
        # A TLS connection (a tcp:// engine) may hold decrypted bytes select cannot see.
        pending = getattr(self._sock, "pending", None)
        buffered = callable(pending) and pending() > 0
        ready = buffered or select.select([self._sock], [], [], self._slice(remaining))[0]
        if not ready:
            self._check_gone(remaining)
            return
        chunk = self._recv()
        self._buf += chunk
        self._parse_frames()

    def _slice(self, remaining: float) -> float:
        return min(remaining, _WATCH_EVERY) if self._why_gone is not None else remaining

    def _check_gone(self, remaining: float) -> None:
        """After a wait that saw nothing: the deadline, or a process known to be gone."""
        if self._slice(remaining) >= remaining:
            raise ToolboxTimeoutError("the toolbox did not answer in time")
        assert self._why_gone is not None
        why = self._why_gone()
        if why is not None:
            self.closed = True
            raise ToolboxError(why)

    def _recv(self) -> bytes:
        try:
            chunk = self._sock.recv(1 << 20)
        except OSError as exc:
            self.closed = True
            raise ToolboxError(f"lost the toolbox connection: {exc}") from exc
        if not chunk:
            raise self._exited()
        return chunk

    def _exited(self) -> ToolboxError:
        """The error for a process that is gone, with the last of what it said (not the mark)."""
        self.closed = True
        detail = self.stderr_tail()
        if self._end_mark is not None:
            detail = detail.replace(self._end_mark.decode(), "").strip()
        return ToolboxError("the toolbox exited" + (f": {detail[-500:]}" if detail else ""))

    def _parse_frames(self) -> None:
        while len(self._buf) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + size:
                return
            payload = bytes(self._buf[_HEADER.size : _HEADER.size + size])
            del self._buf[: _HEADER.size + size]
            if stream == _STDOUT:
                self._add_stdout(payload)
            elif stream == _STDERR:
                self._add_stderr(payload)

    def _add_stderr(self, payload: bytes) -> None:
        if self._end_mark is not None:  # the mark may arrive split over frames
            self._err = self._err[-len(self._end_mark):] + payload
            self.ended = self.ended or self._end_mark in self._err
        self._stderr.append(payload.decode("utf-8", "replace"))

    def poll(self) -> None:
        """Take in what has arrived, without waiting: an exit seen sets `closed` or `ended`."""
        with contextlib.suppress(ToolboxError):
            while not self.closed and select.select([self._sock], [], [], 0)[0]:
                self._buf += self._recv()
                self._parse_frames()

    def _add_stdout(self, payload: bytes) -> None:
        if b"\n" not in payload:  # only scan the new bytes: responses can span many frames
            self._partial += payload
        else:
            head, *middle, rest = payload.split(b"\n")
            self._lines.append(bytes(self._partial + head))
            self._lines.extend(middle)
            self._partial = bytearray(rest)
        if len(self._partial) > _MAX_LINE:
            raise ToolboxError("toolbox response exceeds the size limit")


class FifoChannel(Channel):
    """Request/response lines over the toolbox's two FIFOs (its `--channel`), which carry them
    in the kernel instead of through the engine's stream relay.

    `reader` is our end of `out`, `writer` of `in`. Every request is signed with a key of its
    own and its number in the sequence, every answer as on stdout. The process's stream
    (`stdio`) is still read while we wait, for its stderr and for its end.
    """

    def __init__(self, reader: int, writer: int, key: bytes, stdio: Channel) -> None:
        super().__init__(stdio._sock, key, stdio._end_mark)
        self._reader, self._writer, self._stdio = reader, writer, stdio
        self._fds: tuple[int, ...] = (writer, reader)
        self._request_key = hmac.new(key, b"sandbox-agent requests", "sha256").digest()
        self._number = 0
        os.set_blocking(reader, False)
        os.set_blocking(writer, False)

    def send(self, data: bytes) -> None:
        """Not on this channel: requests go through `send_line`, with a deadline."""
        raise ToolboxError("the FIFO channel takes request lines only")

    def send_line(self, data: bytes, deadline: float) -> None:
        """Write one request line (ending in a newline), signed, by `deadline`. We hold `in`
        open for reading as well, so a write never fails when the toolbox is gone: while the
        pipe is full, the process's stream says whether it still runs."""
        body = data.rstrip(b"\n")
        mac = hmac.new(self._request_key, b"%d " % self._number + body, "sha256")
        self._number += 1
        view = memoryview(mac.hexdigest()[:_MAC_HEX].encode() + b" " + body + b"\n")
        while view:
            try:
                view = view[os.write(self._writer, view):]
                continue
            except BlockingIOError:  # the pipe is full: the toolbox is reading a large request
                pass
            except OSError as exc:
                self.closed = True
                raise ToolboxError(f"toolbox channel closed: {exc}") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ToolboxTimeoutError("the toolbox did not take the request in time")
            readable = select.select([self._sock.fileno()], [self._writer], [],
                                     min(remaining, 1.0))[0]
            if readable and self._gone():
                self.ended = True
                raise self._exited()

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ToolboxTimeoutError("the toolbox did not answer in time")
        ready = select.select([self._reader, self._sock.fileno()], [], [], remaining)[0]
        if not ready:
            raise ToolboxTimeoutError("the toolbox did not answer in time")
        if self._sock.fileno() in ready and self._gone():  # what it wrote before counts
            self.ended = True
            self._drain()
            return
        if self._reader in ready:
            self._drain()

    def _drain(self) -> None:
        """Take in what the FIFO holds; its end (every writer gone: the toolbox) ends us."""
        while True:
            try:
                chunk = os.read(self._reader, _PIPE)
            except BlockingIOError:
                return
            except OSError as exc:
                self.closed = True
                raise ToolboxError(f"lost the toolbox channel: {exc}") from exc
            if not chunk:
                self.ended = True
                return
            self._add_stdout(chunk)
            if len(chunk) < _PIPE:  # it is empty now: no read that only says so
                return

    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr."""
        return self._stdio.stderr_tail()

    def poll(self) -> None:
        """Take in what the process's stream has (its end, its stderr), without waiting."""
        if self._gone():
            self.closed = True

    def _gone(self) -> bool:
        """Whether the process's stream, read without waiting, says the toolbox ended."""
        self._stdio.poll()
        return self._stdio.closed or self._stdio.ended

    def close(self) -> None:
        """Close our ends (the toolbox reads EOF and exits) and the process's stream."""
        self.closed = True
        fds, self._fds = self._fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._stdio.close()

    def abort(self) -> None:
        """End the process's stream at once (a read waiting on it returns)."""
        self.closed = True
        self._stdio.abort()
