"""Raw TCP upstreams on 127.0.0.1 for the egress proxy's tests: what each connection brought,
byte for byte (an http.server would parse, and so hide, what a proxy smuggled)."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpUpstream:
    """Accepts on a free loopback port; each connection is served by `serve` on a thread."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(30)
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.server.close()


class ToTheEnd(TcpUpstream):
    """Keeps every byte each connection brought, read to its end; says `100 Continue` to a
    head that expects it, then answers `ok`."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        data, continued = b"", False
        while chunk := conn.recv(65536):
            data += chunk
            if not continued and b"\r\n\r\n" in data and b"100-continue" in data.lower():
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                continued = True
        self.got.append(data)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    def wait(self, n: int) -> list[bytes]:
        """`got`, once it holds `n` connections (or after 5 s)."""
        for _ in range(500):
            if len(self.got) >= n:
                break
            threading.Event().wait(0.01)
        return self.got


class KeepAlive(TcpUpstream):
    """Answers every request head on a connection (as a shared front end keeps a connection
    open for the next one) and notes each request line and Host."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
            while b"\r\n\r\n" in data:
                head, _, data = data.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                host = next((x for x in lines if x.lower().startswith("host:")), "")
                self.seen.append(f"{lines[0]} / {host}")
                body = f"upstream saw {lines[0]} {host}".encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
