"""scripts/ensure-runsc.sh against a second, running dockerd with a daemon.json of its own:
gVisor is merged in (nothing else touched), the engine reloads it, and a second run does nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import _unavailable

# one worker for the whole file: its module-scoped engine is started once
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("engine-setup")]

SCRIPT = Path(__file__).parents[2] / "scripts" / "ensure-runsc.sh"
EXISTING = {
    "log-level": "warn",
    "runtimes": {"other": {"path": "/usr/bin/runc"},
                 "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}},
}
"""A daemon.json someone wrote: a setting, another runtime, runsc without --oci-seccomp."""


class Dockerd:
    """A dockerd beside the shared one: its own socket, data, config file and pid file."""

    def __init__(self, base: Path) -> None:
        self.base, self.config = base, base / "daemon.json"
        self.host = f"unix://{base}/d.sock"
        self.pidfile = base / "d.pid"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = ["dockerd", "--host", self.host, "--data-root", str(self.base / "data"),
                   "--exec-root", str(self.base / "x"), "--pidfile", str(self.pidfile),
                   "--config-file", str(self.config), "--bridge=none", "--iptables=false"]
        log = (self.base / "dockerd.log").open("wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        for _ in range(120):
            if self.docker("info").returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError((self.base / "dockerd.log").read_text()[-2000:])

    def docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DOCKER_HOST": self.host}, check=False)

    def runtimes(self) -> dict[str, object]:
        return json.loads(self.docker("info", "--format", "{{json .Runtimes}}").stdout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # ours, by its pid
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def dockerd() -> Iterator[Dockerd]:
    if os.getuid() != 0 or not shutil.which("dockerd"):
        _unavailable("a second dockerd needs root and dockerd (make engine)")
    base = Path(tempfile.mkdtemp(prefix="sa-dockerd-", dir="/tmp"))  # socket paths stay short
    engine = Dockerd(base)
    engine.config.write_text(json.dumps(EXISTING, indent=2))
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()
        shutil.rmtree(base, ignore_errors=True)


def ensure_runsc(engine: Dockerd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": engine.host, "DOCKER_DAEMON_JSON": str(engine.config),
           "DOCKERD_PIDFILE": str(engine.pidfile)}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_runsc_is_merged_into_a_running_engines_config(dockerd: Dockerd):
    assert dockerd.runtimes()["runsc"] == {"path": "/usr/bin/runsc",
                                           "runtimeArgs": ["--network=none"]}

    done = ensure_runsc(dockerd)

    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(dockerd.config.read_text())
    assert written == {**EXISTING, "runtimes": {
        "other": {"path": "/usr/bin/runc"},
        "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--oci-seccomp"]},
    }}
    backup = dockerd.config.with_name("daemon.json.sandbox-agent.bak")
    assert json.loads(backup.read_text()) == EXISTING
    assert dockerd.runtimes()["runsc"]["runtimeArgs"] == ["--network=none", "--oci-seccomp"]
    assert "other" in dockerd.runtimes()  # reloaded with SIGHUP, not restarted
    before = dockerd.config.stat().st_mtime_ns

    again = ensure_runsc(dockerd)

    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    assert dockerd.config.stat().st_mtime_ns == before


def test_a_daemon_json_that_is_not_json_is_left_alone(dockerd: Dockerd):
    dockerd.config.write_text("{not json")

    done = ensure_runsc(dockerd)

    assert done.returncode != 0
    assert "is not valid JSON" in done.stderr and "Traceback" not in done.stderr
    assert dockerd.config.read_text() == "{not json"
