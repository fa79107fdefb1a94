"""The egress proxy on a real Unix socket, with upstreams on 127.0.0.1.

The resolver and the connector are recording fakes around the real ones, so a test sees every
name the proxy looked up and every address it connected to: refused destinations must show
neither (no socket was ever opened to them).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from executor.network.proxy import Connection, EgressProxy, Limits, tcp_connector
from executor.network.rules import EgressRules, Rule, parse_rule
from tests.fakes.tcp_upstream import ToTheEnd


@dataclass
class Net:
    """What the proxy asked of the network: lookups and connections."""

    pins: dict[str, list[str]] = field(default_factory=dict)
    looked_up: list[str] = field(default_factory=list)
    connected: list[tuple[str, int]] = field(default_factory=list)

    def resolve(self, host: str, port: int) -> list[str]:
        self.looked_up.append(host)
        if host not in self.pins:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return self.pins[host]

    def connect(self, address: str, port: int, timeout: float) -> socket.socket:
        self.connected.append((address, port))
        return tcp_connector(address, port, timeout)


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.path} via {self.headers.get('Host')} proxy-auth="\
               f"{self.headers.get('Proxy-Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@dataclass
class Proxy:
    proxy: EgressProxy
    net: Net
    records: list[Connection]
    path: Path

    def ask(self, request: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(str(self.path))
            client.sendall(request)
            return _read_all(client)


def _read_all(client: socket.socket) -> bytes:
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    return data


def make_proxy(tmp_path: Path, *texts: str, pins: dict[str, list[str]] | None = None,
               limits: Limits | None = None, ask: Any = None) -> Proxy:
    net = Net(pins or {})
    records: list[Connection] = []
    proxy = EgressProxy(EgressRules(parse_rule(t, "--allow-host") for t in texts),
                        tmp_path / "p.sock", on_connection=records.append, resolver=net.resolve,
                        connector=net.connect, limits=limits or Limits(), ask=ask,
                        current_call=lambda: "call-7")
    return Proxy(proxy, net, records, tmp_path / "p.sock")


@pytest.fixture
def started() -> Iterator[list[EgressProxy]]:
    proxies: list[EgressProxy] = []
    yield proxies
    for proxy in proxies:
        proxy.stop()


def run(p: Proxy, started: list[EgressProxy]) -> Proxy:
    p.proxy.start()
    started.append(p.proxy)
    return p


def wait_records(p: Proxy, n: int) -> list[Connection]:
    for _ in range(200):
        if len(p.records) >= n:
            break
        threading.Event().wait(0.01)
    return p.records


def test_plain_http_is_sent_in_origin_form_to_the_checked_address(tmp_path: Path, upstream: int,
                                                                    started: list[EgressProxy]):
    p = run(make_proxy(tmp_path, f"api.test:{upstream}", f"127.0.0.1/32:{upstream}",
                       pins={"api.test": ["127.0.0.1"]}), started)
    answer = p.ask(f"GET http://api.test:{upstream}/x?y=1 HTTP/1.1\r\nHost: admin.internal\r\n"
                   "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.0 200")
    # no proxy header upstream, and the Host is the one the rules checked (red-team round 15)
    assert answer.endswith(f"/x?y=1 via api.test:{upstream} proxy-auth=None".encode())
    assert p.net.connected == [("127.0.0.1", upstream)]
    (record,) = wait_records(p, 1)
    assert (record.decision, record.address, record.rule, record.address_rule) == (
        "allowed", "127.0.0.1", f"api.test:{upstream}", f"127.0.0.1/32:{upstream}")
    assert record.call_id == "call-7" and record.bytes_down == len(answer)
    assert p.proxy.socket_path.stat().st_mode & 0o777 == 0o600


def test_connect_tunnels_bytes_untouched(tmp_path: Path, started: list[EgressProxy]):
    echo = socket.create_server(("127.0.0.1", 0))
    port = echo.getsockname()[1]

    def serve() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data[::-1])

    threading.Thread(target=serve, daemon=True).start()
    p = run(make_proxy(tmp_path, f"localhost:{port}", pins={"localhost": ["127.0.0.1"]}), started)
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(p.path))
        client.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode() + b"\x16\x03\x01ab")
        assert client.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        got = b""
        while len(got) < 5:
            got += client.recv(100)
        assert got == b"ba\x01\x03\x16"
    echo.close()
    (record,) = wait_records(p, 1)
    assert (record.method, record.decision, record.bytes_up) == ("CONNECT", "allowed", 5)


def test_a_host_no_rule_allows_is_never_looked_up_nor_connected_to(tmp_path: Path,
                                                                    started: list[EgressProxy]):
    p = run(make_proxy(tmp_path, "allowed.test"), started)
    answer = p.ask(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 blocked: other.test is not allowed; the person can "
                             b"allow it with --allow-host other.test")
    assert p.net.looked_up == [] and p.net.connected == []
    (record,) = wait_records(p, 1)
    assert (record.decision, record.address, record.call_id) == ("denied", None, "call-7")


@pytest.mark.parametrize("address", ["127.0.0.1", "169.254.169.254", "10.0.0.7", "fd00:ec2::254",
                                     "::ffff:127.0.0.1", "100.64.1.1"])
def test_an_allowed_name_resolving_to_a_private_address_is_refused_before_connecting(
        tmp_path: Path, address: str, started: list[EgressProxy]):
    p = run(make_proxy(tmp_path, "mirror.test", pins={"mirror.test": [address]}), started)
    answer = p.ask(b"GET http://mirror.test/simple/ HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 mirror.test is refused: it resolves to")
    assert p.net.connected == []
    (record,) = wait_records(p, 1)
    assert (record.decision, record.rule) == ("denied", None)
    assert record.address == str(ipaddress.ip_address(address))


def test_only_a_checked_address_is_connected_to_never_the_others(tmp_path: Path, upstream: int,
                                                                  started: list[EgressProxy]):
    """A name with a private and an allowed address: the proxy connects to the one it
    checked (DNS rebinding gets nothing: there is no second lookup)."""
    p = run(make_proxy(tmp_path, f"two.test:{upstream}", f"127.0.0.1/32:{upstream}",
                       pins={"two.test": ["10.9.9.9", "127.0.0.1"]}), started)
    assert p.ask(f"GET http://two.test:{upstream}/ HTTP/1.1\r\n\r\n".encode()).startswith(
        b"HTTP/1.0 200")
    assert p.net.connected == [("127.0.0.1", upstream)] and p.net.looked_up == ["two.test"]


def test_address_literals_need_a_range_rule(tmp_path: Path, started: list[EgressProxy]):
    p = run(make_proxy(tmp_path, "example.test"), started)
    answer = p.ask(b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 blocked: 169.254.169.254 is not allowed")
    assert p.net.connected == [] and p.net.looked_up == []


def test_bad_requests_and_https_in_plain_form_are_refused(tmp_path: Path,
                                                          started: list[EgressProxy]):
    p = run(make_proxy(tmp_path, "example.test"), started)
    assert p.ask(b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert p.ask(b"GET https://example.test/ HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert p.ask(b"CONNECT example.test HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert p.net.connected == []


def test_the_session_limits_are_kept(tmp_path: Path, upstream: int, started: list[EgressProxy]):
    limits = Limits(max_connections=1)
    p = run(make_proxy(tmp_path, f"api.test:{upstream}", f"127.0.0.1/32:{upstream}",
                       pins={"api.test": ["127.0.0.1"]}, limits=limits), started)
    request = f"GET http://api.test:{upstream}/ HTTP/1.1\r\n\r\n".encode()
    assert p.ask(request).startswith(b"HTTP/1.0 200")
    assert p.ask(request).startswith(b"HTTP/1.1 503 this session made its 1 connections")
    assert len(p.net.connected) == 1
    (tmp_path / "b").mkdir()
    budget = run(make_proxy(tmp_path / "b", f"api.test:{upstream}", f"127.0.0.1/32:{upstream}",
                            pins={"api.test": ["127.0.0.1"]}, limits=Limits(max_bytes=50)),
                 started)
    budget.ask(request)  # its reply overruns the 50 bytes: cut, and the next is refused
    assert budget.ask(request).startswith(b"HTTP/1.1 503 this session moved its 50 bytes")


def test_a_person_s_yes_allows_exactly_that_host_and_port(tmp_path: Path, upstream: int,
                                                           started: list[EgressProxy]):
    asked: list[tuple[str, int, str | None]] = []

    def ask(host: str, port: int, call: str | None) -> tuple[Rule, bool] | None:
        asked.append((host, port, call))
        rule = parse_rule(f"{host}:{port}", "user:session")
        return (rule, True) if host == "yes.test" else (rule, False) if host == "once.test" \
            else None

    p = run(make_proxy(tmp_path, f"127.0.0.1/32:{upstream}", ask=ask,
                       pins={"yes.test": ["127.0.0.1"]}), started)
    request = f"GET http://yes.test:{upstream}/ HTTP/1.1\r\n\r\n".encode()
    assert p.ask(request).startswith(b"HTTP/1.0 200")
    assert p.ask(request).startswith(b"HTTP/1.0 200")  # asked once: the yes holds
    assert p.ask(b"GET http://no.test/ HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403 blocked")
    assert asked == [("yes.test", upstream, "call-7"), ("no.test", 80, "call-7")]
    assert wait_records(p, 3)[0].allowed_by == "user:session"
    once = f"GET http://once.test:{upstream}/ HTTP/1.1\r\n\r\n".encode()
    p.net.pins["once.test"] = ["127.0.0.1"]
    assert p.ask(once).startswith(b"HTTP/1.0 200") and p.ask(once).startswith(b"HTTP/1.0 200")
    assert asked[2:] == [("once.test", upstream, "call-7")] * 2  # a plain yes: that one only


def test_a_host_that_is_no_name_is_refused_before_any_rule(tmp_path: Path, upstream: int,
                                                           started: list[EgressProxy]):
    """Red-team round 15: `127.0.0.1\\0.example.org` matched `*.example.org`, and the
    resolver, which stops at the NUL, gave 127.0.0.1; a wildcard rule opened anything."""
    p = run(make_proxy(tmp_path, f"*.example.org:{upstream}", f"127.0.0.1/32:{upstream}"),
            started)
    for target in (f"127.0.0.1\0.example.org:{upstream}", f"*.example.org:{upstream}",
                   f"{'a' * 64}.example.org:{upstream}", f"b\xe4d.example.org:{upstream}"):
        answer = p.ask(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 400"), (target, answer)
    assert p.net.connected == []
    assert all(r.decision == "denied" and "bad request" in r.reason
               for r in wait_records(p, 4)), p.records


def test_a_yes_at_the_prompt_is_never_a_wildcard_or_a_range():
    from executor.network.egress import granted

    rule = granted("pkg.example.org", 443, "user:session")
    assert rule.host == "pkg.example.org" and rule.port == 443
    for bad in ("*.com", "*.0.0.1", "a\0b", "10.0.0.0/8"):
        with pytest.raises(ValueError):
            granted(bad, 443, "user")


def test_ipv6_that_embeds_ipv4_is_never_public():
    import ipaddress

    from executor.network.rules import is_public

    for text in ("64:ff9b::a9fe:a9fe", "64:ff9b::a00:5", "2002:a00:5::1", "::a00:5",
                 "::ffff:0:a00:5", "::ffff:127.0.0.1"):
        assert not is_public(ipaddress.ip_address(text)), text
    assert is_public(ipaddress.ip_address("2606:4700::1111"))


def test_numbers_the_resolver_reads_as_an_address_are_no_names():
    from executor.network.rules import valid_host

    for text in ("0x7f.0.0.1", "0177.0.0.1", "2130706433", "127.1"):
        assert not valid_host(text), text
    assert valid_host("127.0.0.1") and valid_host("pkg.example.org")


def test_a_yes_for_a_non_public_literal_does_not_reach_it(tmp_path: Path):
    """Red-team round 15: `a` for `::ffff:7f00:1` made a /128 rule and reached the host's
    loopback; the prompt never said so. A yes names a host; a range only the person's own."""
    import ipaddress

    from executor.network.egress import granted
    from executor.network.rules import EgressRules

    asked = granted("::ffff:7f00:1", 80, "user:session")
    verdict = EgressRules([]).check_address(ipaddress.ip_address("::ffff:7f00:1"), 80, asked)
    assert not verdict.allowed and "loopback" in verdict.reason


