"""The Docker engine connection (docker SDK errors become ours in executor/engine_errors.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from executor.engine_errors import ENGINE_FIX as ENGINE_FIX
from executor.engine_errors import IMAGE_FIX as IMAGE_FIX
from executor.engine_errors import RUNTIME_FIX as RUNTIME_FIX
from executor.engine_errors import docker_errors as docker_errors

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


def is_podman(client: Any) -> bool:
    """Whether the engine is Podman's Docker-compatible service (its `_ping` names libpod).

    A ping, not /version or /info: Podman answers those in about half a second.
    """
    with docker_errors("asking the engine what it is"):
        response = client.api.get(f"{client.api.base_url}/_ping", timeout=10)
        return "Libpod-Api-Version" in response.headers


def runtimes(client: Any) -> tuple[dict[str, str], str]:
    """The OCI runtimes the engine lists (name: path), and its default one.

    Podman lists every runtime its containers.conf names, installed or not, and its
    Docker-compatible API ignores the one a container asks for.
    """
    with docker_errors("asking the engine its runtimes"):
        info = client.info()
    listed = info.get("Runtimes") or {}
    paths = {name: str((spec or {}).get("path") or name) for name, spec in listed.items()}
    return paths, str(info.get("DefaultRuntime") or "")


def _api_class() -> Any:
    """The SDK's API client, except that the engine's own CA (DOCKER_CERT_PATH) is what a TLS
    connection is verified against: requests would let REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE in
    the environment replace it, and the handshake with the engine would fail. Nor does a
    request over a socket (unix, ssh, npipe: `http+docker://`) read the environment's proxies
    and ~/.netrc, which its transport ignores: that cost each request most of a millisecond."""
    import docker

    class EngineAPI(docker.APIClient):  # type: ignore[misc]
        @property
        def trust_env(self) -> bool:
            return (bool(self._trust_env) and not isinstance(getattr(self, "verify", None), str)
                    and not str(getattr(self, "base_url", "")).startswith("http+docker://"))

        @trust_env.setter
        def trust_env(self, value: bool) -> None:
            self._trust_env = value

    return EngineAPI


def engine_version(client: Any) -> str:
    """The engine's version string."""
    with docker_errors("asking the engine its version"):
        return str(client.version().get("Version", "unknown"))


def force_remove(container: Any) -> None:
    """Remove `container` (and its anonymous volume) whatever its state, once more after a
    moment when the engine was caught mid-stop: Podman refuses a container whose PID 1 is
    exiting just then ("container state improper"), as a killed controller's container is."""
    import docker.errors

    try:
        container.remove(force=True, v=True)
    except docker.errors.APIError as exc:
        if "state improper" not in str(exc) and "could not be stopped" not in str(exc):
            raise
        time.sleep(0.5)
        container.remove(force=True, v=True)
