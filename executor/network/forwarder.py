"""The forwarder: a small container in the sandbox's network namespace, the sandbox's only
way to the host-side proxy.

The sandbox has no route, no DNS and no unix sockets (its seccomp profile refuses them). A
container started with `network_mode=container:<sandbox>` shares its namespace, network
disabled or not, so this one listens on the sandbox's 127.0.0.1:PORT (`HTTP(S)_PROXY` points
there) and relays each connection, byte for byte, to the proxy's Unix socket, which is
bind-mounted into it alone. It is hardened like the sandbox (no capabilities, read-only,
no-new-privileges, pid and memory limits) with a seccomp profile that differs in one rule:
AF_UNIX is allowed. It lives in its own pid namespace, so no process of the sandbox can signal
or trace it; it starts before any command runs, so none can take its port first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from executor.errors import SandboxError

INSIDE_DIR = "/run/sandbox-agent-egress"
"""Where the proxy's socket directory is mounted in the forwarder."""
SOCKET_NAME = "proxy.sock"
READY_TIMEOUT = 15.0
"""Seconds the forwarder may take to listen and say so."""
# Stdlib only, any python3 >= 3.9. It binds first, then says so through the proxy's socket
# (its token: the proxy knows it started this one), then relays; a thread per connection, which
# the container's pids limit and the proxy's open-connection limit bound. Every few seconds it
# checks that the proxy still answers, and exits once it does not: a controller killed with
# SIGKILL leaves no forwarder running for long (`gc` removes the container).
PROGRAM = """\
import os, socket, sys, threading, time
port, path, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
def unix():
    end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    end.connect(path)
    return end
hello = unix()
hello.sendall(b"SANDBOX-AGENT-FORWARDER " + token.encode() + b"\\r\\n\\r\\n")
hello.close()
def watch():
    while True:
        time.sleep(3)
        try:
            unix().close()
        except OSError:
            os._exit(0)
threading.Thread(target=watch, daemon=True).start()
def pump(source, sink):
    try:
        while True:
            data = source.recv(262144)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(client):
    try:
        upstream = unix()
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()
while True:
    client, _ = listener.accept()
    try:
        threading.Thread(target=serve, args=(client,), daemon=True).start()
    except RuntimeError:
        client.close()
"""


def forwarder_name(sandbox_name: str) -> str:
    """The forwarder container's name, beside its sandbox's."""
    return f"{sandbox_name}-egress"


def forwarder_options(*, sandbox_id: str, sandbox_name: str, image: str, socket_dir: Path,
                      port: int, token: str, labels: dict[str, str],
                      security_opt: list[str], ulimits: list[Any]) -> dict[str, Any]:
    """Keyword arguments for `containers.create` of the forwarder of container `sandbox_id`."""
    from docker.types import LogConfig, Mount

    return {
        "image": image, "name": forwarder_name(sandbox_name),
        "command": ["python3", "-I", "-S", "-c", PROGRAM, str(port),
                    f"{INSIDE_DIR}/{SOCKET_NAME}", token],
        "network_mode": f"container:{sandbox_id}", "user": f"{os.getuid()}:{os.getgid()}",
        "mounts": [Mount(INSIDE_DIR, str(socket_dir), type="bind", read_only=True)],
        "read_only": True, "cap_drop": ["ALL"], "security_opt": security_opt,
        "pids_limit": 96, "mem_limit": 64 * 1024**2, "memswap_limit": 64 * 1024**2,
        "nano_cpus": 500_000_000, "ipc_mode": "private", "ulimits": ulimits,
        "environment": {"PYTHONDONTWRITEBYTECODE": "1"}, "working_dir": "/",
        "log_config": LogConfig(type="json-file", config={"max-size": "64k"}),
        "labels": labels,
    }


class Forwarder:
    """One sandbox container's forwarder: started, checked to listen, removed."""

    def __init__(self, client: Any, options: dict[str, Any]) -> None:
        self._client, self._options = client, options
        self._container: Any = None

    @staticmethod
    def token() -> str:
        """A fresh token for one forwarder's hello."""
        return secrets.token_hex(16)

    def start(self, ready: threading.Event) -> None:
        """Create and start it (a stale one of the same name goes first); wait until `ready`."""
        from executor.engine_errors import docker_errors

        self.remove_stale()
        with docker_errors("starting the egress forwarder"):
            self._container = self._client.containers.create(**self._options)
            self._container.start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready.wait(0.05):
            if time.monotonic() > deadline or self._exited():
                logs = self._logs()
                self.stop()
                raise SandboxError(f"the egress forwarder did not start: {logs or 'no output'}",
                                   fix="run `sandbox-agent doctor --security` to check egress")

    def remove_stale(self) -> None:
        """Remove a forwarder a dead or detached run left under this name."""
        import docker.errors

        from executor.engine_errors import docker_errors

        with docker_errors("removing an old egress forwarder"), \
                contextlib.suppress(docker.errors.NotFound):
            self._client.containers.get(self._options["name"]).remove(force=True)

    def stop(self) -> None:
        """Remove it; safe to call twice."""
        import docker.errors

        from executor.engine_errors import docker_errors

        if self._container is None:
            return
        container, self._container = self._container, None
        with docker_errors("removing the egress forwarder"), \
                contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)

    def _exited(self) -> bool:
        try:
            self._container.reload()
        except Exception:  # the engine's error: the wait ends, the logs say why
            return True
        return bool(self._container.status in ("exited", "dead"))

    def _logs(self) -> str:
        try:
            text = self._container.logs(tail=5).decode("utf-8", "replace")
        except Exception:  # the engine's error: there is nothing more to say
            return ""
        from executor.text import inert_line

        return inert_line(" / ".join(line for line in text.splitlines() if line)[-300:])
