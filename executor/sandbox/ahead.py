"""A session's container made ahead (a standby, warm.py): what `DockerSandbox.standby` runs.

It is the start's first half, stopped before the toolbox: the same walk and mounts, the same
run record (so `gc` settles it if this process dies), then PID 1 armed with a nonce and, for
one left to a later process, a TTL. Anything that fails on the way stops the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable

from executor.sandbox import warm
from executor.sandbox.bindguard import BindSession
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.runtime import Runtime


def make(place: Deployment, runtime: Runtime, blueprint: Blueprint, bind: BindSession, *,
         ttl: int, stop: Callable[[], None], warn: Warn) -> warm.Standby | None:
    """The standby, made while the root's lock is held; None when it can have none."""
    bind.protect()
    place.standby_mode = True
    place.lock()
    protected = bind.git.protected
    why = warm.eligible(place.config, protected.missing,
                        quick=bool(blueprint.options().get("stdin_open"))
                        and blueprint.channel_dir() is not None)
    if why:
        stop()
        return None
    try:
        record = bind.record(standby=True)  # `gc` settles it if this process dies
        blueprint.create()
        runtime.take_life(gvisor=False)
    except BaseException:
        stop()
        raise
    standby = place.standby_made(blueprint.spec(),
                                 warm.mounted_paths(place.config, protected.existing), record)
    standby.life = runtime.give_life()
    standby.root = str(place.config.root)
    standby.maker_session = place.config.session_name or ""
    try:
        standby.arm(ttl)
    except BaseException:
        standby.settle(warn)
        raise
    return standby
