"""A bind session's run record and the settling of a run whose controller died.

The run record (runrecord.py) keeps what the end-of-session checks (gitsafety/aftercheck.py)
need, so that a controller that died gets them at the next start on the project (`settle`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from executor.gitsafety.aftercheck import after_session
from executor.gitsafety.guard import GitGuard
from executor.sandbox import runrecord
from executor.sandbox.config import LABEL_ROOT
from executor.sandbox.engine import docker_errors
from executor.sandbox.fifos import drop_channel

Warn = Callable[[str], None]


def run_record(git: GitGuard, name: str, root: Path) -> runrecord.RunRecord | None:
    """What the end-of-session checks need (None: a session that gets none)."""
    start = git.baseline
    if start is None:
        return None
    return runrecord.RunRecord(
        name=name, root=str(root), started_ns=start.started_ns, tree=start.tree,
        identities=start.identities,
        made_dirs=[str(path.relative_to(root)) for path in start.made_dirs])


def settle(client: Any, record: runrecord.RunRecord, lock_dir: Path, warn: Warn) -> None:
    """A dead bind session's container removed and its end-of-session checks run."""
    import docker.errors

    root = Path(record.root)
    with docker_errors(f"removing {record.name}"):
        try:
            container = client.containers.get(record.name)
            if container.labels.get(LABEL_ROOT) == record.root:
                container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    drop_channel(lock_dir, record.name)
    after_session(root, record.tree, record.started_ns, record.identities,
                  [root / rel for rel in record.made_dirs], set(), warn)
    runrecord.forget(lock_dir, record.name)


def settle_abandoned(client: Any, records: list[runrecord.RunRecord], lock_dir: Path,
                     warn: Warn) -> None:
    """Runs on this root whose controller died: each `settle`d, with a word why."""
    for record in records:
        warn(f"a run on this project ({record.name}) ended without its controller: its "
             "container is removed and its end-of-session checks run now")
        settle(client, record, lock_dir, warn)
