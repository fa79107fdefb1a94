"""Shared fixtures: the stand-in model server, the Docker engine, per-test directories.

Tests that need Docker skip on a laptop without an engine (or without the sandbox image), but
under CI=true they fail instead: a green CI run always means the sandbox was really exercised.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.config import DEFAULT_IMAGE
from executor.errors import SandboxError
from executor.sandbox.engine import connect
from tests.fakes.model_server import ModelServer

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
IMAGE = os.environ.get("SANDBOX_AGENT_TEST_IMAGE", DEFAULT_IMAGE)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started stand-in model server (Ollama + OpenAI) on 127.0.0.1, scripted per test."""
    with ModelServer() as server:
        yield server


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


def safe_test_name(request: pytest.FixtureRequest) -> str:
    """The test's name made safe for a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)


PRIVATE_ENV = ("SANDBOX_AGENT_STATE_DIR", "SANDBOX_AGENT_CONFIG_DIR")
"""Set per test by `_private_state`; test helpers that scrub SANDBOX_AGENT_* keep these."""


@pytest.fixture(autouse=True)
def _private_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
                   ) -> Path:
    """Each test gets its own user state and config dirs (never the developer's own)."""
    base = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(base / "state"))
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG_DIR", str(base / "config"))
    return base


@pytest.fixture
def workdir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A per-test directory whose path contains the test name (to attribute containers)."""
    path = tmp_path / safe_test_name(request)
    path.mkdir()
    return path
