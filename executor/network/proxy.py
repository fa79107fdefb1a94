"""The host-side egress proxy: the only way out of a sandbox, on a Unix socket of ours.

It speaks the two things proxy-aware clients send (pip, npm, git, curl, urllib): `CONNECT
host:port` (a ClientHello must name that host; TLS then passes untouched) and plain HTTP in
absolute form (`GET http://host/path`: one request per connection, rebuilt by
executor/network/http1.py; a request pipelined after it is never relayed, and is audited as
refused). For each it asks the rules (executor/network/rules.py), resolves the name itself,
checks every address it got and connects to the one it checked, never to a name, so a second
lookup cannot rebind it. A destination the rules refuse is never resolved or connected to: the
client gets `403 blocked: ...` with the text the model needs. Each connection ends in one
`Connection` record (the run puts it in the audit chain), allowed or not.

Limits per session: open connections, connections in all, bytes in all (both ways), the
seconds a connection may stay idle and may last.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from executor.network import http1, tls
from executor.network.http1 import HEAD_MAX
from executor.network.rules import (
    Address,
    EgressRules,
    Rule,
    Verdict,
    address_of,
    valid_host,
)

FORWARDER_HELLO = b"SANDBOX-AGENT-FORWARDER "
"""How the forwarder says it listens (then its token): the first bytes of its first connection."""

Resolver = Callable[[str, int], list[str]]
"""Addresses of a name, in the order to try them."""
Connector = Callable[[str, int, float], socket.socket]
"""Opens a TCP connection to an address (never a name) within a timeout."""
Asker = Callable[[str, int, str | None], tuple[Rule, bool] | None]
"""Asks the person about a destination no rule allows (host, port, tool call id): the rule
their yes makes and whether it holds for the session, or None."""


@dataclass(frozen=True)
class Limits:
    """What one session's connections may use."""

    max_open: int = 32
    """Connections open at once."""
    max_connections: int = 2000
    """Connections in the whole session."""
    max_bytes: int = 4 * 1024**3
    """Bytes both ways over the whole session."""
    idle_timeout: float = 120.0
    """Seconds a connection may pass no byte."""
    max_duration: float = 1800.0
    """Seconds one connection may last."""
    connect_timeout: float = 15.0
    """Seconds to connect to the upstream."""


@dataclass
class Connection:
    """One connection through the proxy, as the audit records it."""

    host: str
    port: int
    method: str
    decision: str = "denied"
    """allowed, denied, or failed (allowed, but the upstream could not be reached)."""
    address: str | None = None
    rule: str | None = None
    allowed_by: str | None = None
    address_rule: str | None = None
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    duration_ms: int = 0
    call_id: str | None = None
    started: float = field(default_factory=time.monotonic)

    def record(self) -> dict[str, object]:
        """The fields of its audit record."""
        return {"host": self.host, "port": self.port, "method": self.method,
                "decision": self.decision, "address": self.address, "rule": self.rule,
                "allowed_by": self.allowed_by, "address_rule": self.address_rule,
                "reason": self.reason, "bytes_up": self.bytes_up,
                "bytes_down": self.bytes_down, "duration_ms": self.duration_ms,
                "call_id": self.call_id}


def blocked_text(host: str) -> str:
    """What a client (and so the model) is told about a host no rule allows."""
    return f"blocked: {host} is not allowed; the person can allow it with --allow-host {host}"


