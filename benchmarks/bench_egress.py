"""What the egress path costs: the same local file fetched directly and through the proxy.

    python benchmarks/bench_egress.py [--mib 64] [--setups 50] [--rounds 3]

An HTTP server on 127.0.0.1 serves a file of `--mib` MiB and a 2-byte one. One client program
(raw sockets, plain HTTP: the bytes are what is measured, not TLS) fetches them

1. on the host, directly from the server;
2. on the host, through the proxy's Unix socket (the proxy's own cost: checks, resolve,
   relay);
3. inside a real sandbox, through HTTP_PROXY: its forwarder, the socket, the proxy (what a
   `pip install` in the sandbox pays);

and prints side by side, in one run: MiB/s of the big file (median of `--rounds`) and the
median set-up of a connection (request to the last byte of the 2-byte file, `--setups` times).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executor.config import DEFAULT_IMAGE
from executor.network.egress import AllowedHost, EgressConfig, EgressHooks
from executor.network.proxy import EgressProxy, Limits, pinned_resolver
from executor.sandbox.docker import DockerSandbox, SandboxConfig

# Runs the same on the host and in the sandbox (stdlib, python3 >= 3.9). argv: a JSON object
# {"via": [family, address], "host": name, "port": n, "proxied": bool, "mib": n, ...}.
CLIENT = r"""
import json, socket, statistics, sys, time
o = json.loads(sys.argv[1])
def fetch(path):
    family = socket.AF_UNIX if o["via"][0] == "unix" else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.connect(o["via"][1] if family == socket.AF_UNIX else tuple(o["via"][1]))
    target = "http://%s:%d%s" % (o["host"], o["port"], path) if o["proxied"] else path
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (target, o["host"])).encode())
    n = 0
    while True:
        data = s.recv(1 << 20)
        if not data:
            break
        n += len(data)
    s.close()
    return n
setups = []
for _ in range(o["setups"]):
    t = time.perf_counter(); fetch("/small"); setups.append(time.perf_counter() - t)
rates = []
for _ in range(o["rounds"]):
    t = time.perf_counter(); n = fetch("/big"); rates.append(n / (time.perf_counter() - t))
    assert n > o["mib"] << 20, n
print(json.dumps({"setup_ms": statistics.median(setups) * 1000,
                  "mib_s": statistics.median(rates) / (1 << 20)}))
"""


def serve(mib: int) -> ThreadingHTTPServer:
    big = os.urandom(1 << 20) * mib

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = big if self.path == "/big" else b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def host_run(options: dict[str, Any]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-I", "-c", CLIENT, json.dumps(options)],
                          capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--setups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image", default=os.environ.get("SANDBOX_AGENT_TEST_IMAGE",
                                                          DEFAULT_IMAGE))
    args = parser.parse_args()
    server = serve(args.mib)
    port = server.server_address[1]
    common = {"host": "bench.test", "port": port, "mib": args.mib, "setups": args.setups,
              "rounds": args.rounds}
    rows = {"host, direct": host_run({**common, "via": ["inet", ["127.0.0.1", port]],
                                      "proxied": False})}
    egress = EgressConfig(allow=[AllowedHost(text=f"bench.test:{port}", source="bench"),
                                 AllowedHost(text=f"127.0.0.1/32:{port}", source="bench")],
                          resolve={"bench.test": "127.0.0.1"})
    with tempfile.TemporaryDirectory() as scratch:
        sock = Path(scratch) / "proxy.sock"
        with EgressProxy(egress.rules(), sock, resolver=pinned_resolver(egress.resolve),
                         limits=Limits(max_connections=10**6)):
            rows["host, through the proxy's socket"] = host_run(
                {**common, "via": ["unix", str(sock)], "proxied": True})
        root = Path(scratch) / "proj"
        root.mkdir()
        config = SandboxConfig(root=root, session_id="bench-egress", image=args.image,
                               egress=egress, tool_timeout=600)
        with DockerSandbox(config, egress_hooks=EgressHooks()) as box:
            inside = {**common, "via": ["inet", ["127.0.0.1", egress.port]], "proxied": True}
            command = f"python3 -I -c '{CLIENT}' '{json.dumps(inside)}'"
            result = box.call("run_shell_command", {"command": command, "timeout_seconds": 600})
            lines = [line for line in result.output.splitlines() if line.startswith("{")]
            assert result.ok and lines, result.output
            rows["sandbox, forwarder + proxy"] = json.loads(lines[-1])
    server.shutdown()
    print(f"egress: a {args.mib} MiB file and a 2-byte one from 127.0.0.1 (medians)")
    print(f"{'path':<36}{'MiB/s':>10}{'set-up ms':>12}")
    for name, row in rows.items():
        print(f"{name:<36}{row['mib_s']:>10.0f}{row['setup_ms']:>12.2f}")


if __name__ == "__main__":
    main()
