"""The engine client reads proxies and ~/.netrc from the environment only where they mean
something: a request over a socket (`http+docker://`) gets neither."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from executor.sandbox.engine import _api_class


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = super().get_request()
        return conn, ("local", 0)  # http.server wants a (host, port)


@pytest.fixture
def engine_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "engine.sock"
    server = _UnixServer(str(path), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()


def test_a_socket_request_sends_no_netrc_credentials(engine_socket: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine localhost login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    _Recorder.seen.clear()
    api = _api_class()(base_url=f"unix://{engine_socket}", version="1.41")
    assert api.get(f"{api.base_url}/_ping", timeout=5).text == "OK"
    assert "Authorization" not in _Recorder.seen[-1]


def test_a_tcp_engine_still_trusts_the_environment():
    assert _api_class()(base_url="tcp://127.0.0.1:2375", version="1.41").trust_env
