"""One session's git safety, from its start to the checks after it.

The sandbox holds one `GitGuard`. At the start (and at a remount, when a repository appeared
from outside) `protect` walks the tree once and decides the surface (surface.py): the mounts,
the toolbox's flags and the spec's `git` field all come from that one value. It keeps what
the checks after the session compare with (`Baseline`: the start's `.git` entries and the
protected paths' identities), notes what the toolbox reported it could not disable, and runs
those checks (aftercheck.py) when the session ends.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from executor.errors import SandboxError
from executor.gitsafety.aftercheck import (
    Identity,
    Warn,
    after_session,
    check_tree,
    identities,
    misplaced,
    missing_chain,
)
from executor.gitsafety.hostgit import Protected
from executor.gitsafety.surface import GitSurface, decide, mode_of
from executor.gitsafety.walk import TreeScan, scan
from executor.state import LEGACY_DIR


@dataclass(frozen=True)
class Baseline:
    """What the start of a bind session saw, as the checks after it need it."""

    tree: TreeScan
    started_ns: int
    identities: dict[str, Identity | None] = field(default_factory=dict)
    """(device, inode) of each protected path; None: missing, and must stay empty."""
    made_dirs: list[Path] = field(default_factory=list)
    """Mountpoints the engine makes for missing protected paths (removed after)."""


class GitGuard:
    """A session's git surface and the state its backups need (no I/O until `protect`)."""

    def __init__(self, root: Path, *, workspace: str, read_only: bool,
                 allow_git_writes: bool) -> None:
        self.root = root
        self.surface: GitSurface = decide(root, mode_of(workspace=workspace, read_only=read_only),
                                          writes_allowed=allow_git_writes)
        """Until `protect` walks a bind session's tree: nothing mounted."""
        self.baseline: Baseline | None = None
        self.undisabled: set[str] = set()
        """`.git` entries the toolbox reported it could not disable: renamed after."""
        self.mountpoints: dict[str, Identity] = {}
        """(device, inode) of the mountpoints the engine made for missing protected paths,
        once it made them: a rename above one carries its empty mount away as well."""
        self._unnoted = False
        self.started_ns = 0

    @property
    def protected(self) -> Protected:
        """The read-only mounts of the surface."""
        return self.surface.protected

    def protect(self) -> GitSurface:
        """Decide the surface from the tree as it is now, before a container is made. At a
        remount the start's tree and identities stay: a `.git` found then is still new, and
        a protected path must still be the one the start saw."""
        self.started_ns = self.started_ns or time.time_ns()
        if self.surface.mode != "bind":
            return self.surface
        tree = scan(self.root)
        self.surface = decide(self.root, "bind", tree, writes_allowed=self.surface.writes_allowed)
        protected, start = self.surface.protected, self.baseline
        if start is None:
            start = Baseline(tree, self.started_ns)
        made = [d for rel in protected.missing for d in missing_chain(self.root, rel)]
        made += _state_dir_mountpoint(self.root)
        self.baseline = Baseline(
            start.tree, start.started_ns,
            {**dict.fromkeys(protected.missing), **identities(self.root, protected.existing),
             **start.identities},
            list(dict.fromkeys([*start.made_dirs, *made])))
        return self.surface

    def also_made(self, dirs: list[Path]) -> None:
        """Mountpoints an engine made for this session before its start looked (a standby's,
        executor/sandbox/warm.py): removed after it like its own."""
        if self.baseline is not None and dirs:
            self.baseline = replace(self.baseline, made_dirs=list(dict.fromkeys(
                [*self.baseline.made_dirs, *dirs])))

    def moved(self) -> list[str]:
        """Protected paths that are not what they were at the start, or where the container
        mounted them (a new container would protect them where they are, not the originals)."""
        if self.baseline is None:
            return []
        found = set(misplaced(self.root, self.baseline.identities))
        found.update(rel for rel, was in self.mountpoints.items()
                     if identities(self.root, (rel,)).get(rel) != was)
        return sorted(found)

    def note_mountpoints(self) -> None:
        """After the engine made a container: the mountpoints it made for missing protected
        paths, as they are now (each a read-only mount there from now on): called when the
        container's first toolbox is ready, before any command ran in it."""
        if self.baseline is not None and self._unnoted:
            self._unnoted = False
            missing = tuple(rel for rel, was in self.baseline.identities.items() if was is None)
            self.mountpoints = identities(self.root, missing)

    def check_mounted(self) -> None:
        """After the engine made the container: every protected path is still the one the
        walk saw, reached without a link. The engine resolves links in a mount's source, so a
        directory on the way swapped for a link since would have put a host path into the
        container (one bind session per root, rootlock.py, leaves no sandbox to do it; this
        makes sure of it before any command runs: the container then goes)."""
        self.mountpoints, self._unnoted = {}, True  # this container's: at its first toolbox
        moved = self.moved()
        if moved:
            raise SandboxError(
                f"protected paths changed while the sandbox was made ({', '.join(moved[:3])}): "
                "what the engine mounted may not be the project's; the session ends",
                fix="check the project (a link where a directory was?) and start again")

    def after_session(self, warn: Warn) -> None:
        """The checks after a bind session (nothing when no walk was made)."""
        start = self.baseline
        if start is not None:
            after_session(self.root, start.tree, start.started_ns, start.identities,
                          start.made_dirs, self.undisabled, warn)

    def check_now(self, warn: Warn) -> None:
        """The same checks of the tree mid-session, its mountpoints left (still in use)."""
        start = self.baseline
        if start is not None:
            check_tree(self.root, start.tree, start.started_ns, start.identities,
                       self.undisabled, warn)


def _state_dir_mountpoint(root: Path) -> list[Path]:
    """`<root>/.sandbox-agent` (the project's policy and skills, an older version's state) is
    covered by an empty read-only mount in a writable bind session (hardening.py): the
    sandbox can neither write a policy the next run loads nor hide files there, where the
    toolbox's change tracking does not look. The engine makes it as a mountpoint when it is
    missing (removed after); anything but a real directory there cannot be covered."""
    path = root / LEGACY_DIR
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return [path]
    if not stat.S_ISDIR(mode):
        raise SandboxError(f"{path} is not a directory (a link or a file): sandbox-agent keeps "
                           f"that name for the project's policy and skills; remove it, or run "
                           "with --workspace copy or --read-only")
    return []
