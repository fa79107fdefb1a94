"""How much of a model server's reply the controller reads: a bounded reader for httpx bodies.

A hostile model (or server) could otherwise send a reply of any size and have the controller
hold all of it, until the kernel's OOM killer ends the run at a moment the server picks.
Every body the HTTP providers read goes through here, streamed or not, errors included:

    one reply (wire bytes, a stream's framing too)     `max_bytes` (SANDBOX_AGENT_MAX_REPLY_BYTES)
    one streamed line (an NDJSON line, an SSE line)    `line_bytes` (a sixteenth of it)
    an error body                                      ERROR_BODY_BYTES (only its start is shown)
    tool calls in one reply                            MAX_CALLS (each costs far more memory
                                                       than the few bytes that make one)
    values in one non-streamed JSON document          MAX_VALUES (json.loads makes ~60 bytes
                                                       of objects of a 3-byte `[]`: 16 MiB of
                                                       them would be 380 MB)

The body is read as it arrives (httpcore reads at most 64 KiB at a time; no re-chunking,
which would hold back a stream's tokens) and counted as it comes; past a cap the
reader raises ModelResponseError (never retried: the same request would most likely get the
same runaway reply, and a stream may already be on the screen) and the caller's `with`
closes the connection, so the rest is never read. Replies are asked for uncompressed and a
compressed one is refused: a few kilobytes of gzip could inflate to gigabytes in one chunk.
Text accumulated from a stream (content, thinking, tool-call arguments) is never longer than
the bytes it came in, so it is bounded by `max_bytes` too.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from executor.config import DEFAULT_MAX_REPLY_BYTES as DEFAULT_MAX_REPLY_BYTES
from executor.errors import ModelResponseError

SETTING = "SANDBOX_AGENT_MAX_REPLY_BYTES"
ERROR_BODY_BYTES = 64 * 1024
MAX_CALLS = 256
MAX_VALUES = 200_000
_STRING = re.compile(rb'"[^"]*"')
"""A string once its escapes are gone (linear: no backtracking whatever the input)."""
_MIN_LINE = 4096
_IDENTITY = ("", "identity")


@dataclass(frozen=True)
class ReplyLimits:
    """The caps of one reply (see the module docstring)."""

    max_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """Bytes of one reply on the wire."""

    @property
    def line_bytes(self) -> int:
        """Bytes of one streamed line: a sixteenth of a reply (a token's chunk is ~200)."""
        return max(self.max_bytes // 16, _MIN_LINE)


def size_text(count: int) -> str:
    """`16 MiB`, `64 KiB` or `900 bytes`."""
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if count >= 1 << shift:
            return f"{count / (1 << shift):g} {unit}"
    return f"{count} bytes"


def too_long(where: str, what: str, cap: int) -> ModelResponseError:
    """The error of a reply (or a line of one) past its cap; `where` names the server."""
    return ModelResponseError(
        f"{where} sent {what} longer than {size_text(cap)}: stopped reading it ({SETTING})",
        fix=f"raise {SETTING} (e.g. 64m) if the model really writes replies this long; "
            "otherwise the server is misbehaving",
    )


def too_many_calls(where: str) -> ModelResponseError:
    """The error of a reply with more than MAX_CALLS tool calls."""
    return ModelResponseError(
        f"{where} sent more than {MAX_CALLS} tool calls in one reply: stopped reading it",
        fix="check the server: no model makes this many calls in one turn",
    )


def check_encoding(resp: httpx.Response, where: str) -> None:
    """Refuse a compressed body (none is asked for): it could inflate without bound."""
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding not in _IDENTITY:
        raise ModelResponseError(
            f"{where} sent a compressed reply ({encoding[:40]!r}) though none was asked for",
            fix="check that --host points at a model server, not at a proxy that compresses",
        )


def read_body(resp: httpx.Response, limits: ReplyLimits, where: str) -> bytes:
    """The whole body, or ModelResponseError as soon as it is longer than `limits.max_bytes`."""
    check_encoding(resp, where)
    cap = limits.max_bytes
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:  # said so up front: do not read any of it
        raise too_long(where, "a reply", cap)
    body = bytearray()
    for chunk in _chunks(resp):
        if len(body) + len(chunk) > cap:
            raise too_long(where, "a reply", cap)
        body += chunk
    return bytes(body)


def check_values(body: bytes, where: str) -> None:
    """Refuse a JSON document of more than MAX_VALUES strings, arrays, objects and elements
    before json.loads makes an object of each (a legitimate reply has a few dozen)."""
    marks = b"[{,\""
    if sum(body.count(mark) for mark in marks) <= MAX_VALUES:
        return  # the cheap bound: never fewer marks than values, whatever lies in strings
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")  # then each " delimits
    bare, strings = _STRING.subn(b"", unescaped)
    if strings + sum(bare.count(mark) for mark in marks[:3]) > MAX_VALUES:
        raise ModelResponseError(
            f"{where} sent a reply of more than {MAX_VALUES:,} JSON values: not decoded",
            fix="check the server: a model's reply is a few dozen values",
        )


def _chunks(resp: httpx.Response) -> Iterator[bytes]:
    """The body as it arrives; a body already read (a test's MockTransport) as it is."""
    if resp.is_stream_consumed:
        yield resp.content
    else:
        yield from resp.iter_raw()


def text_encoding(resp: httpx.Response) -> str:
    """The charset the server named when Python knows it, else UTF-8."""
    try:
        return codecs.lookup(resp.charset_encoding or "utf-8").name
    except LookupError:
        return "utf-8"


def read_start(resp: httpx.Response, limit: int = ERROR_BODY_BYTES) -> bytes:
    """The first `limit` bytes of the body (an error's detail); the rest is never read."""
    if resp.headers.get("content-encoding", "").strip().lower() not in _IDENTITY:
        return b""
    start = bytearray()
    for chunk in _chunks(resp):
        start += chunk[: limit - len(start)]
        if len(start) >= limit:
            break
    return bytes(start)


def iter_lines(resp: httpx.Response, limits: ReplyLimits, where: str) -> Iterator[str]:
    """The body's lines (split at LF, CRLF or CR, decoded as UTF-8), each within
    `limits.line_bytes`, all within `limits.max_bytes`; ModelResponseError past either."""
    check_encoding(resp, where)
    encoding = text_encoding(resp)
    total, pending = 0, bytearray()
    for chunk in _chunks(resp):
        total += len(chunk)
        if total > limits.max_bytes:
            raise too_long(where, "a reply", limits.max_bytes)
        pending += chunk
        if b"\n" in chunk:
            *lines, rest = pending.split(b"\n")
            pending = bytearray(rest)
            yield from _split(lines, limits.line_bytes, where, encoding)
        if len(pending) > limits.line_bytes:  # a line without an end in sight
            raise too_long(where, "a stream line", limits.line_bytes)
    yield from _split([pending], limits.line_bytes, where, encoding) if pending else ()


def _split(lines: list[bytearray], cap: int, where: str, encoding: str) -> Iterator[str]:
    """Lines split at LF, also at CR (SSE allows CRLF and CR; JSON never holds a raw CR)."""
    for line in lines:
        if len(line) > cap:
            raise too_long(where, "a stream line", cap)
        for part in bytes(line).removesuffix(b"\r").split(b"\r"):
            yield part.decode(encoding, errors="replace")
