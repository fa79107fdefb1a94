"""The container's hardening options: every switch it is created with, decided in one place.

Part of the Deployment (deployment.py): nothing here talks to the engine.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executor.config import (
    COPY_MEMORY_MAX,
    DEFAULT_DISK_BUDGET,
    DEFAULT_NOFILE,
    DEFAULT_NPROC,
    parse_size,
)
from executor.gitsafety.hostgit import Protected
from executor.network import egress as network
from executor.sandbox import boot, seccomp
from executor.sandbox.bundle import toolbox_command
from executor.sandbox.config import (
    CHANNEL,
    GVISOR_PIDS_FACTOR,
    LABEL_HOST,
    LABEL_LOCK,
    LABEL_ROOT,
    LABEL_SESSION,
    LABEL_WORKSPACE,
    WORKSPACE,
    SandboxConfig,
    container_name,
)
from executor.state import LEGACY_DIR, legacy_state

HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"
"""/etc/hosts of a container without a network (its hostname is `sandbox`)."""


def hosts_file(directory: Path) -> Path:
    """`HOSTS` as a file in `directory` (a private dir of ours), rewritten when it differs."""
    return seccomp.publish(directory / "hosts", HOSTS, "the hosts file")


def container_options(config: SandboxConfig, lock_path: Path, user: str,
                      protected: Protected | None = None, *,
                      podman_profile: Path | None = None, gvisor: bool = False,
                      hosts: Path | None = None,
                      toolbox: list[str] | None = None,
                      channel: Path | None = None) -> dict[str, Any]:
    """Keyword arguments for `containers.create`: every hardening switch in one place.

    `podman_profile`: for Podman, the seccomp profile as a file on its host (it reads a path
    where Docker takes the JSON); the writable /run and /var/tmp it adds to a read-only
    container are then capped and made read-only like the rest.
    `gvisor`: the runtime is runsc. Its ptrace platform costs about five host pids per process
    and the whole sandbox dies when the host's pids limit is hit, so the process limit moves
    inside, where gVisor enforces RLIMIT_NPROC per uid (root included): nproc = pids_limit,
    and the host's limit becomes GVISOR_PIDS_FACTOR times that.
    `hosts`: an /etc/hosts file on the engine's host (`hosts_file`) for a container without a
    network. The container is then created with networking disabled as well: the OCI runtime
    gives it a new network namespace with only `lo`, as `none` does, but the engine sets up no
    network sandbox for it, which took 150 of the 250 ms a start took here (measured with
    Docker 20.10: its libnetwork re-executes dockerd as a prestart hook). That sandbox also
    wrote /etc/hosts, hence the file.
    `toolbox`: the toolbox's argv, to make it the container's first process
    (`boot.first_toolbox`) on a
    stdin the host attaches to before the start, instead of `sleep` and an exec. The engine
    logs nothing of its stdout (all tool results would otherwise land in its log files).
    `channel`: a directory of ours mounted read-only at `CHANNEL`, for the toolbox's FIFOs.
    """
    from docker.types import LogConfig, Mount

    root = str(config.root)
    protected = protected or Protected((), ())
    tmpfs = {"/tmp": f"rw,nosuid,nodev,noexec,size={config.tmp_size},mode=1777"}
    memory = parse_size(config.memory)
    if config.workspace == "copy" and config.copy_storage == "disk":
        mounts = [Mount(WORKSPACE, None, type="volume")]  # anonymous: gone with the container
    elif config.workspace == "copy":  # the copy is charged to the container's memory
        mounts, memory = [], memory + config.copy_bytes
        tmpfs[WORKSPACE] = _copy_tmpfs(config)
    else:
        mounts = [Mount(WORKSPACE, root, type="bind", read_only=config.read_only)]
        mounts += [Mount(_inside(rel), str(config.root / rel), type="bind", read_only=True)
                   for rel in protected.existing]
        empty = "ro,nosuid,nodev,noexec,size=4k,mode=0555"
        tmpfs.update({_inside(rel): empty for rel in protected.missing})
    if config.workspace == "bind" and (not config.read_only or legacy_state(config.root)):
        # the project's policy and skills are not the sandbox's to write, and tracking skips
        # the name (gitsafety/guard.py); an old in-tree state dir may hold transcripts
        tmpfs[f"{WORKSPACE}/{LEGACY_DIR}"] = "ro,nosuid,nodev,noexec,size=4k,mode=0500"
    tmpfs = _podman_tmpfs(tmpfs) if podman_profile is not None else tmpfs
    limits = ulimits(config, gvisor=gvisor)
    runtime: dict[str, Any] = {"runtime": config.runtime} if config.runtime else {}
    if hosts is not None and not config.network:
        mounts.append(Mount("/etc/hosts", str(hosts), type="bind", read_only=True))
        runtime["network_disabled"] = True
    if channel is not None:
        mounts.append(Mount(CHANNEL, str(channel), type="bind", read_only=True))
    mounts += network.mounts(config.egress)
    if toolbox is not None:
        first: dict[str, Any] = {"command": toolbox_command(toolbox, first=True), "init": False,
                                 "stdin_open": True, "log_config": LogConfig(type="none")}
    else:
        first = {"command": ["python3", "-I", "-S", "-c",
                             boot.reaper(end=config.workspace == "bind")], "init": False}
    return {**runtime, **first,
        "image": config.image, "name": container_name(config.session_id), "user": user,
        "working_dir": WORKSPACE, "hostname": "sandbox", "mounts": mounts, "tmpfs": tmpfs,
        "network_mode": "bridge" if config.network else "none",
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges", _seccomp_opt(podman_profile)],
        "read_only": True,
        "pids_limit": config.pids_limit * (GVISOR_PIDS_FACTOR if gvisor else 1),
        "mem_limit": memory, "memswap_limit": memory, "nano_cpus": int(config.cpus * 1e9),
        "environment": {**_BASE_ENV, **network.environment(config.egress), **config.env},
        "ipc_mode": "private", "ulimits": limits,
        "labels": {
            LABEL_SESSION: config.session_id, LABEL_ROOT: root,
            LABEL_LOCK: str(lock_path), LABEL_HOST: socket.gethostname(),
            LABEL_WORKSPACE: config.workspace,
        },
    }


def _podman_tmpfs(tmpfs: dict[str, str]) -> dict[str, str]:
    """Podman mounts /run and /var/tmp writable and uncapped (its init is in /run): capped and
    read-only here. It also copies what a tmpfs covers into it unless told not to: the hidden
    state would be readable again (Docker knows no such option, nor does it copy)."""
    tmpfs = {**tmpfs, "/run": "rw,nosuid,nodev,noexec,size=1m,mode=0755",
             "/var/tmp": "ro,nosuid,nodev,noexec,size=4k,mode=0755"}
    return {path: f"{options},notmpcopyup" for path, options in tmpfs.items()}


def ulimits(config: SandboxConfig, *, gvisor: bool) -> list[Any]:
    """fsize (the disk budget's, between two polls of the toolbox), nofile and nproc."""
    from docker.types import Ulimit

    budget = config.disk_budget if not config.read_only else 0
    fsize = [Ulimit(name="fsize", soft=budget, hard=budget)] if budget else []
    rlimits = _rlimits() | ({"nproc": config.pids_limit} if gvisor else {})
    return fsize + [Ulimit(name=name, soft=limit, hard=limit) for name, limit in rlimits.items()]


def _seccomp_opt(path: Path | None) -> str:
    return f"seccomp={path}" if path else seccomp.security_opt()


def _rlimits() -> dict[str, int]:
    """nofile and nproc, set explicitly: Podman's defaults exceed common hard limits (it then
    fails with "error setting rlimit"). Never above our own hard limit, which a local rootless
    engine inherits."""
    import resource

    wanted = {"nofile": (resource.RLIMIT_NOFILE, DEFAULT_NOFILE),
              "nproc": (resource.RLIMIT_NPROC, DEFAULT_NPROC)}
    return {name: _capped(limit, resource.getrlimit(which)[1]) for name, (which, limit)
            in wanted.items()}


def _capped(limit: int, hard: int) -> int:
    import resource

    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)


