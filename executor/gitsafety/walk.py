"""The walk of the project tree that finds every repository in it, links never followed.

One walk at the start of a bind session (`scan`) finds every `.git` entry, at any depth and of
any kind, and every directory git would take for a bare repository (gitshape.py: the rule the
toolbox uses too); the check after the session walks again (aftercheck.py) and compares.
`.git` directories are not entered: what is inside one is protected as a whole.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from executor.errors import ConfigError, SandboxError
from executor.toolbox.gitshape import GITDIR_PARTS, gitdir_shape
from executor.toolbox.nofollow import open_beneath, open_listing, put_back

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
    for rel_dir, listing in listings(root):
        for entry in listing:  # (only the few names that matter get a path: the walk is hot)
            name = entry.name
            if name == ".git":
                found[joined(rel_dir, name)] = kind(entry)
            elif name in GITDIR_PARTS:
                parts.setdefault(rel_dir, {})[name] = kind(entry)
    bare = tuple(sorted(d for d, kinds in parts.items() if gitdir_shape(kinds)
                        and d.rpartition("/")[2] != ".git" and d))
    return TreeScan(found, bare)


def listings(root: Path) -> Iterator[tuple[str, list[os.DirEntry[str]]]]:
    """Each directory under `root` (its relative path, its entries), `.git` directories not
    entered; a ConfigError past MAX_ENTRIES.

    Each directory is opened beneath its parent's descriptor without following a link, so a
    directory swapped for one while the walk runs fails its step instead of listing a host
    directory as the project's. The entries' `stat()` works (beneath that descriptor) until
    the next listing is asked for. A directory of ours that lacks some owner rights (a
    command, our uid, took them) has them while the walk is in it (`open_listing`): what it
    holds is walked as the sandbox, which can give them back, could reach it.
    """
    frames = [_Frame("", *open_listing(None, os.fspath(root)))]
    seen = 0
    try:
        while frames:
            frame = frames[-1]
            if frame.todo is None:  # just opened: list it, then walk into its directories
                listing = _list(frame)
                seen += len(listing)
                if seen > MAX_ENTRIES:
                    raise _too_many()
                yield frame.rel, listing
                frame.todo = [e.name for e in listing
                              if e.name != ".git" and e.is_dir(follow_symlinks=False)]
            if not frame.todo:
                _close(frames.pop())
                continue
            name = frame.todo.pop()  # (last listed first, as the walk always went)
            if frame.fd < 0:
                frame.fd = _reopen(frames, frame)
            below = _open_below(frame.fd, name, frame.rel)
            if below is not None:
                frames.append(_Frame(joined(frame.rel, name), *below))
                if len(frames) > _KEEP_OPEN + 1:  # deep: the level above gives its fd back
                    _close(frame)
    finally:
        for frame in frames:
            _close(frame)


_KEEP_OPEN = 64
"""Levels that keep their descriptor while the walk is below them; a deeper one is opened
again from the deepest of those when the walk comes back to it (a tree of any depth, without
running out of descriptors)."""
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM})
"""What opening a listed directory may meet: not one (any more), or unreadable (another
uid's: the container's user cannot read it either)."""


@dataclass
class _Frame:
    rel: str
    fd: int
    """-1 while given back (`_KEEP_OPEN`)."""
    mode: int | None = None
    """Its mode before the walk gave its owner rights back (None: unchanged)."""
    todo: list[str] | None = None
    """Names of its directories not walked yet (None: not listed yet)."""


def _close(frame: _Frame) -> None:
    if frame.fd >= 0:
        put_back(frame.fd, frame.mode)
        os.close(frame.fd)
        frame.fd, frame.mode = -1, None


def _reopen(frames: list[_Frame], frame: _Frame) -> int:
    """A deep level's descriptor again, opened beneath the deepest kept one (no link followed;
    -1 with nothing more to walk there when it is not a directory any more)."""
    anchor = frames[_KEEP_OPEN - 1]
    parts = frame.rel[len(anchor.rel) + 1:].split("/")
    try:
        parent = open_beneath(anchor.fd, parts[:-1])
        try:
            fd, frame.mode = open_listing(parent, parts[-1])
        finally:
            os.close(parent)
        return fd
    except OSError as exc:
        if exc.errno not in _GONE:
            raise SandboxError(f"could not walk the project at {frame.rel}: "
                               f"{exc.strerror}") from exc
        frame.todo = []
        return -1


def _list(frame: _Frame) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(frame.fd) as entries:
            return list(entries)
    except OSError as exc:  # (it was opened for reading: not a permission matter)
        raise SandboxError(f"could not list {frame.rel or 'the project'}: "
                           f"{exc.strerror}") from exc


def _open_below(parent: int, name: str, rel_dir: str) -> tuple[int, int | None] | None:
    """`name` beneath `parent` as a directory to list, never through a link, and the mode to
    put back when done (`open_listing`); None: not one now."""
    if parent < 0:
        return None
    try:
        return open_listing(parent, name)
    except OSError as exc:
        if exc.errno in _GONE:
            return None
        # (out of descriptors, say: a directory skipped could hide a repository)
        raise SandboxError(f"could not walk the project at {joined(rel_dir, name)}: "
                           f"{exc.strerror}") from exc


def joined(rel_dir: str, name: str) -> str:
    """`name`'s path relative to the root, in the directory at `rel_dir` ('' for the root)."""
    return f"{rel_dir}/{name}" if rel_dir else name


def _too_many() -> ConfigError:
    return ConfigError(
        f"the project has more than {MAX_ENTRIES:,} files; git repositories in it "
        "cannot all be found and protected",
        fix="point --root at a smaller directory, or pass --allow-git-writes",
    )


def kind(entry: os.DirEntry[str]) -> str:
    """'symlink', 'dir', 'file' or 'other' (the kinds `gitdir_shape` takes)."""
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"
