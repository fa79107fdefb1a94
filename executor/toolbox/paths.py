"""Paths the model names, resolved inside the root, and no-follow file helpers."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections import deque

from .nofollow import open_leaf
from .wire import ToolError

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Protocol

    class Rooted(Protocol):
        """What path rules need of the Context (declared here so that this module does not
        import context.py, which imports the modules that import this one)."""

        root: str
        roots: set[str]
        hidden: frozenset[str]
        readonly: frozenset[str]
        readonly_folded: frozenset[str]



# -- names that are not UTF-8 ---------------------------------------------------------------
# Linux names are bytes. Python decodes the ones that are not UTF-8 with surrogateescape (byte
# 0xE9 becomes U+DCE9), which no JSON reaches a model with (the host sends U+FFFD, a name
# nobody can pass back). The model reads and writes such a name with each of those bytes as
# `\xe9` and its backslashes doubled, as bash's $'...' reads it (docs/TOOLS.md).

_BYTE_ESCAPE = re.compile(r"\\x[89a-fA-F][0-9a-fA-F]")
_ESCAPES = re.compile(r"\\\\|\\x[89a-fA-F][0-9a-fA-F]")
_UNDECODED = re.compile("[\udc80-\udcff]")


def shown(path: str) -> str:
    r"""`path` as the model is to read it: unchanged, unless it has a byte that is not UTF-8
    (or text that reads as such an escape): then those bytes as `\xNN`, backslashes doubled."""
    if not _UNDECODED.search(path) and not _BYTE_ESCAPE.search(path):
        return path
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else
                   "\\\\" if c == "\\" else c for c in path)


def unshown(raw: str) -> str:
    r"""The path a model wrote in `shown`'s form (`caf\xe9.txt`); one without a `\xNN` of a
    byte that is not ASCII is taken as written."""
    if not _BYTE_ESCAPE.search(raw):
        return raw
    return _ESCAPES.sub(lambda m: "\\" if m.group() == "\\\\" else
                        chr(0xDC00 + int(m.group()[2:], 16)), raw)


# -- paths ------------------------------------------------------------------------------------


def resolve(ctx: Rooted, raw: str, write: bool = False) -> str:
    """The real path inside the root for a path argument (`shown`'s form taken too), or a
    ToolError saying why not."""
    written, raw = raw, unshown(raw)
    if not raw.strip():
        raise ToolError("path is empty; give a path relative to the project root, "
                        "e.g. 'src/app.py'")
    if "\0" in raw:
        raise ToolError("path contains a NUL byte")
    if os.path.isabs(raw) and not any(_inside(r, os.path.normpath(raw)) for r in ctx.roots):
        raise ToolError(f"path '{written}' is outside the project root")
    real = os.path.realpath(os.path.join(ctx.root, raw))
    if not _inside(ctx.root, real):
        raise ToolError(f"path '{written}' is outside the project root")
    parts = rel(ctx, real).split("/")
    if parts[0] in ctx.hidden:
        raise ToolError(f"'{written}' is reserved and not accessible")
    # Nested ones too (a vendored repo's .git/hooks would run on the host as well), and names
    # met on the way: a link to a .git directory leaves no ".git" in the resolved path.
    met = parts + _names_on_the_way(ctx.root, raw) if write and ctx.readonly else []
    # Any case: on a case-insensitive host file system .GIT is .git.
    locked = sorted({name for name in met if name.lower() in ctx.readonly_folded})
    if locked:
        raise ToolError(f"'{written}' is inside {shown(locked[0])}, which is read-only in the "
                        "sandbox")
    return real


def _names_on_the_way(root: str, raw: str) -> list[str]:
    """Every name resolving raw from root passes through, symlink targets included."""
    names: list[str]
    names, todo, here, hops = [], deque(raw.split("/")), "/" if raw.startswith("/") else root, 0
    while todo:
        part = todo.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        names.append(part)
        path = os.path.join(here, part)
        try:
            target = os.readlink(path) if hops < 40 else None
        except OSError:
            target = None  # not a link, or missing: a plain name
        if target is None:
            here = path
            continue
        hops += 1
        todo.extendleft(reversed(target.split("/")))
        here = "/" if target.startswith("/") else here
    return names


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(os.path.join(root, ""))


def rel(ctx: Rooted, path: str) -> str:
    """`path` relative to the root, as the model should write it."""
    return os.path.relpath(path, ctx.root)


def os_error_text(ctx: Rooted, exc: OSError) -> str:
    """A short, clear text for an OSError a tool ran into."""
    name = exc.filename or ""
    if name and _inside(ctx.root, os.path.abspath(name)):
        name = rel(ctx, name)
    name = shown(name)
    texts: dict[int | None, str] = {
        errno.ENOENT: f"file not found: {name}",
        errno.EACCES: f"permission denied: {name}",
        errno.EPERM: f"operation not permitted: {name}",
        errno.EROFS: "read-only file system: the project is mounted read-only",
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EISDIR: f"'{name}' is a directory",
        errno.ENOTDIR: f"not a directory: a parent of '{name}' is a file",
        errno.EEXIST: f"'{name}' already exists and is not a directory",
        errno.ENAMETOOLONG: f"path too long: {name}",
        errno.ELOOP: f"too many levels of symbolic links: {name}",
        errno.EFBIG: f"file too large: {name}",
        errno.EMFILE: "too many open files in the sandbox",
        errno.ENOMEM: "out of memory in the sandbox",
    }
    return texts.get(exc.errno, f"{exc.strerror or exc}: {name}".rstrip(": "))


def _regular_file(real: str, path: str) -> os.stat_result:
    """Raise unless `real` is an existing regular file (never open a FIFO: it would block)."""
    info = os.stat(real)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"'{path}' is a directory; use list_files")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{path}' is not a regular file")
    return info


def _skipped(ctx: Rooted, parent: str, name: str) -> bool:
    return name == ".git" or (name in ctx.hidden and parent == ctx.root)


def _chmod_nofollow(root: str, path: str, ino: int, mode: int, kind: int = stat.S_IFREG) -> None:
    """chmod root/path; a symlink swapped in anywhere on the way cannot redirect it."""
    fd = open_leaf(root, path)
    try:
        info = os.fstat(fd)
        if stat.S_IFMT(info.st_mode) != kind or info.st_ino != ino:
            raise OSError(errno.ESTALE, "replaced since it was seen")
        os.chmod(f"/proc/self/fd/{fd}", mode)  # Linux has no fchmod on an O_PATH descriptor
    finally:
        os.close(fd)
