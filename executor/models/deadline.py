"""One model response's deadline: `--timeout` bounds the whole of it, not only each read.

The HTTP client (`_http.py`) opens every request with both: its body wrapped in a
`DeadlineStream`, checked before and between the chunks whatever reads them, and a `watchdog`
that ends a read still waiting when the deadline passes (a server that trickles a byte, a
token or an SSE comment a second would otherwise hold a run for ever).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


class PastDeadline(httpx.ReadTimeout):
    """A response still arriving when its deadline passed (`--timeout` seconds after its
    request was sent): a timeout like httpx's own, translated and retried the same way."""


def _past(deadline: float, timeout: float) -> None:
    """Raise PastDeadline once the monotonic clock is past `deadline`."""
    if time.monotonic() >= deadline:
        raise PastDeadline(f"the response took longer than {timeout:g}s")


class DeadlineStream(httpx.SyncByteStream):
    """A response body that stops at its deadline: checked before the first chunk is waited
    for (the headers may have come late) and after each one arrives (a trickle ends within
    one chunk of it)."""

    def __init__(self, stream: httpx.SyncByteStream, deadline: float, timeout: float) -> None:
        self._stream, self._deadline, self._timeout = stream, deadline, timeout

    def __iter__(self) -> Iterator[bytes]:
        _past(self._deadline, self._timeout)
        for chunk in self._stream:
            _past(self._deadline, self._timeout)
            yield chunk

    def close(self) -> None:
        self._stream.close()


@contextmanager
def watchdog(resp: httpx.Response, deadline: float, seconds: float) -> Iterator[None]:
    """A read still waiting when `deadline` passes is ended then, not at its own timeout: a
    timer shuts the connection's socket down (its reader sees the end of the stream), and the
    failure that follows is PastDeadline. Without a socket (a test's transport), no timer."""
    sock = _socket_of(resp)
    if sock is None:
        yield
        return
    lock, cut, done = threading.Lock(), threading.Event(), threading.Event()

    def shut() -> None:
        with lock:  # the socket is not closed meanwhile: `done` is set first, under the lock
            if not done.is_set():
                cut.set()
                _shutdown(sock)

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), shut)
    timer.daemon = True
    timer.start()
    try:
        yield
    except httpx.TransportError as exc:
        if cut.is_set() and not isinstance(exc, PastDeadline):
            raise PastDeadline(f"the response took longer than {seconds:g}s") from exc
        raise
    finally:
        with lock:
            done.set()
        timer.cancel()


def _socket_of(resp: httpx.Response) -> socket.socket | None:
    """The socket a response is read from (httpcore's `network_stream` extension), if any."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _shutdown(sock: socket.socket) -> None:
    """Shut a socket down for both directions, through a duplicate of its descriptor: a TLS
    socket's own `shutdown` would also drop its SSL object under the thread reading it."""
    try:
        with socket.socket(fileno=os.dup(sock.fileno())) as twin:
            twin.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing is waiting on it
