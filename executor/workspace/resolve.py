"""Where a path leads once changes are applied: links followed the way the kernel follows them.

A link's target text says little by itself: `docs/root/../x` stays in the project only if
`docs/root` is not itself a link (to `..`, say). `resolve` walks a path one component at a time
over an *after-state* — a path's entry in the pending changes when it has one, else what the
host holds now (lstat, no link followed) — replacing each link by its target and applying `..`
to where the walk has got to, never to the text. A missing component is walked through as if
it were a directory (it may be made later), so the answer errs towards "leaves the project".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from executor.workspace import hostfs
from executor.workspace.manifest import Entry

MAX_LINKS = 40
"""Links followed in one walk at most (Linux's MAXSYMLINKS); more: the walk is incomplete."""

Lookup = Callable[[str], Entry | None]
"""A path relative to the root -> its entry in the after-state (None: absent)."""


@dataclass
class Walk:
    """Where a walk went."""

    parts: list[str]
    """The absolute path it ended at, as components (links resolved)."""
    left_root: bool = False
    """It went outside the root at some step (an absolute target, or `..` above the root)."""
    steps: list[str] = field(default_factory=list)
    """Paths inside the root it looked up, relative to it, in order."""
    complete: bool = True
    """False: more than MAX_LINKS links (a loop)."""

    def inside(self, root: Path) -> str | None:
        """Where it ended, relative to `root` ('' for the root itself); None: outside."""
        return _relative(_parts(str(root)), self.parts)


def after_state(root: Path, planned: Mapping[str, Entry | None]) -> Lookup:
    """The tree at `root` as it would be once the changes `planned` (path -> state after) are
    applied."""
    def lookup(path: str) -> Entry | None:
        if path in planned:
            return planned[path]
        try:
            return hostfs.peek(root, path)
        except OSError:  # a link on the way on the host, or unreadable: not there for us
            return None
    return lookup


def host_state(root: Path) -> Lookup:
    """The tree at `root` as it is now."""
    return after_state(root, {})


def resolve(root: Path, start: list[str], path: str, lookup: Lookup) -> Walk:
    """Walk `path` (absolute, or relative to the absolute `start`), inside `root` over
    `lookup`, outside it over the host's own files."""
    top = _parts(str(root))
    walk = Walk(list(start) if not path.startswith("/") else [])
    walk.left_root = _relative(top, walk.parts) is None
    todo = list(reversed(path.split("/")))
    links = 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        here = walk.parts[:-1] if name == ".." else [*walk.parts, name]
        relative = _relative(top, here)
        walk.left_root = walk.left_root or relative is None
        if name == ".." or relative == "":
            walk.parts = here
            continue
        if relative is not None:
            walk.steps.append(relative)
        target = _link(lookup(relative)) if relative is not None else _host_link(here)
        if target is None:
            walk.parts = here
            continue
        links += 1
        if links > MAX_LINKS:
            walk.complete = False
            return walk
        if target.startswith("/"):
            walk.parts = []
            walk.left_root = True
        todo.extend(reversed(target.split("/")))
    return walk


def leaves_root(root: Path, path: str, target: str, lookup: Lookup) -> bool:
    """Whether a link at `path` (relative to `root`) to `target` leads outside the project
    once the after-state `lookup` describes is in place (or cannot be followed to its end)."""
    parent = path.rpartition("/")[0]
    start = [*_parts(str(root)), *(parent.split("/") if parent else [])]
    walk = resolve(root, start, target, lookup)
    return walk.left_root or not walk.complete


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def _relative(top: list[str], parts: list[str]) -> str | None:
    if parts[:len(top)] != top:
        return None
    return "/".join(parts[len(top):])


def _link(entry: Entry | None) -> str | None:
    return entry.target if entry is not None and entry.kind == "symlink" else None


def _host_link(parts: list[str]) -> str | None:
    """The target of a link outside the root on the host; None for anything else."""
    path = "/" + "/".join(parts)
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return os.readlink(path)
    except OSError:
        return None
    return None