MIN_FREE = 256 * 1024 * 1024
"""Room the toolbox keeps free on the project's file system (its --min-free)."""


def copy_storage(config: SandboxConfig, size: int, *, podman: bool,
                 warn: Callable[[str], None]) -> str:
    """Where a copy of `size` bytes is kept: memory (a tmpfs) or disk (an anonymous volume)."""
    storage = config.copy_storage
    if storage == "memory" and podman:
        warn("Podman cannot give a tmpfs an owner (uid=); the copy is kept on disk")
    if storage == "auto" or podman:
        storage = "memory" if size <= COPY_MEMORY_MAX and not podman else "disk"
    return storage


def _copy_tmpfs(config: SandboxConfig) -> str:
    """A tmpfs for the copy: room for it, its growth budget and the toolbox's free margin.
    Its top is root's: 0755 for a read-only copy (whose tools own nothing), else 1777, so the
    sandbox's user makes what it likes there but cannot move the copy's `.git` (copy.py)."""
    growth = config.disk_budget or DEFAULT_DISK_BUDGET
    size = config.copy_bytes + growth + MIN_FREE
    mode = "0755" if config.read_only else "1777"
    return f"rw,exec,nosuid,nodev,size={size},uid=0,gid=0,mode={mode}"


def _inside(rel: str) -> str:
    return WORKSPACE if rel == "." else f"{WORKSPACE}/{rel}"


_BASE_ENV = {
    "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE": "1", "GIT_CONFIG_NOSYSTEM": "1",
}
