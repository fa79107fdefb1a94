"""The Docker engine connection, and the one place docker SDK errors become ours."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from executor.errors import EngineUnavailableError, ImageNotFoundError, SandboxError

ENGINE_FIX = (
    "start the Docker engine (installed with pip: install Docker, e.g. `apt-get install "
    "docker.io`, and start it; in a clone of sandbox-agent: `make engine`), or set DOCKER_HOST"
)
IMAGE_FIX = (
    "build it with `sandbox-agent image build` (no registry reachable, in a clone of "
    "sandbox-agent: `make image`), or pass --image"
)


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


def connect(timeout: float = 60.0, url: str | None = None,
            environment: Mapping[str, str] | None = None) -> Any:
    """A docker SDK client for `url`, else the engine in the environment (DOCKER_HOST, then the
    default socket); unix, tcp (TLS from DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) and ssh.

    `environment` replaces os.environ as where those variables are read."""
    import docker
    from docker.utils import kwargs_from_env

    environment = dict(os.environ if environment is None else environment)
    if url is not None:
        environment["DOCKER_HOST"] = url
    if not environment.get("DOCKER_HOST", "").startswith("tcp://"):
        # TLS settings are for a TCP engine: they must not break the local socket (`image copy
        # --to tcp://...` reads them for its target, while its source is this machine's engine)
        for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
            environment.pop(name, None)
    with docker_errors(f"connecting to Docker at {endpoint(url)}"):
        client = docker.DockerClient.__new__(docker.DockerClient)
        client.api = _api_class()(timeout=int(timeout), **kwargs_from_env(environment),
                                  use_ssh_client=endpoint(url).startswith("ssh://"))
        client.ping()
        return client


def _api_class() -> Any:
    """The SDK's API client, except that the engine's own CA (DOCKER_CERT_PATH) is what a TLS
    connection is verified against: requests would let REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE in
    the environment replace it, and the handshake with the engine would fail."""
    import docker

    class EngineAPI(docker.APIClient):  # type: ignore[misc]
        @property
        def trust_env(self) -> bool:
            return bool(self._trust_env) and not isinstance(getattr(self, "verify", None), str)

        @trust_env.setter
        def trust_env(self, value: bool) -> None:
            self._trust_env = value

    return EngineAPI


def engine_version(client: Any) -> str:
    """The engine's version string."""
    with docker_errors("asking the engine its version"):
        return str(client.version().get("Version", "unknown"))
