"""A bind session's git protection as the sandbox drives it, the counterpart of copysession.py.

`BindSession` holds the session's `GitGuard` (gitsafety/guard.py): the runs on the root whose
controller died settled and the tree walked before the container exists, the run record saved
beside the lock, the tree walked again before a replacement container, and the checks after
the last one. The run record (runrecord.py) keeps what those checks (gitsafety/aftercheck.py)
need, so that a controller that died gets them at the next start on the project (`settle`).
In a copy session the guard walks nothing: there is no record and nothing to check after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executor.errors import SandboxError
from executor.gitsafety.guard import GitGuard
from executor.sandbox import runrecord
from executor.sandbox.config import LABEL_ROOT
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.engine import docker_errors, force_remove
from executor.sandbox.fifos import drop_channel
from executor.sandbox.signals import Signals


def run_record(git: GitGuard, name: str, root: Path, *, standby: bool = False
               ) -> runrecord.RunRecord | None:
    """What the end-of-session checks need (None: a session that gets none)."""
    start = git.baseline
    if start is None:
        return None
    return runrecord.RunRecord(
        name=name, root=str(root), started_ns=start.started_ns, tree=start.tree,
        identities=start.identities,
        made_dirs=[str(path.relative_to(root)) for path in start.made_dirs], standby=standby)


def settle(client: Any, record: runrecord.RunRecord, lock_dir: Path, warn: Warn) -> None:
    """A dead bind session's container removed and its end-of-session checks run."""
    import docker.errors

    with docker_errors(f"removing {record.name}"):
        try:
            container = client.containers.get(record.name)
            if container.labels.get(LABEL_ROOT) == record.root:
                force_remove(container)
        except docker.errors.NotFound:
            pass
    drop_channel(lock_dir, record.name)
    record.run_checks(warn)
    runrecord.forget(lock_dir, record.name)


def settle_abandoned(client: Any, records: list[tuple[Path, runrecord.RunRecord]],
                     warn: Warn) -> None:
    """Runs on this root whose controller died (each with its record's lock dir): each
    `settle`d, with a word why."""
    for lock_dir, record in records:
        if record.standby:
            warn(f"a container made ahead for a run on this project ({record.name}) was "
                 "never used: it is removed")
        else:
            warn(f"a run on this project ({record.name}) ended without its controller: its "
                 "container is removed and its end-of-session checks run now")
        settle(client, record, lock_dir, warn)


class BindSession:
    """The steps of a bind session's git protection around its containers (see above)."""

    def __init__(self, git: GitGuard, deployment: Deployment, warn: Warn) -> None:
        self.git, self._deployment, self._warn = git, deployment, warn

    def prepare(self) -> None:
        """Before the first container: what dead runs planted is not the person's; the walk."""
        place = self._deployment
        settle_abandoned(place.client, place.abandoned(), self._warn)
        self.protect()

    def protect(self) -> None:
        """Find what git on the host would run from the tree, before the container exists."""
        self.git.protect()

    def record(self, *, standby: bool = False) -> runrecord.RunRecord | None:
        """The run record beside the lock, until the checks after the session ran (None: a
        session that needs none); a `standby`'s says nothing ran in its container."""
        place = self._deployment
        record = run_record(self.git, place.name, place.config.root, standby=standby)
        place.save_record(record)
        return record

    def in_place(self) -> None:
        """The protected paths are still the start's, where the container mounts them: a
        rename of a directory above one carries its mount along, so a toolbox (or a container)
        made now would protect the moved copy and leave the path git reads writable."""
        moved = self.git.moved()
        if moved:
            raise SandboxError(f"protected paths are not where they were at the start "
                               f"({', '.join(moved[:3])}); the session ends")

    def renew(self) -> None:
        """Before a replacement container: the protected paths still the start's, walked again
        (a tree the session left can make the walk fail: a hard-linked hook, a broken config)."""
        self.in_place()
        self.protect()
        self.record()

    def note(self, signals: Signals) -> None:
        """Keep what the toolbox could not disable: it is renamed after the session."""
        self.git.undisabled.update(signals.undisabled)

    def check_now(self) -> None:
        """A toolbox died, and with it the checks it makes after each command: the host makes
        them now, while nothing runs in the container (its kill said so, or it is gone)."""
        self.git.check_now(self._warn)

    def after(self) -> None:
        """Clear set-id bits the session left, report new repositories, remove our mountpoints."""
        if self.git.baseline is None:
            return
        self.git.after_session(self._warn)
        self._deployment.forget_record()