@pytest.fixture
def raw() -> Iterator[ToTheEnd]:
    server = ToTheEnd()
    yield server
    server.close()


def raw_proxy(tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]) -> Proxy:
    return run(make_proxy(tmp_path, f"api.test:{raw.port}", f"127.0.0.1/32:{raw.port}",
                          pins={"api.test": ["127.0.0.1"]}), started)


def exchange(p: Proxy, *parts: bytes) -> bytes:
    """Sends `parts` (waiting for a `100 Continue` between them), ends its side, reads all."""
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(p.path))
        for i, part in enumerate(parts):
            if i:
                assert client.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            client.sendall(part)
        client.shutdown(socket.SHUT_WR)
        return _read_all(client)


def test_a_pipelined_request_never_reaches_the_upstream_and_is_audited_refused(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]):
    """Red-team round 18: after the first request, the upstream got `GET /second` with
    `Host: not-allowed.example`; the audit had one allowed GET."""
    p = raw_proxy(tmp_path, raw, started)
    first = (f"GET http://api.test:{raw.port}/first HTTP/1.1\r\nHost: api.test:{raw.port}\r\n"
             "Content-Length: 0\r\n\r\n").encode()
    second = b"GET /second HTTP/1.1\r\nHost: not-allowed.example\r\nContent-Length: 3\r\n\r\nabc"
    third = f"GET /third HTTP/1.1\nHost: api.test:{raw.port}\n\n".encode()  # bare LFs
    answer = exchange(p, first + second + third)
    assert answer.endswith(b"\r\n\r\nok")
    assert raw.wait(1) == [(f"GET /first HTTP/1.1\r\nHost: api.test:{raw.port}\r\n"
                            "Content-Length: 0\r\nConnection: close\r\n\r\n").encode()]
    records = wait_records(p, 3)
    assert [(r.method, r.host, r.port, r.decision) for r in records] == [
        ("GET", "not-allowed.example", 80, "denied"), ("GET", "api.test", raw.port, "denied"),
        ("GET", "api.test", raw.port, "allowed")]
    assert "not relayed" in records[0].reason and "another host" in records[0].reason
    assert "not relayed" in records[1].reason and "another host" not in records[1].reason
    assert records[2].bytes_up == len(raw.got[0]) and records[2].call_id == "call-7"
    assert records[0].call_id == "call-7"


