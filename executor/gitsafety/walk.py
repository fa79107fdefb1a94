"""The walk of the project tree that finds every repository in it, links never followed.

One walk at the start of a bind session (`scan`) finds every `.git` entry, at any depth and of
any kind, and every directory git would take for a bare repository (gitshape.py: the rule the
toolbox uses too); the check after the session walks again (aftercheck.py) and compares.
`.git` directories are not entered: what is inside one is protected as a whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from executor.errors import ConfigError
from executor.toolbox.gitshape import GITDIR_PARTS, gitdir_shape

MAX_ENTRIES = 2_000_000
"""Entries walked before giving up (a guarantee we cannot give is an error, not a guess)."""


@dataclass(frozen=True)
class TreeScan:
    """What the walk found: every `.git` entry, relative to the root, by kind."""

    git_entries: dict[str, str] = field(default_factory=dict)
    """Relative path of each `.git` entry -> 'dir', 'file', 'symlink' or 'other'."""
    git_dirs: tuple[str, ...] = ()
    """Other directories git takes for a repository (HEAD, objects/, refs/): bare ones."""


def scan(root: Path) -> TreeScan:
    """Walk the tree (links not followed, `.git` directories not entered)."""
    found: dict[str, str] = {}
    parts: dict[str, dict[str, str]] = {}
    for rel, entry in walk(root):
        if entry.name == ".git":
            found[rel] = kind(entry)
        elif entry.name in GITDIR_PARTS:
            parts.setdefault(rel.rpartition("/")[0], {})[entry.name] = kind(entry)
    bare = tuple(sorted(d for d, kinds in parts.items() if gitdir_shape(kinds)
                        and d.rpartition("/")[2] != ".git" and d))
    return TreeScan(found, bare)


def walk(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every entry under `root` with its relative path; a ConfigError past MAX_ENTRIES."""
    stack, seen = [""], 0
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(root / rel_dir if rel_dir else root) as entries:
                listing = list(entries)
        except OSError:
            continue  # unreadable for us: unreadable for the container's user as well
        for entry in listing:
            seen += 1
            if seen > MAX_ENTRIES:
                raise ConfigError(
                    f"the project has more than {MAX_ENTRIES:,} files; git repositories in it "
                    "cannot all be found and protected",
                    fix="point --root at a smaller directory, or pass --allow-git-writes",
                )
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            yield rel, entry
            if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                stack.append(rel)


def kind(entry: os.DirEntry[str]) -> str:
    """'symlink', 'dir', 'file' or 'other' (the kinds `gitdir_shape` takes)."""
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"
