"""The one place docker SDK (and requests) errors become ours, for every caller of the engine:
the sandbox, and the egress forwarder and package volume of `executor.network`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from executor.errors import (
    EngineUnavailableError,
    ImageNotFoundError,
    RuntimeNotFoundError,
    SandboxError,
)

ENGINE_FIX = (
    "start the Docker engine (installed with pip: install Docker, e.g. `apt-get install "
    "docker.io`, and start it; in a clone of sandbox-agent: `make engine`), or set DOCKER_HOST"
)
IMAGE_FIX = (
    "build it with `sandbox-agent image build` (no registry reachable, in a clone of "
    "sandbox-agent: `make image`), or pass --image"
)
RUNTIME_FIX = (
    "`sandbox-agent doctor` lists the engine's runtimes; for gVisor, `make engine` as root "
    "installs runsc and registers it with dockerd; or drop --runtime / SANDBOX_AGENT_RUNTIME"
)
_UNKNOWN_RUNTIME = "Unknown runtime specified "  # dockerd's words


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
        if _UNKNOWN_RUNTIME in _explain(exc):
            name = _explain(exc).split(_UNKNOWN_RUNTIME, 1)[1].strip()
            raise RuntimeNotFoundError(f"{action}: the engine has no OCI runtime {name!r}",
                                       fix=RUNTIME_FIX) from exc
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
