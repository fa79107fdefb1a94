"""`git diff` on the host, hardened against the repository's own configuration: git runs
through a git directory of our own (`Shadow`), and a project tree that would lend itself
another repository's history is refused."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from executor.errors import ConfigError
from executor.state import open_private

_SAFE_GIT = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
             "-c", "diff.external=", "-c", "core.pager=cat", "-c", "protocol.allow=never")
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_LAZY_FETCH": "1"}
_MAX_GIT_FILE = 256 << 20
"""The index and packed-refs are copied up to this size (bigger: the diff is refused)."""


class Shadow:
    """A git directory of our own for the repository around `root`: its refs, HEAD and index
    copied (read without following links), its objects reached through `alternates`, and a
    config that says nothing but the object format. git then reads no config the repository
    wrote: no filter, diff driver, fsmonitor, hook, lazy fetch of a partial clone or
    transport command of it can run on the host, however it is spelled or included."""

    def __init__(self, root: Path) -> None:
        import tempfile

        self.root = root
        self.top, git_dir, common = _find_repository(root)
        self._tmp = tempfile.TemporaryDirectory(prefix="sandbox-agent-review-")
        self.dir = Path(self._tmp.name)
        fmt = dict(config_values_of(common / "config")).get("extensions.objectformat", "")
        version = "1" if fmt else "0"
        (self.dir / "config").write_text(
            f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
            + (f"[extensions]\n\tobjectformat = {fmt}\n" if re.fullmatch(r"sha1|sha256", fmt)
               else ""))
        (self.dir / "objects" / "info").mkdir(parents=True)
        (self.dir / "objects" / "info" / "alternates").write_text(
            os.path.realpath(common / "objects") + "\n")
        for name, source in (("HEAD", git_dir / "HEAD"), ("packed-refs", common / "packed-refs"),
                             ("index", git_dir / "index")):
            _copy_regular(source, self.dir / name)
        _copy_tree(common / "refs", self.dir / "refs")
        (self.dir / "info").mkdir()
        _copy_regular(common / "info" / "exclude", self.dir / "info" / "exclude")
        for shared in _regular_names(git_dir, "sharedindex."):  # a split index's other half
            _copy_regular(git_dir / shared, self.dir / shared)

    def run(self, *args: str) -> str:
        env = {**os.environ, **_GIT_ENV, "GIT_DIR": str(self.dir),
               "GIT_WORK_TREE": str(self.top), "GIT_INDEX_FILE": str(self.dir / "index")}
        for name in ("GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                     "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_SSH", "GIT_SSH_COMMAND",
                     "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_OBJECT_DIRECTORY",
                     "GIT_COMMON_DIR"):
            env.pop(name, None)
        return _run_git(["git", *_SAFE_GIT, *args], args[0], cwd=self.root, env=env)

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> Shadow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def config_values_of(path: Path) -> list[tuple[str, str]]:
    from executor.gitsafety.hostgit import config_values

    return config_values(path)


def _find_repository(root: Path) -> tuple[Path, Path, Path]:
    """(work tree top, git dir, common dir) of the repository `root` is in: the nearest `.git`
    at or above it (a directory, or a `gitdir:` file and its `commondir`)."""
    from executor.gitsafety.hostgit import common_dir, gitdir_target

    for top in (root, *root.parents):
        entry = top / ".git"
        if entry.is_symlink() or not os.path.lexists(entry):
            continue
        git_dir = entry if entry.is_dir() else gitdir_target(entry)
        if git_dir is None:
            break
        common = common_dir(git_dir) or git_dir
        if not (common / "objects").is_dir():
            break
        _refuse_borrowed(top, git_dir, common)
        return top, git_dir, common
    raise ConfigError(f"{root} is not in a git repository",
                      fix="--diff-base needs a git repository and an existing ref")


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _refuse_borrowed(top: Path, git_dir: Path, common: Path) -> None:
    """The project tree must not lend itself another repository's history: a `.git` file, a
    `commondir` or an `alternates` naming a git dir outside the project would put that
    repository's files (another checkout, a private clone) into the diff the model is sent.
    A git dir outside is taken only when it names this work tree back, as `git worktree add`
    (`gitdir`) and a submodule (`core.worktree`) leave it: files the project cannot write."""
    top = top.resolve()
    fix = ("review the repository's own checkout, or make this one stand alone "
           "(`git repack -a -d`, then remove .git/objects/info/alternates)")
    if not _inside(git_dir, top) and not _names_back(git_dir, top):
        raise ConfigError(f"{top}/.git points at a git dir outside the project ({git_dir}) "
                          "that does not name this work tree back", fix=fix)
    if _inside(git_dir, top) and not _inside(common, top):
        raise ConfigError(f"{git_dir} borrows the history of a git dir outside the project "
                          f"({common})", fix=fix)
    if not _inside(common, top):
        return  # the host's own linked worktree or submodule: the project wrote none of it
    # The object store, and every alternate git would follow from it (git goes 5 deep), must
    # stay in the project: a linked `objects` or a chain of alternates reaches any clone.
    todo, seen = [(common / "objects", 0)], set()
    while todo:
        objects, depth = todo.pop()
        real = objects.resolve()
        if not _inside(real, top):
            raise ConfigError(f"{objects} leads to objects outside the project ({real})",
                              fix=fix)
        if real in seen or depth > _MAX_ALTERNATES_DEPTH:
            continue
        seen.add(real)
        for line in _read_optional(real / "info" / "alternates").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                todo.append((real / line, depth + 1))


_MAX_ALTERNATES_DEPTH = 5
"""How deep git follows alternates of alternates."""


def _names_back(git_dir: Path, top: Path) -> bool:
    back = _read_optional(git_dir / "gitdir").strip()
    if back and (git_dir / back).resolve() == top / ".git":
        return True
    worktree = dict(config_values_of(git_dir / "config")).get("core.worktree", "")
    return bool(worktree) and (git_dir / worktree).resolve() == top


def _read_optional(path: Path) -> str:
    """A small regular file's text, read without following a link or blocking; else ""."""
    from executor.gitsafety.hostgit import small_text

    return small_text(path) or ""


