"""Fixtures for tests against a real Docker engine and the real sandbox image.

Without an engine (or without the image) these tests skip on a laptop, but under CI=true
they fail instead: a green CI run always means the sandbox was really exercised.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.config import DEFAULT_IMAGE
from executor.errors import SandboxError
from executor.sandbox.docker import LABEL_SESSION, DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
IMAGE = os.environ.get("SANDBOX_AGENT_TEST_IMAGE", DEFAULT_IMAGE)
SECRET = "TOP-SECRET-do-not-leak-4242"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A connected docker SDK client, and the sandbox image present."""
    try:
        client = connect(timeout=30)
    except SandboxError as exc:
        _unavailable(f"no Docker engine: {exc}")
    try:
        client.images.get(IMAGE)
    except Exception:
        _unavailable(f"sandbox image {IMAGE} missing (make image)")
    return client


@pytest.fixture(autouse=True)
def _no_leftover_containers(docker_client: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test must remove the containers it created."""
    before = {c.id for c in docker_client.containers.list(all=True, filters={"label": LABEL_SESSION})}
    yield
    after = docker_client.containers.list(all=True, filters={"label": LABEL_SESSION})
    leaked = [c for c in after if c.id not in before and test_dir_name(request) in c.labels.get(
        "sandbox-agent.root", "")]
    for container in leaked:
        container.remove(force=True)
    assert not leaked, f"test left containers behind: {[c.name for c in leaked]}"


def test_dir_name(request: pytest.FixtureRequest) -> str:
    """The test's name made safe for a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)


@pytest.fixture
def workdir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A per-test directory whose path contains the test name (to attribute containers)."""
    path = tmp_path / test_dir_name(request)
    path.mkdir()
    return path


@pytest.fixture
def project(workdir: Path) -> Path:
    """A project root with files and a git repository, and a secret file NEXT to it."""
    (workdir / "secret.txt").write_text(SECRET + "\n")
    root = workdir / "proj"
    root.mkdir()
    (root / "hello.py").write_text('print("hello")\n')
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def make_config(root: Path, **overrides: Any) -> SandboxConfig:
    """A sandbox config for a fresh session on `root`."""
    options: dict[str, Any] = {"root": root, "session_id": "t" + uuid.uuid4().hex[:10],
                               "image": IMAGE, "tool_timeout": 20}
    options.update(overrides)
    return SandboxConfig(**options)


@pytest.fixture
def sandbox(project: Path, docker_client: Any) -> Iterator[DockerSandbox]:
    """A started read-write sandbox on `project`."""
    with DockerSandbox(make_config(project), client=docker_client) as box:
        yield box