def test_a_chunked_body_goes_up_in_chunks_of_ours_and_nothing_after_it(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]):
    p = raw_proxy(tmp_path, raw, started)
    smuggled = b"GET /admin HTTP/1.1\r\nHost: other.example\r\n\r\n"
    request = (f"POST http://api.test:{raw.port}/up HTTP/1.1\r\nHost: x\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode()
    body = b"3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
    assert exchange(p, request + body + smuggled).endswith(b"ok")
    assert raw.wait(1) == [(f"POST /up HTTP/1.1\r\nHost: api.test:{raw.port}\r\n"
                            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                            "3\r\nabc\r\na\r\n0123456789\r\n0\r\n\r\n").encode()]
    refused, allowed = wait_records(p, 2)
    assert (refused.host, refused.decision, allowed.decision) == (
        "other.example", "denied", "allowed")


def test_expect_100_continue_passes_and_the_body_is_its_content_length(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]):
    p = raw_proxy(tmp_path, raw, started)
    head = (f"PUT http://api.test:{raw.port}/f HTTP/1.1\r\nHost: api.test\r\n"
            "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n").encode()
    answer = exchange(p, head, b"hello" + b"GET /x HTTP/1.1\r\nHost: y\r\n\r\n")
    assert answer.endswith(b"ok")
    assert raw.wait(1) == [(f"PUT /f HTTP/1.1\r\nHost: api.test:{raw.port}\r\n"
                            "Expect: 100-continue\r\nContent-Length: 5\r\nConnection: close"
                            "\r\n\r\nhello").encode()]
    assert [r.host for r in wait_records(p, 2)] == ["y", "api.test"]