def _copy_regular(source: Path, target: Path) -> None:
    """Copy `source` when it is a regular file (no link followed); nothing when it is absent."""
    try:
        fd = open_private(source, os.O_RDONLY, owner=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(_MAX_GIT_FILE + 1)
        times = os.fstat(stream.fileno())
    if len(data) > _MAX_GIT_FILE:
        raise ConfigError(f"{source} is too big to review from ({len(data)} bytes or more)")
    target.write_bytes(data)
    # The index's own mtime tells git which entries are "racily clean" (changed within the
    # same clock tick as the index was written): a copy must keep it, or such a change is
    # taken for no change.
    os.utime(target, ns=(times.st_atime_ns, times.st_mtime_ns))


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a refs tree: directories and regular files only, never through a link."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        entries = list(os.scandir(source))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _copy_tree(Path(entry.path), target / entry.name)
        elif entry.is_file(follow_symlinks=False):
            _copy_regular(Path(entry.path), target / entry.name)


def _regular_names(folder: Path, prefix: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder)
                if e.name.startswith(prefix) and e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _run_git(command: list[str], what: str, *, cwd: Path, env: dict[str, str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, timeout=60, check=False, env=env,
                              cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run git: {exc}", fix="install git") from exc
    if done.returncode != 0:
        reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no reason"])[0]
        raise ConfigError(f"git {what} failed: {reason[:300]}",
                          fix="--diff-base needs a git repository and an existing ref")
    return done.stdout.decode("utf-8", "replace")


def git_diff(root: Path, base: str, shadow: Shadow | None = None) -> str:
    """`git diff BASE` of the working tree, through a git dir of our own (`Shadow`)."""
    if shadow is None:
        with Shadow(root) as own:
            return git_diff(root, base, own)
    try:
        return shadow.run("diff", "--no-color", "--no-ext-diff", "--no-textconv",
                          "--end-of-options", base, "--")
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("git diff failed", f"git diff {base} failed"),
                          fix=exc.fix) from None
