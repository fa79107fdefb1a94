"""Reading and writing the person's tree without being led astray by what is in it.

Every operation starts from a descriptor of the root and opens one component at a time with
O_NOFOLLOW | O_DIRECTORY, so a link anywhere on the way (planted by a repository, by the
sandbox in bind mode, or swapped in meanwhile) is an error, never followed. Files are opened
with O_NOFOLLOW | O_NONBLOCK and checked to be regular: a FIFO never blocks us. Writes are
atomic per file: a new file is written under a temporary name in the same directory, fsynced,
given its mode and renamed over the old name. The mode is the permission bits of the file it
replaces, with the executable bits as asked (a private 0600 file stays 0600), or 0644/0755 for
a new one (or the bits a removed file had, when `undo` puts it back); never a set-id bit.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from executor.toolbox.gitshape import kind_of
from executor.workspace.manifest import Entry, applied_mode, normal

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_PREFIX = ".sandbox-agent-apply-"


class Unsafe(OSError):
    """A path we will not touch: a link or a non-directory on the way, or a special file."""


@contextlib.contextmanager
def parent_dir(root: Path, path: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
    """(descriptor of `path`'s directory, last name); links on the way are refused.

    `create` makes missing directories (0755) on the way.
    """
    *dirs, leaf = path.split("/")
    fd = os.open(root, _DIR)
    try:
        for name in dirs:
            fd = _descend(fd, name, create)
        yield fd, leaf
    finally:
        os.close(fd)


def _descend(fd: int, name: str, create: bool) -> int:
    try:
        below = os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
        os.mkdir(name, 0o755, dir_fd=fd)
        below = os.open(name, _DIR, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unsafe(exc.errno, f"{name} is a link or not a directory") from exc
        raise
    os.close(fd)
    return below


def state(root: Path, path: str) -> Entry | None:
    """The host's current state of `path` (None: absent); Unsafe for a link on the way."""
    try:
        with parent_dir(root, path) as (fd, leaf):
            st = os.lstat(leaf, dir_fd=fd)
            return _entry_of(fd, leaf, st)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise Unsafe(errno.ENOTDIR, f"a parent of {path} is not a directory") from exc


def peek(root: Path, path: str) -> Entry | None:
    """What `path` is on the host, without reading a file's content: its kind, and a link's
    target (None: absent); Unsafe for a link on the way."""
    try:
        with parent_dir(root, path) as (fd, leaf):
            st = os.lstat(leaf, dir_fd=fd)
            what = kind_of(st.st_mode)
            target = os.readlink(leaf, dir_fd=fd) if what == "symlink" else None
            return Entry(what, st.st_mode, target=target)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise Unsafe(errno.ENOTDIR, f"a parent of {path} is not a directory") from exc


def _entry_of(fd: int, leaf: str, st: os.stat_result) -> Entry:
    kind = kind_of(st.st_mode)
    if kind == "file":
        digest = _hash(fd, leaf, st)
        return Entry("file", normal(kind, st.st_mode), st.st_size, digest)
    if kind == "symlink":
        return Entry("symlink", 0o777, target=os.readlink(leaf, dir_fd=fd))
    if kind == "dir":
        return Entry("dir", 0o755)
    raise Unsafe(errno.EINVAL, f"{leaf} is not a regular file, directory or link")


def _hash(fd: int, leaf: str, st: os.stat_result) -> str:
    file_fd = os.open(leaf, _READ, dir_fd=fd)
    with os.fdopen(file_fd, "rb") as f:
        if os.fstat(file_fd).st_ino != st.st_ino:
            raise Unsafe(errno.ESTALE, f"{leaf} was replaced while it was read")
        digest = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_file(root: Path, path: str, limit: int) -> bytes | None:
    """The content of a regular file (at most `limit` bytes), or None when it is not one.
    Anything else (a FIFO, a device) is refused from its lstat, before any open."""
    try:
        with parent_dir(root, path) as (fd, leaf):
            st = os.lstat(leaf, dir_fd=fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            file_fd = os.open(leaf, _READ, dir_fd=fd)
            with os.fdopen(file_fd, "rb") as f:
                now = os.fstat(file_fd)
                if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
                    return None  # swapped since the lstat
                data = f.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def write_file(root: Path, path: str, data: bytes, mode: int, *, bits: int | None = None
               ) -> None:
    """Put `data` at `path` atomically, replacing what is there. `mode` (0644 or 0755) says
    whether it is executable; its permission bits are those of the file it replaces, else
    `bits` (a removed file's, put back), else `mode` (manifest.applied_mode)."""
    with parent_dir(root, path) as (fd, leaf):
        current = _file_bits(fd, leaf)
        temporary = _temporary_name(leaf)
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            _write_all(out, data)
            os.fchmod(out, applied_mode(current if current is not None else bits, mode))
            os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(temporary, dir_fd=fd)
            raise
        os.close(out)
        _rename_into_place(fd, temporary, leaf)


def _file_bits(fd: int, leaf: str) -> int | None:
    """The permission bits of the regular file `leaf` (None: absent or not a file)."""
    try:
        st = os.lstat(leaf, dir_fd=fd)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def file_bits(root: Path, path: str) -> int | None:
    """The permission bits of the regular file at `path` (None: absent or not a file)."""
    try:
        with parent_dir(root, path) as (fd, leaf):
            return _file_bits(fd, leaf)
    except OSError:
        return None


def write_link(root: Path, path: str, target: str) -> None:
    """Put a link to `target` at `path` atomically, replacing what is there."""
    with parent_dir(root, path) as (fd, leaf):
        temporary = _temporary_name(leaf)
        os.symlink(target, temporary, dir_fd=fd)
        _rename_into_place(fd, temporary, leaf)


def _rename_into_place(fd: int, temporary: str, leaf: str) -> None:
    try:
        existing = os.lstat(leaf, dir_fd=fd)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        os.unlink(temporary, dir_fd=fd)
        raise IsADirectoryError(errno.EISDIR, f"{leaf} is a directory")
    try:
        os.rename(temporary, leaf, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a link, never follows
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=fd)
        raise
    os.fsync(fd)


def make_dir(root: Path, path: str) -> None:
    """Create directory `path` (0755); an existing directory is fine."""
    with parent_dir(root, path) as (fd, leaf):
        try:
            os.mkdir(leaf, 0o755, dir_fd=fd)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(leaf, dir_fd=fd).st_mode):
                raise


def remove(root: Path, path: str, kind: str) -> None:
    """Remove `path`: a file or link (unlink), or an empty directory (rmdir)."""
    with parent_dir(root, path) as (fd, leaf):
        if kind == "dir":
            os.rmdir(leaf, dir_fd=fd)
        else:
            if stat.S_ISDIR(os.lstat(leaf, dir_fd=fd).st_mode):
                raise IsADirectoryError(errno.EISDIR, f"{leaf} is a directory")
            os.unlink(leaf, dir_fd=fd)


def _temporary_name(leaf: str) -> str:
    return f"{_TEMP_PREFIX}{secrets.token_hex(6)}-{leaf[:100]}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