@pytest.mark.parametrize("headers", [
    "Content-Length: 3\r\nTransfer-Encoding: chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    "Content-Length: 3\r\nContent-Length: 4",
    "Content-Length: +3",
    "X-A: a\nContent-Length: 40",  # a bare LF: a lenient server sees another header
    "X-A: a\r\n Content-Length: 40",  # folded
    "Content-Length : 40",
    "X-A: \x01",
    "no colon",
])
def test_a_head_a_lenient_server_could_frame_otherwise_is_refused_before_connecting(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy], headers: str):
    p = raw_proxy(tmp_path, raw, started)
    answer = p.ask(f"POST http://api.test:{raw.port}/ HTTP/1.1\r\nHost: api.test\r\n{headers}"
                   "\r\n\r\nabc".encode("latin-1"))
    assert answer.startswith(b"HTTP/1.1 400 bad request: "), answer
    assert p.net.connected == [] and raw.got == []
    (record,) = wait_records(p, 1)
    assert record.decision == "denied" and record.reason.startswith("bad request")


def test_chunked_is_http_1_1_only(tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]):
    p = raw_proxy(tmp_path, raw, started)
    assert p.ask(f"POST http://api.test:{raw.port}/ HTTP/1.0\r\nTransfer-Encoding: chunked"
                 "\r\n\r\n0\r\n\r\n".encode()).startswith(b"HTTP/1.1 400")
    assert p.net.connected == []


