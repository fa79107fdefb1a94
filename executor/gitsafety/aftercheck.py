"""The checks after a bind session: the kernel's read-only mounts, checked from outside.

The mounts (surface.py) hold every protected path in place while the container runs; what
they cannot stop is a directory above one being renamed with it, a new `.git` or repository
look-alike appearing where none was (the toolbox renames those a command makes:
toolbox/guards/git.py), and set-id bits (the seccomp profile refuses them in the first
place). So after the session, with the container gone and nothing left to race, this room
removes the engine's empty mountpoints, moves aside whatever took a protected path's place
(`check_replaced`, by (device, inode) `identities` taken at the start), clears set-id bits
(`sweep`), renames every `.git` and look-alike the session made (`disable_git`,
`disable_head`), and says each with `warn` (`after_session`). Every path is reached without
following a link (toolbox/nofollow.py: the rule the toolbox uses too).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from executor.errors import SandboxAgentError
from executor.gitsafety.walk import TreeScan, joined, kind, listings
from executor.toolbox.gitshape import GITDIR_PARTS, gitdir_shape
from executor.toolbox.nofollow import (
    as_owner,
    open_beneath,
    open_leaf,
    open_listing,
    put_back,
    unlink_fifo,
)

_SETID = stat.S_ISUID | stat.S_ISGID
Warn = Callable[[str], None]


@dataclass
class Sweep:
    """What `sweep` did after a session."""

    setid_cleared: list[str] = field(default_factory=list)
    fifos_removed: list[str] = field(default_factory=list)
    new_git: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)
    """Protected paths found replaced -> where the replacement was moved aside."""
    disabled: list[str] = field(default_factory=list)
    """`.git` entries the toolbox could not disable, renamed here."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Each `.git` renamed by `disable_git` -> its new path."""
    not_disabled: dict[str, str] = field(default_factory=dict)
    """Repository look-alikes whose HEAD could not be renamed -> why."""
    missing: list[str] = field(default_factory=list)
    """Protected paths that were there at the start and are gone (moved away?)."""
    now_at: dict[str, str] = field(default_factory=dict)
    """A protected path gone or replaced -> where the walk found its start's (device, inode)."""


Identity = tuple[int, int]
"""(device, inode) of a protected path."""


def identities(root: Path, rels: tuple[str, ...]) -> dict[str, Identity]:
    """(device, inode) of each protected path, to tell later whether it is still the same (the
    container mounts each one read-only: it can be moved away with its parent, not changed)."""
    found = {}
    for rel in rels:
        with contextlib.suppress(OSError):
            found[rel] = _identity(root, rel)
    return found


def _identity(root: Path, rel: str) -> Identity:
    """lstat beneath root, following no link anywhere on the way."""
    parts = Path(rel).parts
    parent = open_beneath(root, parts[:-1])
    try:
        info = as_owner(parent, lambda: os.lstat(parts[-1], dir_fd=parent))
    finally:
        os.close(parent)
    return info.st_dev, info.st_ino


def misplaced(root: Path, before: dict[str, Identity | None]) -> dict[str, bool]:
    """Protected paths that are not what they were at the start -> whether they are gone:
    replaced or gone, or (missing at the start) there now with something in them."""
    found = {}
    for rel, identity in before.items():
        try:
            now: Identity | None = _identity(root, rel)
        except FileNotFoundError:
            now = None
        except OSError:
            now = (-1, -1)  # a link on the way: not what was there
        if now != identity and not (identity is None and _empty_dir(root, rel)):
            found[rel] = now is None
    return found


def check_replaced(root: Path, before: dict[str, Identity | None], result: Sweep) -> None:
    """Move aside what took a protected path's place (a directory above it was renamed), and
    what appeared where one was missing at the start (where the engine made an empty
    mountpoint); note the ones that are gone."""
    for rel, gone in misplaced(root, before).items():
        if gone:
            result.missing.append(rel)
        else:
            result.replaced[rel] = _move_aside(root, rel)


