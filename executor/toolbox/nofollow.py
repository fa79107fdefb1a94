"""Reaching a path below a directory without following any link: one rule, for both sides.

The toolbox renames and chmods what a command made; the host, after a session, checks and
renames what the sandbox left, and reads files of its own that a hostile tree could have put
a link or a FIFO in place of. Both walk down one name at a time with O_NOFOLLOW, so a link
swapped in anywhere on the way fails the step instead of leading elsewhere. A leaf of the
toolbox package (standard library only, Python >= 3.9): the host imports it.
"""

from __future__ import annotations

import contextlib
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    T = TypeVar("T")


def open_beneath(root: str | os.PathLike[str] | int, parts: Sequence[str],
                 flags: int = os.O_PATH) -> int:
    """A descriptor (`flags`: O_PATH, or O_RDONLY to list it) of the directory `root/parts…`,
    each name below `root` opened without following a link; `root` may be a descriptor (the
    caller keeps it)."""
    fd = os.dup(root) if isinstance(root, int) else os.open(root, flags | os.O_DIRECTORY
                                                             | os.O_CLOEXEC)
    step = flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        for name in parts:
            below = as_owner(fd, lambda: os.open(name, step, dir_fd=fd))  # noqa: B023
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(path: str | os.PathLike[str], flags: int = os.O_PATH) -> int:
    """A descriptor of the directory `path`, its own name opened without following a link
    (a directory of ours whose parents are ours too: a lock directory's session folders)."""
    head, name = os.path.split(os.path.normpath(os.fspath(path)))
    return open_beneath(head or ".", [name], flags)


def open_parent(root: str | os.PathLike[str], path: str) -> tuple[int, str]:
    """(O_PATH descriptor of `path`'s directory, opened from `root` without following any
    link; `path`'s last name)."""
    *dirs, leaf = path.split("/")
    return open_beneath(root, dirs), leaf


def as_owner(folder: int, act: Callable[[], T]) -> T:
    """`act()` on something in the directory `folder`; refused, once more with the directory's
    owner rights given back for a moment when it is ours: a command (our uid) can take them
    and give them back itself, so a check of what it left must not stop there. Without
    permission override (not root, or root without CAP_DAC_OVERRIDE) this is all that lets
    the host see and undo what such a command did."""
    try:
        return act()
    except PermissionError:
        mode = take_rights(folder)
        if mode is None:
            raise
        try:
            return act()
        finally:
            put_back(folder, mode)


def take_rights(folder: int) -> int | None:
    """Give the owner rwx on the directory `folder` when it is ours and lacks some; the mode
    to put back (`put_back`), or None when nothing changed."""
    info = os.fstat(folder)
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() \
            or mode & stat.S_IRWXU == stat.S_IRWXU:
        return None
    try:
        os.chmod(f"/proc/self/fd/{folder}", mode | stat.S_IRWXU)  # no fchmod on O_PATH
    except OSError:  # a read-only mount, say: what was refused stays refused
        return None
    return mode


def put_back(folder: int, mode: int | None) -> None:
    """The mode `take_rights` changed, back (nothing when it changed none)."""
    if mode is not None:
        with contextlib.suppress(OSError):
            os.chmod(f"/proc/self/fd/{folder}", mode)


def open_listing(parent: int | None, name: str) -> tuple[int, int | None]:
    """(a descriptor to list the directory `name` beneath `parent` by, never through a link;
    the mode to `put_back` when done with it, or None). A directory of ours that lacks some
    owner rights has them while it is listed and walked, so that its entries can be looked
    at too (`parent` None: `name` is a path, the walk's root, followed as given)."""
    flags = os.O_DIRECTORY | os.O_CLOEXEC | (0 if parent is None else os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | flags, dir_fd=parent)
    except PermissionError:
        path = (os.open(name, os.O_PATH | flags) if parent is None else
                as_owner(parent, lambda: os.open(name, os.O_PATH | flags, dir_fd=parent)))
        try:
            mode = take_rights(path)
            try:
                return os.open(f"/proc/self/fd/{path}", os.O_RDONLY | os.O_DIRECTORY
                               | os.O_CLOEXEC), mode
            except BaseException:
                put_back(path, mode)
                raise
        finally:
            os.close(path)
    try:
        return fd, take_rights(fd)
    except BaseException:
        os.close(fd)
        raise


def unlink_fifo(root: str | os.PathLike[str], path: str) -> bool:
    """Remove `root/path` when it is a FIFO (True), reached without following a link: git
    and editors on the host block for ever opening one where they expect a file."""
    parent, leaf = open_parent(root, path)
    try:
        return as_owner(parent, lambda: _unlink_fifo_in(parent, leaf))
    finally:
        os.close(parent)


def _unlink_fifo_in(parent: int, leaf: str) -> bool:
    if not stat.S_ISFIFO(os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode):
        return False
    os.unlink(leaf, dir_fd=parent)
    return True


def open_leaf(root: str | os.PathLike[str], path: str) -> int:
    """An O_PATH descriptor of `root/path` itself, no link followed on the way or at the end
    (a link is the link): what is checked through it is what is changed through it."""
    parent, leaf = open_parent(root, path)
    try:
        return os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)


def read_plain(path: str | os.PathLike[str], most: int | None = None,
               owner: int | None = None) -> bytes | None:
    """The bytes of the regular file at `path`, or None: a link (not followed), a FIFO or a
    device (opened without blocking, never read), larger than `most`, not owned by `owner`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (owner is not None and info.st_uid != owner):
            return None
        if most is not None and info.st_size > most:
            return None
        return stream.read() if most is None else stream.read(most)
