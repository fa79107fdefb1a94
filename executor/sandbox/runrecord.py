"""What a bind session decided at its start, kept on disk until its end-of-session checks ran.

The checks after a session (`after_session`: set-id bits cleared, repositories the sandbox
made renamed aside, protected paths put back) need what the start saw: the `.git` entries,
the protected paths' identities, when it began. A controller that dies (SIGKILL, OOM, a
crash) takes that with it, and the next run would take what the sandbox planted for the
person's own. So the start writes it in the user's lock dir (`runs/`, outside the project),
the end removes it, and whoever finds one whose lock is free — the next run on the root, or
`gc` — removes that session's container and runs the dead run's checks. The lock dir comes
from the environment (`$XDG_RUNTIME_DIR`, `$HOME`), so a run started with another one finds a
dead run's record through its container, whose lock label names the dir it is in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.gitsafety.aftercheck import Identity, after_session, remove_mountpoints
from executor.gitsafety.walk import TreeScan
from executor.sandbox import lockfile
from executor.state import own_dir
from executor.toolbox.nofollow import read_plain

SUFFIX = ".run.json"
RUNS = "runs"
"""The records' own directory in the lock dir: a start lists it, not the lock dir, where older
versions left every session's `.lock` (16,000 of them made a start 30 ms slower)."""
_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A container name as `container_name` makes them: a record naming anything else is refused."""
_MAX_BYTES = 16 * 1024 * 1024


@dataclass
class RunRecord:
    """A bind session's start, as its end-of-session checks need it."""

    name: str
    """The container's name (the lock file beside is `<name>.lock`)."""
    root: str
    started_ns: int
    tree: TreeScan
    identities: dict[str, Identity | None] = field(default_factory=dict)
    made_dirs: list[str] = field(default_factory=list)
    """Mountpoints the engine made (relative to the root), removed when empty."""
    standby: bool = False
    """A standby's (warm.py): nothing but its PID 1 ever ran in the container, so nothing in
    the tree is the sandbox's doing; a session that adopts it writes its own record first."""

    def run_checks(self, warn: Callable[[str], None]) -> None:
        """The checks after this run, which its controller skipped; a standby's removes only
        the mountpoints its engine made (what the person did since it was made is theirs)."""
        root = Path(self.root)
        made = [root / rel for rel in self.made_dirs]
        if self.standby:
            remove_mountpoints(root, made)
        else:
            after_session(root, self.tree, self.started_ns, self.identities, made, set(), warn)

    def save(self, lock_dir: Path) -> None:
        """Write it atomically, never through a link (the lock dir is ours, 0700)."""
        data = json.dumps({
            "name": self.name, "root": self.root, "started_ns": self.started_ns,
            "git_entries": self.tree.git_entries, "git_dirs": list(self.tree.git_dirs),
            "identities": {k: list(v) if v else None for k, v in self.identities.items()},
            "made_dirs": self.made_dirs, "standby": self.standby}).encode()
        folder = _runs(lock_dir, make=True)
        path = folder / _file_name(self.root, self.name)
        temporary = folder / f".{path.name}.{os.getpid()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)


def _file_name(root: str, name: str) -> str:
    """`<root's key>.<container name>.run.json`: a start loads only its root's records."""
    return f"{_root_key(root)}.{name}{SUFFIX}"


def _root_key(root: str) -> str:
    return hashlib.sha256(os.fsencode(root)).hexdigest()[:32]


def _runs(lock_dir: Path, *, make: bool = False) -> Path:
    """The records' directory (made 0700 when `make`; ours alone, never a link)."""
    return own_dir(lock_dir / RUNS, make=make)


def forget(lock_dir: Path, name: str) -> None:
    """The session's checks ran: its record goes (one an older version kept beside the locks
    too)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(_runs(lock_dir)):
            if entry.name.endswith(f".{name}{SUFFIX}"):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        os.unlink(lock_dir / f"{name}{SUFFIX}")


def abandoned(lock_dir: Path, root: Path | None = None) -> list[RunRecord]:
    """Records (of `root`'s sessions, or all) whose session no longer holds its lock; all
    includes those an older version kept beside the locks (`gc` finds them)."""
    prefix = f"{_root_key(str(root))}." if root is not None else ""
    found = []
    for current in [True] + ([False] if root is None else []):
        with contextlib.suppress(OSError):
            folder = _runs(lock_dir) if current else lock_dir
            for entry in os.scandir(folder):
                if not entry.name.endswith(SUFFIX) or not entry.name.startswith(prefix) \
                        or entry.name.startswith("."):
                    continue
                record = _load(Path(entry.path))
                if record is None or not _NAME.fullmatch(record.name) or entry.name != (
                        _file_name(record.root, record.name) if current
                        else f"{record.name}{SUFFIX}") \
                        or (root is not None and record.root != str(root)):
                    continue
                if not held(str(lock_dir / f"{record.name}.lock")):
                    found.append(record)
    return found


def _load(path: Path) -> RunRecord | None:
    """A record we wrote, or None for anything else (a link, not regular, not ours, bad)."""
    data = read_plain(path, most=_MAX_BYTES, owner=os.geteuid())
    if data is None:
        return None
    try:
        raw: Any = json.loads(data)
        return RunRecord(
            name=str(raw["name"]), root=str(raw["root"]), started_ns=int(raw["started_ns"]),
            tree=TreeScan({str(k): str(v) for k, v in raw["git_entries"].items()},
                          tuple(str(d) for d in raw["git_dirs"])),
            identities={str(k): (int(v[0]), int(v[1])) if v else None
                        for k, v in raw["identities"].items()},
            made_dirs=[str(d) for d in raw["made_dirs"]], standby=raw.get("standby") is True)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def lock_dir_named(label: str, name: str) -> Path | None:
    """The lock dir a container's lock label names (`<dir>/<name>.lock`, absolute, no `..`),
    or None: a label is data. What is read there is trusted only as `abandoned` trusts it."""
    path = Path(label)
    if not _NAME.fullmatch(name) or not path.is_absolute() or ".." in path.parts \
            or path.name != f"{name}.lock":
        return None
    return path.parent


def held(lock_path: str) -> bool:
    """Whether the session holding `lock_path` still runs (a label is data: validate it)."""
    return bool(lock_path) and lockfile.held(lock_path)