def _empty_dir(root: Path, rel: str) -> bool:
    parts = Path(rel).parts
    try:
        parent = open_beneath(root, parts[:-1])
        try:
            fd, mode = open_listing(parent, parts[-1])
        finally:
            os.close(parent)
    except OSError:
        return False
    try:
        return not os.listdir(fd)
    finally:
        put_back(fd, mode)
        os.close(fd)


def _move_aside(root: Path, rel: str) -> str:
    """Rename `rel` to `rel.replaced-<hex>` (no link followed on the way); where it went.
    When a step on the way is no directory (a link put where the renamed parent was, whose
    target git on the host would follow), that step goes aside instead: the path git reads
    then leads nowhere."""
    parts = Path(rel).parts
    for depth in range(len(parts), 0, -1):
        if depth < len(parts) and not _not_a_directory(root, parts[:depth]):
            continue
        aside = f"{parts[depth - 1]}.replaced-{os.urandom(4).hex()}"
        try:
            _rename_beneath(root, parts[:depth - 1], parts[depth - 1], aside)
        except OSError as exc:
            if depth == len(parts) and exc.errno in (errno.ENOTDIR, errno.ELOOP):
                continue  # a step above is the link: found and moved by the next turns
            return f"(not moved: {exc.strerror}; remove {rel} before running git here)"
        return str(Path(*parts[:depth - 1], aside))
    return f"(not moved; remove {rel} before running git here)"


def _not_a_directory(root: Path, parts: tuple[str, ...]) -> bool:
    """Whether `parts` beneath root is there but no directory (a link, a file)."""
    try:
        parent = open_beneath(root, parts[:-1])
    except OSError:
        return False  # a step above it is the one
    try:
        return not stat.S_ISDIR(as_owner(parent, lambda: os.lstat(parts[-1], dir_fd=parent))
                                .st_mode)
    except OSError:
        return False
    finally:
        os.close(parent)


def _rename_beneath(root: Path, folder: tuple[str, ...], name: str, new: str) -> None:
    """Rename `folder/name` to `folder/new` under `root`, no link followed on the way."""
    parent = open_beneath(root, folder)
    try:
        as_owner(parent, lambda: os.rename(name, new, src_dir_fd=parent, dst_dir_fd=parent))
    finally:
        os.close(parent)


def disable_git(root: Path, rels: list[str], result: Sweep) -> None:
    """Rename `.git` entries that must not stay (the toolbox could not rename them).

    The paths come from the sandbox: only plain relative ones ending in `.git` are taken, and
    they are reached without following any link (a link could point at another repository).
    """
    for rel in rels:
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts or parts[-1].lower() != ".git":
            continue
        new = f".git.quarantined-{os.urandom(4).hex()}"
        with contextlib.suppress(OSError):
            _rename_beneath(root, parts[:-1], parts[-1], new)
            result.disabled.append(rel)
            result.renamed[rel] = str(Path(rel).with_name(new))


def not_at_start(before: TreeScan, reported: set[str]) -> set[str]:
    """The `.git` entries the toolbox reported it could not disable that the start's walk did
    not see, at that path or inside a repository it saw (which it does not enter).

    The toolbox's word only adds paths for the host to check; it never names one the person
    had: a forged reply saying `.git` would otherwise have the host rename their repository.
    Names are compared ignoring case (a case-insensitive disk holds `.GIT` as `.git`).
    """
    had = {rel.lower() for rel in before.git_entries}
    return {rel for rel in reported
            if not any("/".join(Path(rel.lower()).parts[:n]) in had
                       for n in range(1, len(Path(rel).parts) + 1))}


