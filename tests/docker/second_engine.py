"""A second Docker engine for tests, started and stopped by the test itself.

`dockerd --host unix://SOCK --data-root D --exec-root E --pidfile P --bridge=none
--iptables=false` runs beside the machine's engine. It is started in its own mount namespace
where the directories given as `hidden` (the tests' temporary dirs, where every project
lives) are covered by an empty tmpfs: like an engine on another machine, it cannot see the
projects, so only what goes through its API reaches it. Paths are short (a unix socket path
is limited to 108 bytes); the engine is stopped by its pid, and every container it holds is
removed first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
# Runs in the new mount namespace: hide the given dir, then become dockerd.
_HIDE_THEN_RUN = 'mount -t tmpfs -o size=1m,mode=0755 sandbox-agent-hidden "$1" && shift && exec "$@"'


class SecondEngine:
    """A dockerd of our own on a unix socket (or, with `tls`, on 127.0.0.1 over TCP with
    mutual TLS, certificates made here), blind to `hidden`."""

    def __init__(self, hidden: Path, *, tls: bool = False) -> None:
        self.hidden = hidden
        self.base = Path(tempfile.mkdtemp(prefix="sa-", dir="/tmp"))
        self.socket = self.base / "d.sock"
        self.tls = tls
        self.url = f"tcp://127.0.0.1:{_free_port()}" if tls else f"unix://{self.socket}"
        self.certs = self.base / "client"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.base / "dockerd.log"

    @property
    def env(self) -> dict[str, str]:
        """The environment a client needs to reach this engine."""
        if not self.tls:
            return {"DOCKER_HOST": self.url}
        return {"DOCKER_HOST": self.url, "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": str(self.certs)}

    def __enter__(self) -> SecondEngine:
        try:
            self.start()
        except BaseException:
            self.stop()  # a dockerd that never answered is stopped all the same
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start dockerd and wait until it answers."""
        config = self.base / "daemon.json"
        config.write_text("{}\n")  # not the machine's daemon.json (it may name hosts)
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HIDE_THEN_RUN,
                   "sh", str(self.hidden), "dockerd", "--host", self.url,
                   "--data-root", str(self.base / "data"), "--exec-root", str(self.base / "x"),
                   "--pidfile", str(self.base / "d.pid"), "--config-file", str(config),
                   "--bridge=none", "--iptables=false", *self._tls_flags()]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the second dockerd exited: {self.tail()}")
            with contextlib.suppress(Exception):
                self.client().ping()
                return
            time.sleep(0.2)
        raise RuntimeError(f"the second dockerd did not answer in time: {self.tail()}")

    def _tls_flags(self) -> list[str]:
        if not self.tls:
            return []
        server = make_certificates(self.base)
        return ["--tlsverify", f"--tlscacert={self.certs / 'ca.pem'}",
                f"--tlscert={server / 'cert.pem'}", f"--tlskey={server / 'key.pem'}"]

    def client(self) -> Any:
        """A docker SDK client for this engine."""
        from executor.sandbox.engine import connect

        return connect(timeout=60, environment=self.env)

    def containers(self) -> list[Any]:
        """Every container of this engine, running or not."""
        return list(self.client().containers.list(all=True))

    def tail(self) -> str:
        """The end of dockerd's log."""
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2000:]
        return ""

    def stop(self) -> None:
        """Remove its containers, stop dockerd by its pid, remove its directories."""
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            for container in self.containers():
                container.remove(force=True, v=True)
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT)
        self.proc = None
        shutil.rmtree(self.base, ignore_errors=True)

    def make_dir(self, path: Path) -> None:
        """Create `path` as this engine sees it (another directory than the host's)."""
        assert self.proc is not None
        subprocess.run(["nsenter", "--mount", f"--target={self.proc.pid}", "mkdir", "-p",
                        str(path)], check=True, timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_certificates(base: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (docker's file names:
    ca.pem, cert.pem, key.pem in base/client); the server's directory."""
    client, server = base / "client", base / "server"
    client.mkdir()
    server.mkdir()
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *key, "-keyout", base / "ca-key.pem", "-out", client / "ca.pem",
             "-days", "2", "-subj", "/CN=sandbox-agent test CA")
    for where, name, usage in ((server, "127.0.0.1", "subjectAltName=IP:127.0.0.1\n"
                                                     "extendedKeyUsage=serverAuth"),
                               (client, "client", "extendedKeyUsage=clientAuth")):
        (where / "ext.cnf").write_text(usage + "\n")
        _openssl("req", *key, "-keyout", where / "key.pem", "-out", where / "req.csr",
                 "-subj", f"/CN={name}")
        _openssl("x509", "-req", "-in", where / "req.csr", "-CA", client / "ca.pem", "-CAkey",
                 base / "ca-key.pem", "-CAcreateserial", "-out", where / "cert.pem", "-days",
                 "2", "-extfile", where / "ext.cnf")
    return server


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
