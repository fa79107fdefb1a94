"""Fixtures for tests against a real Docker engine and the real sandbox image.

`docker_client` and `workdir` live in tests/conftest.py (skip without an engine, fail under
CI=true); here: the project fixtures and the check that no test leaves a container behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.sandbox.config import LABEL_SESSION
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from tests.conftest import IMAGE, Engine

SECRET = "TOP-SECRET-do-not-leak-4242"


@pytest.fixture(autouse=True)
def _no_leftover_containers(docker_client: Any, tmp_path: Path) -> Iterator[None]:
    """Every test must remove the containers it created: those whose root is in its tmp_path.

    The test's own tmp_path (unique per test and per pytest run), not its name: another run of
    the same test on the same engine, by someone else at the same time, is not a leak of ours.
    The listing is sparse (one request, no inspect per container that may be gone meanwhile).
    """
    yield
    listed = docker_client.containers.list(all=True, filters={"label": LABEL_SESSION}, sparse=True)
    leaked = [c for c in listed if Path((c.attrs.get("Labels") or {}).get(
        "sandbox-agent.root", "/")).is_relative_to(tmp_path)]
    for container in leaked:
        container.remove(force=True)
    assert not leaked, f"test left containers behind: {[c.attrs.get('Names') for c in leaked]}"


@pytest.fixture
def project(workdir: Path) -> Path:
    """A project root with files and a git repository, and a secret file NEXT to it."""
    return make_project(workdir)


def make_project(workdir: Path) -> Path:
    """`project`'s tree, made in `workdir`: WORKDIR/proj, and WORKDIR/secret.txt beside it."""
    (workdir / "secret.txt").write_text(SECRET + "\n")
    root = workdir / "proj"
    root.mkdir()
    (root / "hello.py").write_text('print("hello")\n')
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def make_config(root: Path, **overrides: Any) -> SandboxConfig:
    """A sandbox config for a fresh session on `root`, on the test's engine and runtime."""
    options: dict[str, Any] = {"root": root, "session_id": "t" + uuid.uuid4().hex[:10],
                               "image": IMAGE, "tool_timeout": 20,
                               "runtime": os.environ.get("SANDBOX_AGENT_RUNTIME") or None}
    options.update(overrides)
    return SandboxConfig(**options)


@pytest.fixture
def sandbox(project: Path, docker_client: Any) -> Iterator[DockerSandbox]:
    """A started read-write sandbox on `project`."""
    with DockerSandbox(make_config(project), client=docker_client) as box:
        yield box


Observed = tuple[DockerSandbox, Path]


@pytest.fixture(scope="module")
def _observed_boxes() -> Iterator[tuple[dict[str, Observed], contextlib.ExitStack]]:
    with contextlib.ExitStack() as stack:
        yield {}, stack


@pytest.fixture
def observed(engine: Engine, docker_client: Any, tmp_path_factory: pytest.TempPathFactory,
             _observed_boxes: tuple[dict[str, Observed], contextlib.ExitStack]) -> Observed:
    """(a started read-write sandbox, its project) shared by a module's cases that only
    look, on one engine: nothing they do may change the container or the project (when a
    refusal fails, the case that saw it fails). One container an engine, not one a case."""
    boxes, stack = _observed_boxes
    if engine.name not in boxes:
        project = make_project(tmp_path_factory.mktemp("observed"))
        box = DockerSandbox(make_config(project), client=docker_client)
        boxes[engine.name] = (stack.enter_context(box), project)
    return boxes[engine.name]
