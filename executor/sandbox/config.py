"""What one session's sandbox is made of: its config, its names and the fixed places in it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from executor.config import (
    DEFAULT_COPY_LIMIT,
    DEFAULT_COPY_MAX_FILES,
    DEFAULT_DISK_BUDGET,
    DEFAULT_IMAGE,
    DEFAULT_MEMORY,
    DEFAULT_PIDS_LIMIT,
    DEFAULT_TMP_SIZE,
    DEFAULT_TOOL_TIMEOUT,
    CopyStorage,
    WorkspaceMode,
    default_cpus,
)
from executor.network.egress import EgressConfig

WORKSPACE = "/workspace"
CHANNEL = "/run/sandbox-agent"
"""Where a session's channel directory (two FIFOs, see `channel.fifo_pair`) is mounted,
read-only."""
LABEL_SESSION = "sandbox-agent.session"
LABEL_ROOT = "sandbox-agent.root"
LABEL_LOCK = "sandbox-agent.lock"
LABEL_HOST = "sandbox-agent.host"
LABEL_WORKSPACE = "sandbox-agent.workspace"
NOBODY = 65534
"""The uid that owns a copy's repositories (and runs the tools of a read-only copy)."""
GVISOR_PIDS_FACTOR = 16
"""Host pids per process allowed under runsc (measured: 256 processes took 1,344 host pids)."""


class SandboxConfig(BaseModel):
    """How to build one session's container."""

    root: Path
    """Project root on the host, mounted at /workspace."""
    session_id: str
    """Session id; the container is named sandbox-agent-<session_id>."""
    session_name: str = ""
    """The session's name as the person knows it (said to another run on the root); ''."""
    image: str = DEFAULT_IMAGE
    """Image with python3 >= 3.9 (ripgrep and git optional)."""
    runtime: str | None = None
    """OCI runtime the engine runs the container with (`runsc`: gVisor); None: the engine's."""
    fallback_image: str | None = None
    """Used, with a warning, when `image` no longer exists (a resumed session's old digest)."""
    read_only: bool = False
    """Mount the root read-only."""
    network: bool = False
    """Give the container a network (off by default)."""
    memory: str = DEFAULT_MEMORY
    """Memory limit; swap is not allowed on top."""
    pids_limit: int = DEFAULT_PIDS_LIMIT
    """Maximum processes."""
    cpus: float = Field(default_factory=default_cpus)
    """CPU limit (default: the host's cores, at most 4)."""
    tmp_size: str = DEFAULT_TMP_SIZE
    """Size cap of the /tmp tmpfs."""
    tool_timeout: int = DEFAULT_TOOL_TIMEOUT
    """Default timeout of run_shell_command in seconds."""
    max_output: int = 30_000
    """Bytes of each command output stream kept for the model."""
    env: dict[str, str] = Field(default_factory=dict)
    """Allow-listed host environment passed in (already filtered by the caller)."""
    allow_git_writes: bool = False
    """Mount .git read-write."""
    disk_budget: int = DEFAULT_DISK_BUDGET
    """Bytes the project may grow by in the session (0: no budget); also each file's size limit."""
    lock_dir: Path | None = None
    """Where liveness lock files go (None: the user's cache dir)."""
    workspace: WorkspaceMode = "bind"
    """bind: the root is mounted at /workspace; copy: a copy of it is loaded there."""
    copy_limit: int = DEFAULT_COPY_LIMIT
    """Bytes a project may have to be copied."""
    copy_max_files: int = DEFAULT_COPY_MAX_FILES
    """Entries a project may have to be copied."""
    copy_exclude: list[str] = Field(default_factory=list)
    """gitignore-style patterns left out of the copy."""
    copy_storage: CopyStorage = "auto"
    """memory (tmpfs), disk (an anonymous volume) or auto (memory up to 256 MiB)."""
    copy_bytes: int = 0
    """Bytes of the planned copy (set when it is planned; sizes the memory storage)."""
    copy_overlay: dict[str, list[Any] | None] = Field(default_factory=dict)
    """Pending changes put back into a new copy (a resumed session): path -> entry or None."""
    blob_dir: Path | None = None
    """Where the contents of `copy_overlay` files are kept."""
    fifo_channel: bool = True
    """Carry tool calls over two FIFOs the host makes (`channel_dir`) instead of the engine's
    stream relay, where the engine is on this machine and the runtime is not gVisor."""
    egress: EgressConfig | None = None
    """The hosts the sandbox may reach through the host's proxy (None: no network at all)."""


def container_name(session_id: str) -> str:
    """Docker name of a session's container."""
    return f"sandbox-agent-{session_id}"


def default_lock_dir() -> Path:
    """Per-user directory of session liveness locks."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sandbox-agent"
    )
    return Path(base) / "sandbox-agent-locks"


def mount_user(config: SandboxConfig) -> str:
    """uid:gid of the project root: who the copy's files and the tools belong to."""
    info = config.root.stat()
    return f"{info.st_uid}:{info.st_gid}"


def tool_user(config: SandboxConfig) -> str:
    """Who the tools run as: a read-only copy's tools own nothing in it."""
    if config.workspace == "copy" and config.read_only:
        return f"{NOBODY}:{NOBODY}"
    return mount_user(config)
