"""Where the sandbox's installs go: a per-project volume outside /workspace.

A run that may reach a package index gets a named volume (`deps_volume`, keyed by the project
root) mounted at `DEPS_DIR`, with pip pointed at it (a user install under PYTHONUSERBASE, its
cache beside it) and npm's cache and global prefix there too. So `pip install` in the sandbox
lands nothing in the tree, where the host might later run it (`.venv/bin/python`). The volume
is the sandbox's writing: only ever used inside a sandbox of that project, never read by the
host, and removed with `sandbox-agent gc --deps --root DIR`. `npm ci` still writes
`node_modules` into the project, as npm does (docs/NETWORK.md says so).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from executor.toolbox.limits import COMMAND_PATH_VAR

DEPS_DIR = "/opt/sandbox-deps"
"""Where the volume is mounted in the sandbox (the image makes it 1777, so a new volume is)."""
LABEL_DEPS = "sandbox-agent.deps-root"


def deps_volume(root: Path) -> str:
    """The volume name of project `root`'s installs."""
    return f"sandbox-agent-deps-{hashlib.sha256(str(root).encode()).hexdigest()[:16]}"


def deps_mount(name: str) -> Any:
    """The mount of volume `name` at DEPS_DIR (set-id bits stay inert: no-new-privileges)."""
    from docker.types import Mount

    return Mount(DEPS_DIR, name, type="volume")


def deps_environment() -> dict[str, str]:
    """pip and npm pointed at DEPS_DIR (Debian's pip needs the PEP 668 switch for a user
    install; the system's packages are read-only anyway)."""
    python = f"{DEPS_DIR}/python"
    return {"PYTHONUSERBASE": python, "PIP_USER": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1",
            "PIP_CACHE_DIR": f"{DEPS_DIR}/pip-cache", "npm_config_cache": f"{DEPS_DIR}/npm-cache",
            "npm_config_prefix": f"{DEPS_DIR}/npm",
            # the commands' PATH only: the container's own, which finds our programs, stays
            COMMAND_PATH_VAR: f"{python}/bin:{DEPS_DIR}/npm/bin"}


def remove_deps(client: Any, root: Path) -> bool:
    """Remove project `root`'s volume; whether there was one."""
    import docker.errors

    from executor.engine_errors import docker_errors

    with docker_errors(f"removing the package volume of {root}"):
        try:
            client.volumes.get(deps_volume(root)).remove(force=True)
        except docker.errors.NotFound:
            return False
    return True
