"""What runs in a container, as the host's own kernel sees it: nothing inside can change it.

A kill script's exit code is the word of a process a command of the same uid can reach (red-team
round 19 ptraced it into `exit_group(0)`); whether the container's PID 1 is now alone is asked of
the host's /proc instead: every process that shares PID 1's pid namespace, found by the
namespace's inode. That needs the engine on this machine (a `unix://` endpoint) and the
container's processes to be host processes: under gVisor they are the sentry's, not the host's.
"""

from __future__ import annotations

import contextlib
import os
import time

from executor.sandbox.engine import endpoint

_SETTLE_SECONDS = 1.0
"""How long the killed may take to be reaped by PID 1 before they count as survivors."""


def others_than_init(api: object, container_id: str) -> int | None:
    """How many processes besides PID 1 run in the container, after at most `_SETTLE_SECONDS`
    for the killed to go; None when the host cannot see them (a remote engine)."""
    init = _init_pid(api, container_id)
    if init is None:
        return None
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        count = _sharing_namespace(init)
        if count is None or count == 0 or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


def _init_pid(api: object, container_id: str) -> int | None:
    """The host pid of the container's PID 1, when it is a process of this machine's kernel in
    that container's cgroup (so a pid another machine's engine reports is never taken for it)."""
    if not endpoint().startswith("unix://"):
        return None
    try:
        pid = int(api.inspect_container(container_id)["State"]["Pid"])  # type: ignore[attr-defined]
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as cgroups:
            mine = container_id in cgroups.read()
    except Exception:  # the engine's errors, an odd answer, no such process: nothing to see
        return None
    return pid if pid > 0 and mine else None


def _sharing_namespace(init: int) -> int | None:
    """Processes other than `init` in `init`'s pid namespace (None: `init` is gone)."""
    try:
        namespace = os.readlink(f"/proc/{init}/ns/pid")
    except OSError:
        return None
    return sum(1 for entry in os.scandir("/proc")
               if entry.name.isdigit() and int(entry.name) != init
               and _in_namespace(entry.name, namespace))


def _in_namespace(pid: str, namespace: str) -> bool:
    """Whether process `pid` (any of its threads: a leader that exited alone is a zombie whose
    own link is gone while its other threads run, red-team round 7) is in `namespace`."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid") == namespace
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/task/{task.name}/ns/pid") == namespace:
                    return True
    return False