def test_a_broken_chunked_body_stops_what_goes_up(tmp_path: Path, raw: ToTheEnd,
                                                  started: list[EgressProxy]):
    p = raw_proxy(tmp_path, raw, started)
    exchange(p, f"POST http://api.test:{raw.port}/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
             "chunked\r\n\r\n2\r\nab\r\n3\nxyz\r\n0\r\n\r\n".encode())
    (got,) = raw.wait(1)  # what went up before the break (here: nothing), never past it
    assert (f"POST / HTTP/1.1\r\nHost: api.test:{raw.port}\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n2\r\nab\r\n").encode().startswith(got)
    (record,) = wait_records(p, 1)
    assert record.reason == "ended: a bare CR or LF in the chunked body"


def client_hello(name: str | None) -> bytes:
    """The first record Python's own TLS client sends for `name` (no network: memory BIOs)."""
    import contextlib
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = name is not None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def tunnel(p: Proxy, port: int, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(p.path))
        client.sendall(f"CONNECT api.test:{port} HTTP/1.1\r\n\r\n".encode() + data)
        client.shutdown(socket.SHUT_WR)
        return _read_all(client)


def test_a_client_hello_for_the_connect_host_goes_up_untouched(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy]):
    p = raw_proxy(tmp_path, raw, started)
    hello = client_hello("api.test")
    assert tunnel(p, raw.port, hello).endswith(b"ok")
    assert raw.wait(1) == [hello]
    (record,) = wait_records(p, 1)
    assert (record.decision, record.bytes_up) == ("allowed", len(hello))


@pytest.mark.parametrize("name", ["other.example", "API.test.evil"])
def test_a_client_hello_naming_another_host_is_refused_and_never_sent(
        tmp_path: Path, raw: ToTheEnd, started: list[EgressProxy], name: str):
    """Red-team round 18: a front end serving many names on one address routes by SNI."""
    p = raw_proxy(tmp_path, raw, started)
    assert tunnel(p, raw.port, client_hello(name)) == b"HTTP/1.1 200 Connection established" \
        b"\r\n\r\n"
    assert raw.wait(1) == [b""]  # connected, then closed: not one byte of the hello
    (record,) = wait_records(p, 1)
    assert (record.decision, record.bytes_up) == ("denied", 0)
    assert record.reason == f"the TLS ClientHello names {name.lower()}, not api.test (the " \
        "host the rules checked)"


def test_the_server_name_is_read_from_a_whole_client_hello_only():
    from executor.network.tls import record_size, server_name

    hello = client_hello("pkg.example.org")
    assert record_size(hello) == len(hello) and server_name(hello) == "pkg.example.org"
    assert server_name(client_hello(None)) is None
    assert record_size(b"SSH-2.0-x\r\n") is None
    with pytest.raises(ValueError):
        server_name(hello[:-40])
