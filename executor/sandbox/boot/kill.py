"""Kills a stuck toolbox (argv[1]; 0: none, only what a run left) and everything of its uid.

It runs as the toolbox's own uid, which needs no capability (all are dropped), and in python3
because the image may have no `kill`. Only our processes of that uid live in a session
container, so all of them go except this script and PID 1 — and, when PID 1 is not ours (a
container made by an older version: docker-init), its oldest child, the container's command,
whose end would stop it. A process that forks and exits faster than one pass over /proc (a
"hopper") outlives such a pass, so where PID 1 is ours, kill(-1) (every process of the uid but
PID 1 and the caller, at once) follows until /proc lists none for a while; exit 3 when some
are still there after 2 s (a survivor would take the next toolbox's FIFOs).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

INIT_TAG = b"# sandbox-agent init"
"""The first line of PID 1's code (init.py) when it is ours."""


def stat(pid: object) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def ours(pid: object, uid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def others(uid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and int(p) not in (1, os.getpid()) and ours(p, uid)
            and (stat(p) or [b"Z"])[0] != b"Z"]


def kill_listed(old: int, uid: int) -> list[str]:
    """One pass over /proc: SIGKILL each process of `uid` (and `old`); what refused."""
    listed = {int(p): stat(p) for p in os.listdir("/proc") if p.isdigit() and ours(p, uid)}
    procs = {pid: fields for pid, fields in listed.items() if fields}
    orphans = [pid for pid, fields in procs.items() if fields[1] == b"1"]
    main = 0 if first_is_ours() else min(orphans, key=lambda pid: int(procs[pid][19]),
                                         default=0)
    refused: list[str] = []
    for pid in dict.fromkeys([old, *procs]):
        if pid not in (0, os.getpid(), 1, main):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError as exc:
                refused.append(f"pid {pid}: {exc.strerror}")
    return refused


def first_is_ours() -> bool:
    with open("/proc/1/cmdline", "rb") as f:
        return INIT_TAG in f.read()


def wait_dead(old: int, refused: list[str]) -> None:
    deadline = time.monotonic() + 5
    while old and not refused and (stat(old) or [b"Z"])[0] != b"Z":
        if time.monotonic() > deadline:
            refused.append(f"pid {old} still alive after SIGKILL")
        time.sleep(0.02)


def until_quiet(uid: int) -> None:
    """kill(-1) until /proc lists nothing of `uid` three times running; exit 3 after 2 s."""
    settle, quiet = time.monotonic() + 2, 0
    while quiet < 3:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        quiet = 0 if others(uid) else quiet + 1
        if quiet == 0 and time.monotonic() > settle:
            print(f"{len(others(uid))} processes of uid {uid} still alive after kill(-1)")
            sys.exit(3)
        time.sleep(0.005)


def main() -> None:
    old, uid = int(sys.argv[1]), os.getuid()
    refused = kill_listed(old, uid)
    wait_dead(old, refused)
    if first_is_ours():
        until_quiet(uid)
    sys.exit("; ".join(refused) or None)


if __name__ == "__main__":
    main()
