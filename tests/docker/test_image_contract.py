"""What the built sandbox image ships, checked by starting it with testcontainers.

The sandbox relies on the image for python3 (the toolbox), ripgrep and git (better tools),
pytest (what most projects' tests run with), pip and venv (installs, when hosts are allowed), and
on what it does *not* ship: no set-id binaries, no network clients. The toolbox must bootstrap in
it exactly as DockerSandbox starts it.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest
from testcontainers.core.container import DockerContainer

from executor.sandbox import boot
from executor.sandbox.bundle import toolbox_payload
from tests.conftest import IMAGE

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image(default_docker_client: Any) -> Iterator[DockerContainer]:
    """The sandbox image, started with no network (Ryuk is off: nothing can be pulled here)."""
    container = DockerContainer(IMAGE).with_command("sleep infinity").with_kwargs(
        network_mode="none", labels={"sandbox-agent.test": "image-contract"})
    container.start()
    try:
        yield container
    finally:
        container.stop()


def run(container: DockerContainer, command: str) -> str:
    code, output = container.exec(["sh", "-c", command])
    assert code == 0, (command, output)
    return str(output.decode())


def test_python3_pytest_ripgrep_and_git(image: DockerContainer) -> None:
    version = re.search(r"Python (\d+)\.(\d+)", run(image, "python3 --version"))
    assert version and (int(version[1]), int(version[2])) >= (3, 9)
    assert run(image, "rg --version").startswith("ripgrep ")
    assert run(image, "git --version").startswith("git version ")
    assert run(image, "pytest --version 2>&1").startswith("pytest ")
    run(image, "python3 -c 'import json, selectors, hashlib, difflib, subprocess'")


def test_pip_venv_and_the_package_dir(image: DockerContainer) -> None:
    """Installs need pip and venv; a run with network installs to /opt/sandbox-deps, whose
    mode (1777) a new per-project volume takes (executor/network/deps.py)."""
    assert run(image, "python3 -m pip --version").startswith("pip ")
    run(image, "python3 -m venv --without-pip /tmp/v && /tmp/v/bin/python -c pass")
    assert run(image, "stat -c %a /opt/sandbox-deps").strip() == "1777"


def test_no_set_id_binaries(image: DockerContainer) -> None:
    assert run(image, "find / -xdev -perm /6000 -type f 2>/dev/null; true").split() == []


def test_no_network_clients(image: DockerContainer) -> None:
    tools = "curl wget nc ncat netcat socat ssh scp telnet ftp ping"
    found = run(image, f"for t in {tools}; do command -v $t; done; true")
    assert found.split() == []


def test_the_toolbox_bootstraps_in_it(image: DockerContainer) -> None:
    """The image's python3 says its bytecode format and runs what it gets for it."""
    magic = run(image, "python3 -c 'import importlib.util as u; print(u.MAGIC_NUMBER.hex())'")
    stdin = b"\n" + toolbox_payload(magic.strip().encode()) + b'{"id": 1, "tool": "ping"}\n'
    image.get_wrapped_container().put_archive("/tmp", tar_of("bootstrap.in", stdin))
    said, *lines = _bootstrap(image).splitlines()
    assert said == magic.strip()
    ready, pong = (json.loads(line) for line in lines[:2])
    assert ready["ready"] is True and ready["version"] >= 1 and ready["rg"] is True
    assert (pong["id"], pong["ok"], pong["output"]) == (1, True, "pong")


def _bootstrap(image: DockerContainer) -> str:
    code, output = image.exec(["sh", "-c", 'python3 -u -c "$1" --root /workspace '
                               "< /tmp/bootstrap.in", "sh", boot.source("bootstrap")])
    assert code == 0, output
    return str(output.decode())


def tar_of(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