def sweep(root: Path, before: TreeScan, since_ns: int, result: Sweep | None = None,
          wanted: dict[Identity, str] | None = None) -> Sweep:
    """Clear set-id bits set since `since_ns`, remove FIFOs made since (git and editors on
    the host block opening one); list `.git` entries that were not there before (into
    `result`, when given); note where each `wanted` identity (a protected path's, moved)
    is now.

    Another session's container may still write the same tree, so no entry is reached by
    its path: each is opened beneath the root without following a link (`clear_setid`).
    """
    result = result or Sweep()
    parts: dict[str, dict[str, str]] = {}
    for rel_dir, listing in listings(root):
        for entry in listing:  # (a path only for the few that need one: the walk is hot)
            name = entry.name
            if name == ".git" and joined(rel_dir, name) not in before.git_entries:
                result.new_git.append(joined(rel_dir, name))
            elif name in GITDIR_PARTS:
                parts.setdefault(rel_dir, {})[name] = kind(entry)
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if wanted and (info.st_dev, info.st_ino) in wanted:
                result.now_at[wanted[info.st_dev, info.st_ino]] = joined(rel_dir, name)
            if info.st_mode & _SETID and info.st_ctime_ns >= since_ns \
                    and not stat.S_ISLNK(info.st_mode):
                _clear_found(root, joined(rel_dir, name), result)
            else:
                _remove_if_fifo(root, joined(rel_dir, name), info, since_ns, result)
    for rel, kinds in sorted(parts.items()):  # look-alikes the toolbox missed or could not undo
        if gitdir_shape(kinds) and rel not in before.git_dirs and rel.rpartition("/")[2] != ".git":
            disable_head(root, rel, result)
    return result


def _remove_if_fifo(root: Path, rel: str, info: os.stat_result, since_ns: int,
                    result: Sweep) -> None:
    """Unlink `rel` when the walk saw a FIFO made since `since_ns` there."""
    if stat.S_ISFIFO(info.st_mode) and info.st_ctime_ns >= since_ns:
        with contextlib.suppress(OSError):  # gone or swapped: not a FIFO to remove
            if unlink_fifo(root, rel):
                result.fifos_removed.append(rel)


def fifos_below(root: Path, rel: str, since_ns: int, result: Sweep) -> None:
    """Remove the FIFOs made since `since_ns` below `rel`: a `.git` just renamed aside, which
    the sweep did not enter and which is a plain directory now, where git looks. It is
    reached without following a link; a gitdir file or a link renamed aside has nothing below."""
    try:
        fd = open_beneath(root, Path(rel).parts)  # listed from its O_PATH, by `listings`
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return
        raise
    try:
        for rel_dir, listing in listings(Path(f"/proc/self/fd/{fd}")):
            for entry in listing:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    _remove_if_fifo(root, joined(rel, joined(rel_dir, entry.name)), info,
                                    since_ns, result)
    finally:
        os.close(fd)


def _clear_found(root: Path, rel: str, result: Sweep) -> None:
    with contextlib.suppress(OSError):  # a link or nothing by now: not ours to change
        if clear_setid(root, rel):
            result.setid_cleared.append(rel)


def clear_setid(root: Path, rel: str) -> bool:
    """Clear the set-id bits of `rel` (True when it had some): the entry itself, reached from
    the root without following a link on the way or at the end, checked and changed through
    one descriptor (Linux has no lchmod), so a name swapped for a link changes nothing."""
    fd = open_leaf(root, rel)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode) or not mode & _SETID:
            return False
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) & ~_SETID)
        return True
    finally:
        os.close(fd)


def disable_head(root: Path, rel: str, result: Sweep) -> None:
    """Rename the HEAD of a repository look-alike at `rel` (no link followed on the way), so
    git on the host does not take the directory for a repository and run its config."""
    try:
        _rename_beneath(root, Path(rel).parts if rel else (), "HEAD",
                        f"HEAD.quarantined-{os.urandom(4).hex()}")
    except FileNotFoundError:
        return  # not one any more
    except OSError as exc:
        result.not_disabled[rel or "."] = exc.strerror or str(exc)
        return
    result.disabled.append(rel or ".")


