"""The Docker engine connection, and the one place docker SDK errors become ours."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from executor.errors import EngineUnavailableError, ImageNotFoundError, SandboxError

ENGINE_FIX = (
    "start the Docker engine (on Debian: `make engine`, which installs docker.io and runs "
    "`dockerd --bridge=none --iptables=false`), or set DOCKER_HOST"
)
IMAGE_FIX = "build it with `sandbox-agent image build` (or `make image`), or pass --image"


@contextlib.contextmanager
def docker_errors(action: str) -> Iterator[None]:
    """Translate docker SDK / requests exceptions raised while doing `action`."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.ImageNotFound as exc:
        message = f"{action}: image not found ({_explain(exc)})"
        raise ImageNotFoundError(message, fix=IMAGE_FIX) from exc
    except docker.errors.DockerException as exc:
        if _is_connection_problem(exc):
            raise EngineUnavailableError(
                f"{action}: cannot reach the Docker engine", fix=ENGINE_FIX
            ) from exc
        raise SandboxError(f"{action}: {_explain(exc)}") from exc
    except requests.exceptions.ConnectionError as exc:
        raise EngineUnavailableError(f"{action}: lost the Docker engine", fix=ENGINE_FIX) from exc


def _explain(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc).strip()


def _is_connection_problem(exc: Exception) -> bool:
    text = str(exc)
    if "Error while fetching server API version" in text:
        return True
    return "Connection" in text and any(w in text for w in ("refused", "aborted", "No such file"))


DEFAULT_ENDPOINT = "unix:///var/run/docker.sock"


def endpoint(url: str | None = None) -> str:
    """The engine address `connect(url)` talks to, for messages."""
    return url or os.environ.get("DOCKER_HOST") or DEFAULT_ENDPOINT


def connect(timeout: float = 60.0, url: str | None = None) -> Any:
    """A docker SDK client for `url`, else the engine in the environment (DOCKER_HOST, then the
    default socket); unix, tcp (TLS from DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) and ssh."""
    import docker

    with docker_errors(f"connecting to Docker at {endpoint(url)}"):
        ssh = endpoint(url).startswith("ssh://")  # the ssh binary, not paramiko
        if url is None:
            client = docker.from_env(timeout=int(timeout), use_ssh_client=ssh)
        else:
            environment = {**os.environ, "DOCKER_HOST": url}
            client = docker.from_env(timeout=int(timeout), use_ssh_client=ssh,
                                     environment=environment)
        client.ping()
        return client


def engine_version(client: Any) -> str:
    """The engine's version string."""
    with docker_errors("asking the engine its version"):
        return str(client.version().get("Version", "unknown"))
