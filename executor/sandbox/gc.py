"""Removing sandbox containers nobody owns any more.

Every session holds an exclusive flock on a lock file named in the container's labels for as
long as it uses the container. A container whose lock can be taken (its owner exited or was
killed, even with SIGKILL) or whose lock file is gone is an orphan, unless it is a standby
left for the next run whose TTL has not passed (warm.py: the host's record says so). A session
removes its lock file when it lets go (lockfile.py); `gc` removes the free ones a killed
session left.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from executor.errors import SandboxError
from executor.network.egress import drop_socket_dir
from executor.sandbox import lockfile, rootlock, runrecord, warm
from executor.sandbox.config import (
    LABEL_HOST,
    LABEL_LOCK,
    LABEL_ROOT,
    LABEL_SESSION,
    default_lock_dir,
)
from executor.sandbox.engine import connect, docker_errors, force_remove
from executor.sandbox.fifos import drop_channel
from executor.state import real_root


class GcResult(BaseModel):
    """What `gc` found."""

    removed: list[str]
    """Names of removed containers."""
    in_use: list[str]
    """Names of containers whose session is still running."""
    skipped: list[str]
    """Containers of other hosts (left alone unless all_hosts)."""
    notes: list[str] = []
    """What the end-of-session checks of removed bind sessions found (they ran here)."""
    locks_removed: int = 0
    """Free lock files removed from the lock dir (`sweep_locks`)."""


SWEPT_AFTER = 300.0
"""Seconds a free lock file is left in the lock dir before `gc` removes it."""
_LOCK_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*\.lock|root-[0-9a-f]{32}\.lock")
"""A session's lock (`<container name>.lock`) or a root's (rootlock.py); nothing else."""


def gc(
    client: Any = None, *, root: str | None = None, all_hosts: bool = False, force: bool = False
) -> GcResult:
    """Remove orphaned sandbox containers (only `root`'s when given); `force`: in-use ones too."""
    client = client or connect()
    result = GcResult(removed=[], in_use=[], skipped=[])
    containers = session_containers(client, root)
    for container in containers:
        _classify(container, result, all_hosts=all_hosts, force=force)
    result.locks_removed = sweep_locks(default_lock_dir())
    listed = {container.name for container in containers}
    for record in runrecord.abandoned(default_lock_dir(), Path(root) if root else None):
        if record.name not in listed and not _exists(client, record.name):
            _finish(record.name, result)  # its container went by other hands: checks still due
    return result


def sweep_locks(lock_dir: Path, older_than: float = SWEPT_AFTER) -> int:
    """Remove the free session and root locks of `lock_dir` untouched for `older_than` seconds
    (a session ending removes its own; these are a killed one's, or an older version's): each
    held while its name goes (lockfile.py). A new one is left alone, for a locker of an older
    version, which takes a lock without checking its name afterwards."""
    before = time.time() - older_than
    with contextlib.suppress(OSError), os.scandir(lock_dir) as entries:
        old = [Path(entry.path) for entry in entries
               if _LOCK_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
               and entry.stat(follow_symlinks=False).st_mtime < before]
        return lockfile.sweep(old)
    return 0


def _exists(client: Any, name: str) -> bool:
    """Whether the engine still has a container of that name (any answer but no: yes)."""
    import docker.errors

    try:
        client.containers.get(name)
    except docker.errors.NotFound:
        return False
    except Exception:  # the engine did not say no: leave the record to the next run
        return True
    return True


def _classify(container: Any, result: GcResult, *, all_hosts: bool, force: bool) -> None:
    labels = container.labels
    # the session's lock dir, where its record is (a run of another environment's: its own)
    lock_dir = runrecord.lock_dir_named(labels.get(LABEL_LOCK, ""), container.name)
    lock_dir = lock_dir or default_lock_dir()
    if labels.get(LABEL_HOST) not in (None, socket.gethostname()) and not all_hosts:
        result.skipped.append(container.name)
    elif not force and (runrecord.held(labels.get(LABEL_LOCK, ""))
                        or warm.waiting(container, lock_dir)):  # left for a next run
        result.in_use.append(container.name)
    else:
        import docker.errors

        with docker_errors(f"removing {container.name}"):
            try:
                force_remove(container)
            except docker.errors.NotFound:
                return  # removed meanwhile by its own session or another gc
        result.removed.append(container.name)
        drop_channel(lock_dir, container.name)  # of a session that was killed
        drop_socket_dir(lock_dir, container.name)
        _finish(container.name, result, lock_dir)


def _finish(name: str, result: GcResult, lock_dir: Path | None = None) -> None:
    """A removed bind session's end-of-session checks, which its dead controller skipped
    (never while another bind session works on the root: they would race its sandbox; the
    next run on the root runs them then); its record is in `lock_dir` (default: ours)."""
    lock_dir = lock_dir or default_lock_dir()
    for record in runrecord.abandoned(lock_dir):
        if record.name != name:
            continue
        if not os.path.lexists(record.root):  # nothing left to check, nor ever will be
            runrecord.forget(lock_dir, name)
            result.notes.append(f"the project of {name} is gone: its record is dropped")
            return
        try:
            held = rootlock.hold(default_lock_dir(), real_root(record.root), "gc", wait=False)
        except SandboxError as exc:
            result.notes.append(f"the checks after {name} wait for the next run: {exc.message}")
            return
        try:
            record.run_checks(result.notes.append)
            runrecord.forget(lock_dir, name)
        finally:
            rootlock.release(held)


def session_containers(client: Any, root: str | None = None) -> list[Any]:
    """Sandbox containers, optionally only those of one project root."""
    filters = {"label": [LABEL_SESSION] + ([f"{LABEL_ROOT}={root}"] if root else [])}
    with docker_errors("listing sandbox containers"):
        # Containers of other runs may be removed while we list: skip those, do not fail.
        return list(client.containers.list(all=True, filters=filters, ignore_removed=True))