def after_session(root: Path, tree: TreeScan, started_ns: int,
                  identities: dict[str, Identity | None], made_dirs: list[Path],
                  undisabled: set[str], warn: Warn) -> None:
    """The checks after a bind session: its mountpoints removed, protected paths put back,
    set-id bits cleared, repositories the sandbox made renamed aside; each said with `warn`."""
    remove_mountpoints(root, made_dirs)
    check_tree(root, tree, started_ns, identities, undisabled, warn)


def remove_mountpoints(root: Path, made_dirs: list[Path]) -> None:
    """The empty mountpoints the engine created for missing protected paths, removed."""
    for path in made_dirs:
        with contextlib.suppress(OSError):
            _rmdir_beneath(root, path)


def check_tree(root: Path, tree: TreeScan, started_ns: int,
               identities: dict[str, Identity | None], undisabled: set[str],
               warn: Warn) -> None:
    """`after_session`'s checks of the tree, also run while a session lives when nothing runs
    in its container (a toolbox that died skipped its own after its last command)."""
    try:  # the protected paths first: a walk of the whole tree can fail (too big)
        done = Sweep()
        check_replaced(root, identities, done)
        wanted: dict[Identity, str] = {}
        for rel in [*done.missing, *done.replaced]:
            known = identities.get(rel)
            if known:
                wanted[known] = rel
        done = sweep(root, tree, started_ns, done, wanted)
    except (OSError, SandboxAgentError) as exc:
        warn(f"could not check the whole project after the session: {exc}")
    try:  # every new `.git`: the toolbox's own renaming is skipped when a command kills it
        disable_git(root, sorted(set(done.new_git) | not_at_start(tree, undisabled)), done)
        for aside in done.renamed.values():
            fifos_below(root, aside, started_ns, done)
    except (OSError, SandboxAgentError) as exc:
        warn(f"could not check the project after the session: {exc}")
    report(done, warn)


def report(done: Sweep, warn: Warn) -> None:
    """What the checks did, one line each."""
    for rel in done.missing:
        where = f"it is now at {done.now_at[rel]}" if rel in done.now_at else \
            "find it in the project"
        warn(f"{rel} is protected (git on the host runs it) and is gone: a command "
             f"moved it away; {where}: put it back after review")
    for rel, aside in done.replaced.items():
        where = f"the original is now at {done.now_at[rel]}" if rel in done.now_at else \
            "find the original"
        warn(f"{rel} is protected (git runs it) but was replaced during the session; "
             f"the replacement was moved to {aside}: {where} and review")
    for rel in done.disabled:
        if rel not in done.new_git:
            warn(f"disabled the repository (or look-alike) the sandbox made at {rel}")
    for rel, why in done.not_disabled.items():
        warn(f"a repository look-alike the sandbox made at {rel} could not be disabled "
             f"({why}); review its config and hooks before running git there")
    for rel in done.setid_cleared:
        warn(f"removed the set-id bits of {rel}: set-id files are not allowed")
    for rel in done.fifos_removed:
        warn(f"removed the FIFO the sandbox left at {rel}: git and editors on the host block "
             "opening one")
    for rel in done.new_git:
        if rel in done.renamed:
            warn(f"a git repository appeared during the session at {rel}: renamed to "
                 f"{done.renamed[rel]} so git on the host runs nothing from it; review "
                 "its hooks and config before you rename it back (if you made it)")
        else:
            warn(f"a git repository appeared during the session at {rel} and could "
                 "not be renamed; review its hooks and config before running git there")


def _rmdir_beneath(root: Path, path: Path) -> None:
    """rmdir `path` under `root` without following a link the sandbox put on the way."""
    parts = path.relative_to(root).parts
    fd = open_beneath(root, parts[:-1])
    try:
        as_owner(fd, lambda: os.rmdir(parts[-1], dir_fd=fd))
    finally:
        os.close(fd)


def missing_chain(root: Path, rel: str) -> list[Path]:
    """The directories of `rel` that do not exist yet, deepest first (the engine makes them
    as mountpoints; `after_session` removes them)."""
    chain, path = [], root / rel
    while path != root and not os.path.lexists(path):
        chain.append(path)
        path = path.parent
    return chain
