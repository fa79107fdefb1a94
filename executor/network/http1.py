"""One plain-HTTP request per connection, as the egress proxy relays it (red-team round 18).

The upstream receives only bytes this module wrote: the first request's head rebuilt (origin
form, the Host the rules checked, no proxy headers, `Connection: close`) and its body re-framed
by us (exactly Content-Length bytes, or chunks of our own), then nothing. Whatever the client
sends after that body (a pipelined request naming any Host) is never relayed: each such head is
handed to `report` so the proxy can audit it as refused.

The head is parsed strictly (RFC 9112): a bare CR or LF, a folded line, a space before a colon,
a control character, conflicting or unknown framing are refused, so no reading of the same bytes
by a lenient server can differ from ours in where the request ends.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

HEAD_MAX = 64 * 1024
"""Bytes a request head (and a chunk-size or trailer line) may have."""
LINE_MAX = 4096
"""Bytes a chunk-size or trailer line may have."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_HOP = frozenset(("connection", "proxy-connection", "proxy-authorization", "keep-alive",
                  "upgrade", "te", "trailer"))
# framing is ours alone: the client's headers for it are dropped and rewritten
_FRAMING = frozenset(("content-length", "transfer-encoding"))


@dataclass(frozen=True)
class Request:
    """A plain-HTTP request head as parsed: the URL's host and port, and the head to send."""

    method: str
    host_port: str
    """The absolute URL's authority, for the proxy's own host/port parsing."""
    path: str
    version: str
    headers: tuple[tuple[str, str], ...]
    """The client's headers the upstream gets (no Host, hop-by-hop or framing header)."""
    length: int | None
    """Content-Length; None when chunked."""
    declared: bool = True
    """Whether the client said how its body is framed (a `Content-Length: 0` is kept: some
    servers want one on a POST)."""

    def head(self, named: str) -> bytes:
        """The head the upstream receives, with `named` (the checked host) as its Host."""
        framing = ("Transfer-Encoding: chunked" if self.length is None
                   else f"Content-Length: {self.length}" if self.declared else None)
        lines = [f"{self.method} {self.path} {self.version}", f"Host: {named}",
                 *(f"{name}: {value}" for name, value in self.headers),
                 *([framing] if framing else []), "Connection: close", "", ""]
        return "\r\n".join(lines).encode("latin-1")


def parse_head(head: bytes) -> Request:
    """The request in `head` (through its blank line); ValueError when it is not one we relay."""
    lines = head.decode("latin-1").split("\r\n")
    if lines[-2:] != ["", ""] or any(c in line for line in lines for c in "\r\n\0"):
        raise ValueError("a bare CR, LF or NUL in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not _TOKEN.fullmatch(
            parts[0]) or not all("!" <= c <= "~" for c in parts[1]):
        raise ValueError("not an HTTP/1 request line")
    method, target, version = parts
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError("a proxy request names an http:// URL (https goes through CONNECT)")
    fields = [_field(line) for line in lines[1:-2]]
    kept = tuple((name, value) for name, value in fields
                 if name.lower() not in _HOP | _FRAMING | {"host"})
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    declared = any(name.lower() in _FRAMING for name, _ in fields)
    return Request(method, url.netloc.rpartition("@")[2], path, version, kept,
                   _length(fields, version), declared)


def _field(line: str) -> tuple[str, str]:
    if line[:1] in (" ", "\t"):
        raise ValueError("a folded header line")
    name, colon, value = line.partition(":")
    if not colon or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
        raise ValueError(f"not a header line: {line[:80]!r}")
    return name, value.strip(" \t")


def _length(fields: list[tuple[str, str]], version: str) -> int | None:
    """The body's length (None: chunked), from headers no reader could read otherwise."""
    lengths = {part.strip(" \t") for name, value in fields if name.lower() == "content-length"
               for part in value.split(",")}
    codings = [part.strip(" \t").lower() for name, value in fields
               if name.lower() == "transfer-encoding" for part in value.split(",")]
    if codings:
        if codings != ["chunked"] or lengths or version != "HTTP/1.1":
            raise ValueError("only Transfer-Encoding: chunked, alone, in HTTP/1.1 is relayed")
        return None
    if len(lengths) > 1 or not all(text.isdigit() and text.isascii() for text in lengths):
        raise ValueError("a Content-Length that is not one number")
    return int(lengths.pop()) if lengths else 0


class Relay:
    """Client bytes after the head -> bytes for the upstream: the first request's body, framed
    by us, then nothing; each later request head goes to `report`, unrelayed."""

    def __init__(self, request: Request, report: Callable[[bytes], None]) -> None:
        self._body: _Sized | _Chunked = (_Chunked() if request.length is None
                                         else _Sized(request.length))
        self._after = _After(report)

    @property
    def done(self) -> bool:
        """Whether the request's body has gone up whole."""
        return self._body.done

    def feed(self, data: bytes) -> bytes:
        """What of `data` goes upstream; ValueError on a broken chunked body."""
        if self._body.done:
            self._after.feed(data)
            return b""
        out, rest = self._body.feed(data)
        if rest:
            self._after.feed(rest)
        return out


