"""Where sandbox-agent keeps what it trusts: the per-user state and config dirs.

Nothing here lives in the project tree. A clone or a pull request ships whatever files it likes
(look-alikes of our state, symlinks into the host, FIFOs), and the sandbox can write anywhere in
the tree, so the host controller never reads permissions, sessions or audit records from it.

    state home   $SANDBOX_AGENT_STATE_DIR, else $XDG_STATE_HOME/sandbox-agent,
                 else ~/.local/state/sandbox-agent                         (mode 0700)
      projects/<name>-<16 hex of sha256(real path of the root)>/
        root         the project's real path (checked when read back)
        sessions/    one NDJSON file a session          (docs/SESSIONS.md)
        audit/       hash-chained day files             (docs/AUDIT.md)
        trust.json   hashes of project files the person trusted (project policy)
    config home  $SANDBOX_AGENT_CONFIG_DIR, else $XDG_CONFIG_HOME/sandbox-agent,
                 else ~/.config/sandbox-agent
        policy.toml  the user-level policy, always trusted

Every file is created 0600 in a 0700 directory we own and is opened without following links
and without blocking (`O_NOFOLLOW | O_NONBLOCK`), then checked to be a regular file we own:
a symlink or FIFO planted in our place is an error, never followed and never a hang.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from executor.errors import ConfigError, SessionError

LEGACY_DIR = ".sandbox-agent"
"""The in-tree state dir of versions before 0.2: never read as trusted any more."""
ROOT_MARKER = "root"
"""File in a project's state dir holding the project's real path."""
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_LINKS = 40
"""Links followed resolving one path, as Linux's own limit."""


def _xdg(variable: str, override: str, fallback: str) -> Path:
    explicit = os.environ.get(override)
    if explicit:
        return Path(explicit).expanduser().absolute()
    base = os.environ.get(variable) or os.path.expanduser(fallback)
    return Path(base).absolute() / "sandbox-agent"


def state_home() -> Path:
    """The per-user state dir (not created)."""
    return _xdg("XDG_STATE_HOME", "SANDBOX_AGENT_STATE_DIR", "~/.local/state")


def config_home() -> Path:
    """The per-user config dir (not created)."""
    return _xdg("XDG_CONFIG_HOME", "SANDBOX_AGENT_CONFIG_DIR", "~/.config")


def real_root(root: Path | str) -> Path:
    """The project root with every link resolved: the identity state is keyed by."""
    return Path(os.path.realpath(os.fspath(root)))


def project_key(root: Path | str) -> str:
    """`<name>-<16 hex>`: readable, and unique per real path of the root."""
    real = real_root(root)
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    name = _SAFE_NAME.sub("_", real.name)[:40].strip("._-") or "root"
    return f"{name}-{digest}"


def project_dir(root: Path | str) -> Path:
    """The state dir of one project (not created)."""
    return state_home() / "projects" / project_key(root)


SESSION_SUFFIX = ".ndjson"
"""How a session file's name ends (executor/session.py has the format)."""


def sessions_dir(root: Path | str) -> Path:
    """Where the sessions of `root` live (not created); here, not in executor/session.py, so
    that finding none imports no pydantic."""
    return project_dir(root) / "sessions"


def ensure_project_dir(root: Path | str) -> Path:
    """The project's state dir, created private; refuses a state home inside the project."""
    real = real_root(root)
    if not real.is_dir():
        raise ConfigError(f"project root {root} is not a directory", fix="pass an existing --root")
    check_outside(real, state_home(), "the state dir (SANDBOX_AGENT_STATE_DIR)")
    home = private_dir(state_home(), parents=True)
    path = private_dir(private_dir(home / "projects") / project_key(real))
    _write_marker(path / ROOT_MARKER, real)
    return path


