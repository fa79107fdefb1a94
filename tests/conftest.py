"""Shared fixtures: the stand-in model server, the Docker engine, per-test directories.

Tests that need Docker skip on a laptop without an engine (or without the sandbox image), but
under CI=true they fail instead: a green CI run always means the sandbox was really exercised.
"""

from __future__ import annotations

import compileall
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from executor.config import DEFAULT_IMAGE
from executor.errors import SandboxError
from executor.sandbox.engine import connect
from tests.fakes.model_server import ModelServer

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A shell that starts the suite in the background ignores SIGINT for it, and the CLIs the
    # tests start would inherit that: the Ctrl-C tests need the handler a terminal gives.
    signal.signal(signal.SIGINT, signal.default_int_handler)
PACKAGE = Path(__file__).parents[1] / "executor"
IMAGE = os.environ.get("SANDBOX_AGENT_TEST_IMAGE", DEFAULT_IMAGE)
PODMAN_HOST = os.environ.get("SANDBOX_AGENT_TEST_PODMAN_HOST",
                             "unix:///run/sandbox-agent-podman/podman.sock")
"""Podman's Docker-compatible service, as scripts/ensure-podman.sh (make podman) starts it."""


@dataclass(frozen=True)
class Engine:
    """An engine and OCI runtime the sandbox tests run against, set the way a person would."""

    name: str
    docker_host: str | None
    """DOCKER_HOST (None: the environment's, else the default socket)."""
    runtime: str | None
    """SANDBOX_AGENT_RUNTIME (None: the engine's default)."""
    setup: str
    """What sets it up on a fresh machine."""


ENGINES = {
    "runc": Engine("runc", None, None, "make engine"),
    "runsc": Engine("runsc", None, "runsc", "make engine (scripts/ensure-runsc.sh)"),
    "podman": Engine("podman", PODMAN_HOST, None, "make podman (scripts/ensure-podman.sh)"),
}
"""Every test runs on Docker with its default runtime (runc); tests marked `engines` also run
on Docker with gVisor's runsc and on Podman (rootful, its Docker-compatible API)."""


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile executor/ once, before the xdist workers start (not in each of them).

    Hundreds of tests run the CLI as a subprocess. Under PYTHONDONTWRITEBYTECODE (set in the
    shell these tests usually run from) no .pyc is ever written, so each of those processes compiled every
    module it imports again: about 0.4 s of CPU a run. Existing .pyc files are still read.
    """
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(PACKAGE, quiet=1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `engines` (optionally naming some) run once per engine."""
    marker = metafunc.definition.get_closest_marker("engines")
    if marker is not None and "engine" in metafunc.fixturenames:
        names = marker.args or tuple(ENGINES)
        metafunc.parametrize("engine", [ENGINES[name] for name in names], ids=list(names),
                             indirect=True)


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started stand-in model server (Ollama + OpenAI) on 127.0.0.1, scripted per test."""
    with ModelServer() as server:
        yield server


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The engine this test runs on, set in the environment (DOCKER_HOST,
    SANDBOX_AGENT_RUNTIME) so that the CLI, `make_config` and the fixtures all use it."""
    target: Engine = getattr(request, "param", ENGINES["runc"])
    if target.docker_host:
        monkeypatch.setenv("DOCKER_HOST", target.docker_host)
    if target.runtime:
        monkeypatch.setenv("SANDBOX_AGENT_RUNTIME", target.runtime)
    else:
        monkeypatch.delenv("SANDBOX_AGENT_RUNTIME", raising=False)
    return target


_clients: dict[str, Any] = {}


@pytest.fixture
def docker_client(engine: Engine) -> Any:
    """A connected docker SDK client for the test's engine, with the sandbox image present."""
    if engine.name not in _clients:
        _clients[engine.name] = _connect(engine)
    return _clients[engine.name]


@pytest.fixture(scope="session")
def default_docker_client() -> Any:
    """The default engine's client (Docker, DOCKER_HOST or its socket), for wider scopes."""
    if "runc" not in _clients:
        _clients["runc"] = _connect(ENGINES["runc"])
    return _clients["runc"]


def _connect(engine: Engine) -> Any:
    try:
        client = connect(timeout=30)  # DOCKER_HOST is the engine's by now
    except SandboxError as exc:
        _unavailable(f"no engine for {engine.name} ({engine.setup}): {exc}")
    try:
        client.images.get(IMAGE)
    except Exception:
        _unavailable(f"sandbox image {IMAGE} missing on {engine.name} ({engine.setup})")
    if engine.runtime and engine.runtime not in (client.info().get("Runtimes") or {}):
        _unavailable(f"the engine has no runtime {engine.runtime} ({engine.setup})")
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