class _Sized:
    def __init__(self, length: int) -> None:
        self.left = length

    @property
    def done(self) -> bool:
        return self.left == 0

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        out, rest = data[:self.left], data[self.left:]
        self.left -= len(out)
        return out, rest


class _Chunked:
    """Decodes the client's chunks and writes each piece as a chunk of ours (extensions and
    trailers dropped)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._left = 0
        self._state = "size"
        self.done = False

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        self._buffer += data
        out: list[bytes] = []
        while not self.done:
            if self._state == "data":
                piece, self._buffer = self._buffer[:self._left], self._buffer[self._left:]
                if not piece:
                    break
                out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
                self._left -= len(piece)
                self._state = "data" if self._left else "crlf"
                continue
            if self._state == "crlf":
                if len(self._buffer) < 2:
                    break
                if self._buffer[:2] != b"\r\n":
                    raise ValueError("a chunk that is not followed by CRLF")
                self._buffer, self._state = self._buffer[2:], "size"
                continue
            line = self._line()
            if line is None:
                break
            if self._state == "trailer":
                if not line:
                    out.append(b"0\r\n\r\n")
                    self.done = True
                continue
            self._size(line)
        rest, self._buffer = (self._buffer, b"") if self.done else (b"", self._buffer)
        return b"".join(out), rest

    def _size(self, line: bytes) -> None:
        text = line.split(b";", 1)[0].rstrip(b" \t")
        if not 0 < len(text) <= 16 or not all(c in b"0123456789abcdefABCDEF" for c in text):
            raise ValueError("not a chunk size")
        self._left = int(text, 16)
        self._state = "data" if self._left else "trailer"

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > LINE_MAX:
                raise ValueError("a chunk line too long")
            return None
        if end == 0 or self._buffer[end - 1:end] != b"\r" or b"\r" in self._buffer[:end - 1]:
            raise ValueError("a bare CR or LF in the chunked body")
        line, self._buffer = self._buffer[:end - 1], self._buffer[end + 1:]
        return line


class _After:
    """Bytes past the first request: never relayed; each request head in them is reported
    (a Content-Length body skipped; after one we cannot frame, nothing more is looked at)."""

    def __init__(self, report: Callable[[bytes], None]) -> None:
        self._report = report
        self._buffer = b""
        self._skip = 0
        self._blind = False

    def feed(self, data: bytes) -> None:
        if self._blind:
            return
        self._buffer += data
        while not self._blind:
            if self._skip:
                dropped = self._buffer[:self._skip]
                self._buffer, self._skip = self._buffer[self._skip:], self._skip - len(dropped)
                if self._skip:
                    return
            end = _head_end(self._buffer)
            if end is None:
                self._blind = len(self._buffer) > HEAD_MAX
                return
            head, self._buffer = self._buffer[:end], self._buffer[end:]
            self._report(head)
            self._skip, self._blind = _later_length(head)


def _head_end(data: bytes) -> int | None:
    """Where a head ends in `data` as the most lenient server reads it (CRLF or bare LF)."""
    match = re.search(rb"\r?\n\r?\n", data.lstrip(b"\r\n"))
    return None if match is None else match.end() + len(data) - len(data.lstrip(b"\r\n"))


def _later_length(head: bytes) -> tuple[int, bool]:
    """The body length of a reported head, and whether it cannot be framed (chunked, odd)."""
    text = head.decode("latin-1")
    if re.search(r"(?im)^transfer-encoding\s*:", text):
        return 0, True
    lengths = set(re.findall(r"(?im)^content-length\s*:\s*(\S*)", text))
    if not lengths:
        return 0, False
    value = lengths.pop()
    return (int(value), False) if not lengths and value.isdigit() else (0, True)


def named_in(head: bytes) -> tuple[str, str]:
    """The method and the authority a reported head names (its absolute URL's, else its Host
    header's), read leniently: it is only audited, never relayed."""
    text = head.decode("latin-1").lstrip("\r\n")
    first, _, fields = text.partition("\n")
    parts = first.strip().split(" ")
    method = parts[0][:32] if parts and parts[0] else "?"
    target = urlsplit(parts[1]) if len(parts) > 1 else None
    if target is not None and target.scheme and target.netloc:
        return method, target.netloc.rpartition("@")[2]
    host = re.search(r"(?im)^host\s*:[ \t]*([^\r\n]*)", fields)
    return method, host.group(1).strip() if host else ""