def system_resolver(host: str, port: int) -> list[str]:
    """The host's own resolver (addresses in its order, duplicates dropped)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def pinned_resolver(pins: dict[str, str], fallback: Resolver = system_resolver) -> Resolver:
    """`pins` (name -> address, the person's, like curl's --resolve) before `fallback`."""
    lowered = {name.lower().rstrip("."): address for name, address in pins.items()}

    def resolve(host: str, port: int) -> list[str]:
        pinned = lowered.get(host.lower().rstrip("."))
        return [pinned] if pinned else fallback(host, port)
    return resolve


def tcp_connector(address: str, port: int, timeout: float) -> socket.socket:
    """A plain TCP connection."""
    return socket.create_connection((address, port), timeout=timeout)


class EgressProxy:
    """Serves one session's sandbox on `socket_path` until stopped."""

    def __init__(self, rules: EgressRules, socket_path: Path, *,
                 on_connection: Callable[[Connection], None] = lambda c: None,
                 resolver: Resolver = system_resolver, connector: Connector = tcp_connector,
                 limits: Limits = Limits(), ask: Asker | None = None,
                 current_call: Callable[[], str | None] = lambda: None) -> None:
        self.rules, self.socket_path, self.limits = rules, socket_path, limits
        self._on_connection, self._resolve, self._connect = on_connection, resolver, connector
        self._ask = ask
        self._current_call = current_call
        """The tool call running now: each connection is recorded under it."""
        self.forwarders: dict[str, threading.Event] = {}
        """Tokens of forwarders to wait for, set once each said it listens."""
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._open = 0
        self._count = 0
        self._bytes = 0
        self._granted: list[Rule] = []
        self._closing = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Listen on the socket (only its owner may connect) and serve on a thread."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            server.bind(str(self.socket_path))
        finally:
            os.umask(old)
        server.listen(64)
        self._server = server
        self._thread = threading.Thread(target=self._serve, name="egress-proxy", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; connections still open end with their own limits."""
        self._closing = True
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)

    def expect_forwarder(self, token: str) -> threading.Event:
        """An event set when the forwarder started with `token` says it listens."""
        event = self.forwarders[token] = threading.Event()
        return event

    # -- serving -----------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._closing and self._server is not None:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), name="egress-conn",
                             daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        with client:
            client.settimeout(self.limits.idle_timeout)
            try:
                head, rest = _read_head(client)
            except (OSError, ValueError):
                return
            if head.startswith(FORWARDER_HELLO):
                token = head[len(FORWARDER_HELLO):].strip().decode("ascii", "replace")
                event = self.forwarders.get(token)
                if event is not None:
                    event.set()
                    return
            try:
                self._request(client, head, rest)
            except Exception as exc:  # what a client sends never ends in a traceback
                _reply(client, 400, f"bad request ({type(exc).__name__})")

    def _request(self, client: socket.socket, head: bytes, rest: bytes) -> None:
        try:
            method, host, port, request = _parse(head)
        except ValueError as exc:
            _reply(client, 400, f"bad request: {exc}")
            refused = Connection(host="", port=0, method="?", call_id=self._current_call(),
                                 reason=f"bad request: {exc}")
            self._on_connection(refused)
            return
        conn = Connection(host=host, port=port, method=method, call_id=self._current_call())
        try:
            upstream = self._open_upstream(conn, client)
            if upstream is not None:
                self._relay(conn, client, upstream, request, rest)
        finally:
            conn.duration_ms = round((time.monotonic() - conn.started) * 1000)
            self._on_connection(conn)

    def _open_upstream(self, conn: Connection, client: socket.socket) -> socket.socket | None:
        """The upstream connection for an allowed destination, or None (the client was told)."""
        refusal = self._admit()
        if refusal:
            conn.reason = refusal
            _reply(client, 503, refusal)
            return None
        try:
            verdict = self._decide(conn)
            if not verdict.allowed:
                conn.reason = verdict.reason
                _reply(client, 403, verdict.reason)
                return None
            assert verdict.rule is not None and conn.address is not None
            conn.rule, conn.allowed_by = verdict.rule.text, verdict.rule.source
            if verdict.address_rule is not None:
                conn.address_rule = verdict.address_rule.text
            try:
                upstream = self._connect(conn.address, conn.port, self.limits.connect_timeout)
            except OSError as exc:
                conn.decision, conn.reason = "failed", f"connecting to {conn.address}: {exc}"
                _reply(client, 502, f"{conn.host} could not be reached: {exc.strerror or exc}")
                return None
            conn.decision = "allowed"
            return upstream
        finally:
            if conn.decision != "allowed":
                self._release()

    def _decide(self, conn: Connection) -> Verdict:
        """The rule that allows `conn` and the address to use (set on `conn`); else why not."""
        rule = self.rules.rule_for(conn.host, conn.port) or self._granted_rule(conn)
        if rule is None and self._ask is not None:
            answer = self._ask(conn.host, conn.port, conn.call_id)
            rule = answer[0] if answer else None
            if answer is not None and answer[1]:
                with self._lock:
                    self._granted.append(answer[0])
        if rule is None:
            return Verdict(False, None, blocked_text(conn.host))
        literal = address_of(conn.host)
        try:
            addresses = [conn.host.strip("[]")] if literal else self._resolve(conn.host, conn.port)
        except OSError as exc:
            return Verdict(False, rule, f"{conn.host} does not resolve: {exc}")
        return self._pick(conn, rule, addresses)

    def _pick(self, conn: Connection, rule: Rule, addresses: list[str]) -> Verdict:
        """The first address the rules allow (set on `conn`); else the first refusal."""
        refusal = Verdict(False, rule, f"{conn.host} has no address")
        for text in addresses:
            address: Address | None = address_of(text)
            if address is None:
                continue
            # a yes at the prompt allows a host, never a non-public address behind it: those
            # only by an exact range the person named (--allow-host, the policy)
            verdict = self.rules.check_address(address, conn.port, rule)
            if verdict.allowed:
                conn.address = str(address)
                return verdict
            if refusal.reason.endswith("has no address"):
                conn.address = str(address)
                refusal = Verdict(False, rule, f"{conn.host} is refused: {verdict.reason}")
        return refusal

    def _granted_rule(self, conn: Connection) -> Rule | None:
        with self._lock:
            return EgressRules(self._granted).rule_for(conn.host, conn.port)

    def _admit(self) -> str:
        """Take one open connection from the session's limits; why not, when they are spent."""
        with self._lock:
            if self._open >= self.limits.max_open:
                return f"too many connections open at once (at most {self.limits.max_open})"
            if self._count >= self.limits.max_connections:
                return f"this session made its {self.limits.max_connections} connections"
            if self._bytes >= self.limits.max_bytes:
                return f"this session moved its {self.limits.max_bytes} bytes"
            self._open += 1
            self._count += 1
        return ""

    def _release(self) -> None:
        with self._lock:
            self._open -= 1

    # -- relaying ----------------------------------------------------------------------------

    def _relay(self, conn: Connection, client: socket.socket, upstream: socket.socket,
               request: http1.Request | None, rest: bytes) -> None:
        """CONNECT: say yes, then pass bytes both ways; HTTP: the request rebuilt, its body
        re-framed, then only the answer (nothing the client sends after it goes up)."""
        head, up = b"", _SniCheck(conn).feed
        if request is not None:
            head = request.head(_named(conn.host, conn.port))
            up = http1.Relay(request, lambda later: self._pipelined(conn, later)).feed
        try:
            with upstream:
                if request is None:
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._send_up(conn, upstream, head + up(rest))
                self._pump(conn, client, upstream, up)
        except OSError as exc:
            conn.reason = f"ended: {exc.strerror or exc}"
        except ValueError as exc:  # a broken chunked body, a ClientHello for another host
            conn.reason = conn.reason or f"ended: {exc}"
        finally:
            self._release()

    def _send_up(self, conn: Connection, upstream: socket.socket, data: bytes) -> None:
        if data:
            upstream.sendall(data)
            conn.bytes_up += len(data)
            with self._lock:
                self._bytes += len(data)

    def _pipelined(self, first: Connection, head: bytes) -> None:
        """A request after the first on one connection: never relayed, audited as refused."""
        method, authority = http1.named_in(head)
        try:
            host, port = _host_port(authority, 80)
        except ValueError:
            host, port = "", 0
        other = "" if (host, port) == (first.host, first.port) else \
            f", and it names another host than {first.host}:{first.port}"
        self._on_connection(Connection(
            host=host, port=port, method=method, call_id=first.call_id,
            reason=f"a second request on one connection is not relayed (one request per "
                   f"connection: open another){other}"))

    def _pump(self, conn: Connection, client: socket.socket, upstream: socket.socket,
              up: Callable[[bytes], bytes]) -> None:
        """Bytes both ways until both ends are done; the client's go through `up` first."""
        ends = {client: upstream, upstream: client}
        open_ends = [client, upstream]
        deadline = conn.started + self.limits.max_duration
        while open_ends:
            left = deadline - time.monotonic()
            if left <= 0:
                conn.reason = f"ended after {self.limits.max_duration:.0f} s (the limit)"
                return
            ready, _, _ = select.select(open_ends, [], [], min(left, self.limits.idle_timeout))
            if not ready:
                conn.reason = f"ended: idle for {self.limits.idle_timeout:.0f} s"
                return
            for end in ready:
                data = end.recv(262144)
                if not data:
                    open_ends.remove(end)
                    with contextlib.suppress(OSError):
                        ends[end].shutdown(socket.SHUT_WR)
                    continue
                if end is client:
                    data = up(data)
                    conn.bytes_up += len(data)
                else:
                    conn.bytes_down += len(data)
                if data:
                    ends[end].sendall(data)
                with self._lock:  # counted as it passes: parallel tunnels share one budget
                    self._bytes += len(data)
                if self._over_budget(conn):
                    conn.reason = f"ended: the session's {self.limits.max_bytes} bytes are spent"
                    return

    def _over_budget(self, conn: Connection) -> bool:
        with self._lock:
            return self._bytes > self.limits.max_bytes


class _SniCheck:
    """A tunnel's client bytes: held until its first TLS record is whole, refused when that
    ClientHello names another host than the CONNECT line (no decryption), then untouched.
    Bytes that are no TLS handshake go on at once (another protocol; it may wait for the
    server to speak first)."""

    def __init__(self, conn: Connection) -> None:
        self._conn, self._held, self._decided = conn, b"", False

    def feed(self, data: bytes) -> bytes:
        if self._decided:
            return data
        self._held += data
        if self._held[:1] != b"\x16" or self._held[1:2] not in (b"", b"\x03"):
            return self._pass()
        size = tls.record_size(self._held)
        if size is not None and size > tls.RECORD_MAX:
            return self._pass()  # no TLS server reads it as a ClientHello: it refuses it
        if size is None or len(self._held) < size:
            return b""
        try:
            name = tls.server_name(self._held[:size])
        except ValueError as exc:
            return self._refuse(str(exc))
        if name is not None and name != self._conn.host.strip("[]").rstrip("."):
            return self._refuse(f"the TLS ClientHello names {name}, not {self._conn.host} "
                                "(the host the rules checked)")
        return self._pass()

    def _pass(self) -> bytes:
        held, self._held, self._decided = self._held, b"", True
        return held

    def _refuse(self, reason: str) -> bytes:
        self._conn.decision, self._conn.reason = "denied", reason
        raise ValueError(reason)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request head (through its blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            raise ValueError("closed before a whole request head")
        data += chunk
        if len(data) > HEAD_MAX and b"\r\n\r\n" not in data[:HEAD_MAX]:
            raise ValueError("request head too long")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _parse(head: bytes) -> tuple[str, str, int, http1.Request | None]:
    """Method, host, port, and for plain HTTP the request (its head and body go upstream
    rebuilt by http1); None for CONNECT."""
    parts = head.decode("latin-1").split("\r\n", 1)[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1 request line")
    if parts[0] == "CONNECT":
        host, port = _host_port(parts[1], None)
        return parts[0], host, port, None
    request = http1.parse_head(head)
    host, port = _host_port(request.host_port, 80)
    return request.method, host, port, request


def _named(host: str, port: int) -> str:
    """The Host header upstream: the host the rules checked, never another."""
    named = f"[{host}]" if ":" in host else host
    return named + (f":{port}" if port != 80 else "")


def _host_port(text: str, default: int | None) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not port_text and default is None:
        raise ValueError(f"CONNECT names no port: {text!r}")
    if port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536):
        raise ValueError(f"not a port: {port_text!r}")
    if not valid_host(host):  # before any rule: getaddrinfo stops at a NUL, rules do not
        raise ValueError(f"not a host name or address: {host!r}")
    return host.lower(), int(port_text) if port_text else int(default or 0)


_REASONS = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}


def _reply(client: socket.socket, status: int, text: str) -> None:
    """An error answer; the text is also the reason phrase (clients show that for CONNECT)."""
    phrase = " ".join(text.split())[:300] or _REASONS[status]
    body = (text + "\n").encode("utf-8", "replace")
    head = (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            "X-Sandbox-Agent: egress\r\n\r\n")
    with contextlib.suppress(OSError):
        client.sendall(head.encode("latin-1", "replace") + body)
