"""The server name a TLS ClientHello asks for (SNI, RFC 6066), read without decrypting anything.

The egress proxy peeks at the first record a CONNECT tunnel carries: a ClientHello naming
another host than the CONNECT line is refused (a front end that serves many names on one
address routes by SNI). The HTTP Host inside the tunnel stays unseen: docs/NETWORK.md says so.
"""

from __future__ import annotations

RECORD_MAX = 5 + 16384 + 2048
"""Bytes of one TLS record at most (header, plaintext limit, the slack RFC 8446 allows)."""


def record_size(data: bytes) -> int | None:
    """How long the TLS handshake record `data` starts with is, or None when `data` is no
    handshake record (another protocol in the tunnel: passed on unread)."""
    if len(data) < 5 or data[0] != 0x16 or data[1] != 3:
        return None
    return 5 + int.from_bytes(data[3:5], "big")


def server_name(record: bytes) -> str | None:
    """The host name of the ClientHello in `record` (one whole record), lowercased; None when
    it names none. ValueError when it is not a ClientHello we can read whole."""
    reader = _Reader(record[5:])
    if reader.take(1) != b"\x01":
        raise ValueError("the first TLS handshake message is not a ClientHello")
    hello = _Reader(reader.take(int.from_bytes(reader.take(3), "big")))
    hello.take(2 + 32)  # version, random
    hello.vector(1)  # session id
    hello.vector(2)  # cipher suites
    hello.vector(1)  # compression methods
    if hello.empty():
        return None
    extensions = _Reader(hello.vector(2))
    while not extensions.empty():
        kind, body = int.from_bytes(extensions.take(2), "big"), extensions.vector(2)
        if kind == 0:
            names = _Reader(_Reader(body).vector(2))
            while not names.empty():
                name_type, name = names.take(1), names.vector(2)
                if name_type == b"\x00":
                    return name.decode("ascii", "replace").lower().rstrip(".")
    return None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError("a TLS ClientHello cut short (not one whole record)")
        self.at += n
        return self.data[self.at - n:self.at]

    def vector(self, size: int) -> bytes:
        return self.take(int.from_bytes(self.take(size), "big"))

    def empty(self) -> bool:
        return self.at >= len(self.data)