def _write_marker(path: Path, real: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise SessionError(f"cannot create {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "wb") as out:
        out.write(os.fsencode(real) + b"\n")


def check_outside(root: Path, path: Path, what: str,
                  fix: str = "point it at a directory outside the project") -> None:
    """ConfigError when `path` lies inside the project `root` (a real path) or reaches into it
    on the way (`reaches_into`): the sandbox and the repository could rewrite what it names."""
    hit = reaches_into(root, path)
    if hit is not None:
        written = _absolute(path)
        through = "" if hit == written or hit in written.parents else f" (through {hit})"
        raise ConfigError(
            f"{what} {path} is inside the project root {root}{through}, where the sandbox and "
            "the repository could read or forge it", fix=too_wide(root) or fix)


def check_install_outside(root: Path) -> None:
    """ConfigError when sandbox-agent's own installation (its Python environment, its code)
    lies in the project: the sandbox could write a `.pth` file or a module there that the
    next `sandbox-agent` runs on the host, or a `pip.conf` its next `--network pypi` reads
    (red-team round 26: a checkout's `.venv`)."""
    import site
    import sys

    import executor

    real = real_root(root)
    fix = "install sandbox-agent outside the project (pipx, or a venv elsewhere), or run " \
          "with --read-only"
    installed = (("sandbox-agent's Python environment", Path(sys.prefix)),
                 ("the Python it runs on", Path(sys.base_prefix)),
                 ("sandbox-agent's code", Path(executor.__file__).parent))
    for what, path in installed:
        check_outside(real, path, what, fix=fix)
    # a root inside any of them, or inside the site-packages the host imports from (red-team
    # round 27; not every sys.path entry: a script's own directory is one)
    imported = [Path(entry) for entry in [*site.getsitepackages(), site.getusersitepackages()]
                if entry and os.path.isabs(entry)]
    for what, path in [*installed, *(("a directory Python imports from", p) for p in imported)]:
        outer = real_root(path)
        if real == outer or outer in real.parents:
            raise ConfigError(f"the project root {root} is inside {what} ({outer}): the "
                              "sandbox could change what sandbox-agent runs on the host",
                              fix="pass a project directory of your own as --root")


def too_wide(root: Path) -> str | None:
    """The fix for a root nobody means (`--root /`, `--root ~`): no setting makes it safe."""
    real = real_root(root)
    if real == real.parent or real == real_root(Path.home()):
        where = "the whole file system" if real == real.parent else "your home directory"
        return f"--root {root} is {where}: pass the project's own directory (--root ./proj)"
    return None


def reaches_into(root: Path, path: Path) -> Path | None:
    """The first place on the way to `path` that lies in the project `root` (a real path): the
    path as written, a link followed on the way (one the sandbox could re-point) or the real
    target; None when all lie outside.

    Decided component by component, never by a string prefix, following each link as the
    kernel would: `<root>/p.toml` linked to a file outside is inside, and so is `~/p.toml`
    linked into the root. Passing through the root itself (`<root>/../x`) is not inside.
    """
    todo = list(reversed(_absolute(path).parts[1:]))  # the next component last
    here, links = Path("/"), 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            here = here.parent  # `here` has no link in it: its parent is the real one
            continue
        step = here / part
        if root in step.parents:
            return step
        target = _link(step)
        if target is None:
            here = step
            continue
        links += 1
        if links > _MAX_LINKS:  # the kernel gives up (ELOOP): so do we, closed
            return step
        here = Path("/") if target.is_absolute() else here
        todo.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
    return here if here == root or root in here.parents else None


def _absolute(path: Path) -> Path:
    """`path` from `/`, with its `..` kept (a lexical `normpath` is wrong across links)."""
    return path if path.is_absolute() else Path.cwd() / path


def _link(path: Path) -> Path | None:
    """Where the link `path` points, or None when it is no link (or not there)."""
    try:
        return Path(os.readlink(path))
    except OSError:
        return None


def private_dir(path: Path, *, parents: bool = False) -> Path:
    """Create `path` (mode 0700) or check an existing one: a real directory we own."""
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SessionError(f"cannot create {path}: {exc.strerror}") from exc
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):  # a symlink here would redirect sessions and audit
        raise SessionError(f"{path} is not a directory", fix=f"remove it: rm {path}")
    if info.st_uid != os.geteuid():
        raise SessionError(
            f"{path} is owned by uid {info.st_uid}, not by you", fix=f"chown -R $(id -u) {path}"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    return path


def own_dir(path: Path, *, make: bool = False) -> Path:
    """`path` when it is a real directory of ours nobody else may enter (made 0700 when
    `make`), else OSError: the lock dir's records and caches are trusted only in one."""
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise OSError(f"{path} is not a directory of ours alone")
    return path


def open_private(path: Path, flags: int, mode: int = 0o600, *, owner: bool = True) -> int:
    """An fd for a state file: never through a link, never blocking, only a regular file we own.

    `owner=False` drops the ownership check (reading a file the person named, e.g. an export).

    Raises OSError (ELOOP for a symlink, EINVAL-like errors for the rest) so callers translate it
    into their own error where they know the context.
    """
    fd = os.open(path, flags | _OPEN_FLAGS, mode)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        if owner and info.st_uid != os.geteuid():
            raise OSError(f"{path} is owned by uid {info.st_uid}, not by you")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def replacing(path: Path, mode: int = 0o600) -> Iterator[TextIO]:
    """A stream to write what `path` is to hold: a new file next to it (UTF-8, newlines kept),
    renamed onto `path` once the block ends without an error, removed when it raises.

    For a file the person names (`--output`) in a tree a repository ships: a symlink at that
    name is replaced, never followed, and a FIFO, device or directory there is refused (an
    OSError naming it) before anything is written, so nothing hangs.
    """
    check_replaceable(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, mode)
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def check_replaceable(path: Path) -> None:
    """OSError unless `path` is free, a regular file or a link (which `replacing` replaces)."""
    with contextlib.suppress(FileNotFoundError):
        kind = stat.S_IFMT(os.lstat(path).st_mode)
        if kind not in (stat.S_IFREG, stat.S_IFLNK):
            there = _KINDS.get(kind, "something else")
            raise OSError(errno.EINVAL, f"{there} is there, not a regular file")


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device",
          stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}


def read_private(path: Path, limit: int | None = None) -> bytes:
    """The bytes of a state file (see `open_private`), at most `limit` of them."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as stream:
        return stream.read() if limit is None else stream.read(limit)


def regular_files(directory: Path, suffix: str) -> Iterator[Path]:
    """Entries of `directory` ending in `suffix` that are regular files (links are not)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
                yield directory / entry.name


def legacy_state(root: Path) -> Path | None:
    """`<root>/.sandbox-agent` when an older version left sessions or audit there."""
    legacy = Path(root) / LEGACY_DIR
    if not legacy.is_dir() or legacy.is_symlink():
        return None
    found = any((legacy / name).exists() or (legacy / name).is_symlink()
                for name in ("sessions", "audit"))
    return legacy if found else None


def legacy_notice(root: Path) -> str | None:
    """One line for a person whose project still holds an old in-tree state dir."""
    legacy = legacy_state(root)
    if legacy is None:
        return None
    return (
        f"{legacy} was written by an older sandbox-agent (or shipped by the repository); it is "
        f"ignored and never trusted. State now lives in {state_home()}. Delete it with "
        f"`rm -rf {legacy}` (an old audit trail there can still be checked with "
        f"`sandbox-agent audit verify --audit-dir {legacy / 'audit'}`)."
    )
