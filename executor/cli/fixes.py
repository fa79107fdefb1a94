"""An error's fix, made to point the right way where the CLI knows more than the layer that
raised it: what DOCKER_HOST names, which image was asked for, how this copy was installed."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from executor.errors import SandboxAgentError

_NAMED_IMAGE = re.compile(r"image '([^']+)' not found|^(\S+) is not built$")
_REMOTE_SCHEMES = ("tcp://", "http://", "https://")
ENGINE_SCHEMES = ("unix://", "ssh://", *_REMOTE_SCHEMES)
"""What an engine URL starts with (the docker SDK's own schemes)."""


def fix_for(error: SandboxAgentError) -> str | None:
    """`error`'s fix for this machine: a DOCKER_HOST that points nowhere, an image other than
    the default, the embedded model's extra from a source clone."""
    from executor.errors import (
        EmbeddedModelError,
        EngineUnavailableError,
        ImageNotFoundError,
        SandboxError,
    )

    if isinstance(error, EngineUnavailableError):
        return _missing_socket_fix() or _refused_host_fix(error) or error.fix
    if isinstance(error, ImageNotFoundError):
        return _image_fix(error) or error.fix
    if isinstance(error, EmbeddedModelError):
        return _clone_extra_fix(error.fix, source_clone(), Path(sys.prefix)) or error.fix
    if isinstance(error, SandboxError) and error.fix is None:
        return _malformed_host_fix()
    return error.fix


def _image_fix(error: SandboxAgentError) -> str | None:
    """An image named with --image: build that tag, not the default one."""
    from executor.choices import DEFAULT_IMAGE

    named = _NAMED_IMAGE.search(error.message)
    image = (named.group(1) or named.group(2)) if named else None
    if not image or image == DEFAULT_IMAGE:
        return None
    return (f"pass the --image of an image the engine has (`docker images` lists them), or "
            f"build this one: `sandbox-agent image build --tag {image}`; without --image, "
            f"{DEFAULT_IMAGE} is used")


def _missing_socket_fix() -> str | None:
    """When DOCKER_HOST names a unix socket that does not exist: say that, not "install"."""
    host = os.environ.get("DOCKER_HOST", "")
    path = host.removeprefix("unix://") if host.startswith("unix://") else ""
    if not path or os.path.exists(path):
        return None
    return (f"DOCKER_HOST is {host}, and {path} does not exist: point DOCKER_HOST at the "
            "engine's socket, or unset it for the default (unix:///var/run/docker.sock)")


def _malformed_host_fix() -> str | None:
    """When DOCKER_HOST is not an engine URL at all (the SDK says "Invalid bind address")."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host or host.startswith(ENGINE_SCHEMES):
        return None
    return (f"DOCKER_HOST is {host!r}, which is not an engine URL: set it to unix:///PATH, "
            "tcp://HOST:PORT or ssh://USER@HOST, or unset it for this machine's engine")


def _refused_host_fix(error: BaseException) -> str | None:
    """When a network DOCKER_HOST refused the connection: an engine is elsewhere or stopped,
    not missing from this machine."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host.startswith(_REMOTE_SCHEMES) or not _refused(error):
        return None
    return (f"DOCKER_HOST is {host}, and that host refused the connection (nothing listens "
            "on that port): start the engine there or fix the address and port, or unset "
            "DOCKER_HOST for this machine's engine (unix:///var/run/docker.sock)")


def _refused(error: BaseException) -> bool:
    """Whether a connection refusal lies under `error` (the SDK wraps it a few times)."""
    seen: BaseException | None = error
    for _ in range(10):  # causes, contexts: a short chain, never a loop
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _clone_extra_fix(fix: str | None, clone: Path | None, prefix: Path) -> str | None:
    """Run from a source clone, the embedded extra comes from the clone, not from the index:
    `make install-local` there (into its .venv, `prefix` here), else pip on the clone."""
    from executor import LOCAL_EXTRA_FIX

    if clone is None or fix != LOCAL_EXTRA_FIX:
        return None
    if prefix.resolve() == (clone / ".venv").resolve():
        return f"in this clone of sandbox-agent: `make install-local` (in {clone})"
    return f"`pip install -e '{clone}[local]'` (this sandbox-agent runs from the clone {clone})"


def source_clone(top: Path | None = None) -> Path | None:
    """The source clone this package runs from (an editable install), or None; `top`: the
    directory above the package (tests name another)."""
    top = Path(__file__).resolve().parents[2] if top is None else top
    try:
        makefile = (top / "Makefile").read_text(encoding="utf-8", errors="replace")
        project = (top / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    from executor import DISTRIBUTION

    named = f'name = "{DISTRIBUTION}"' in project
    return top if named and "\ninstall-local:" in makefile else None
