"""What in the project tree git on the host would run or read as config, and why.

Git runs code from a repository's own files: hooks in `.git/hooks` (or wherever `core.hooksPath`
points, and whatever a hook there links to), `core.fsmonitor` and friends in `.git/config` and
`config.worktree`, and any config file that config includes, at any depth. A repository can be
a `.git` directory, a `gitdir:` file pointing elsewhere, or a symlink, at any depth (vendored
code and `node_modules` included). `git_paths` finds all of them, each with its reason;
`protected_paths` turns them into the read-only mounts of a bind session (surface.py), and a
copy workspace's `apply` refuses changes to them (executor/workspace/gitrun.py). Paths that do
not exist yet but would be honoured (a `hooksPath` or include target) are `missing`: they get
an empty read-only mount so they cannot be created.

Config files are read as git reads them (executor/gitconfig.py: byte-order mark, escapes,
continued lines, both git versions' whitespace), following links as git does, and an include
is taken from the directory of the path git built, not of the file a link led to. What
cannot be known for certain is refused, never guessed: a config git would read that we cannot
(a FIFO, a device, over 1 MiB, a syntax error git stops at), and a link in the tree on the way
to any of these paths (a mount holds the file in place, not the link that leads to it).

Reading these files here is safe: they are opened without blocking, only when they are small
regular files, and only parsed, never executed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from executor import gitconfig
from executor.errors import ConfigError
from executor.gitsafety.walk import TreeScan
from executor.toolbox.nofollow import read_plain

MAX_MOUNTS = 512
"""Read-only mounts before the tree is refused (the engine slows down well before thousands)."""
_MAX_CONFIG = 1 << 20
_MAX_HOOKS = 1000
"""Entries of a hooks directory looked at for links."""
_MAX_HOPS = 40


@dataclass(frozen=True)
class Protected:
    """Read-only mounts over the root: existing paths, and missing ones to keep missing."""

    existing: tuple[str, ...]
    """Relative paths (files or directories) to bind read-only."""
    missing: tuple[str, ...]
    """Relative paths of directories that do not exist but git would honour."""



def protected_paths(root: Path, tree: TreeScan, *, global_configs: list[Path] | None = None
                    ) -> Protected:
    """Every path under `root` that git on the host would run code from, as read-only mounts.

    A config git reads that cannot be read with certainty, or a link in the tree on the way to
    what git runs (a mount cannot hold a link in place), is an error: the sandbox cannot be
    told what to protect.
    """
    found = git_paths(root, tree, global_configs=global_configs)
    found.refuse_unsure()
    return found.result()


def git_paths(root: Path, tree: TreeScan, *, global_configs: list[Path] | None = None
              ) -> GitPaths:
    """What git on the host reads as config or runs from the tree at `root`, and why."""
    root = Path(os.path.realpath(root))
    found = GitPaths(root)
    configs = global_configs if global_configs is not None else user_git_configs()
    repos = [(root / rel, kind) for rel, kind in tree.git_entries.items()]
    for rel in tree.git_dirs:  # a bare repository: its hooks run when someone pushes to it
        found.add(root / rel, "a bare git repository")
        found.repository(root / rel, [root / rel])
    enclosing = repos + enclosing_repos(root)
    for entry, kind in enclosing:
        worktree = entry.parent
        found.repository(worktree, found.git_dirs(entry, kind))
        for config in configs:
            found.config_paths(worktree, config)
    if not enclosing:  # no repository here: the person's hooks and includes may still be
        for config in configs:  # (red-team round 26: a dotfiles folder, an unpacked tarball)
            found.config_paths(root, config)
    return found


def enclosing_repos(root: Path) -> list[tuple[Path, str]]:
    """`.git` entries of the directories above the root (a monorepo the project sits in)."""
    repos = []
    for parent in root.parents:
        entry = parent / ".git"
        if os.path.lexists(entry):
            kind = "symlink" if entry.is_symlink() else "dir" if entry.is_dir() else "file"
            repos.append((entry, kind))
    return repos


class GitPaths:
    """Paths git on the host reads as config or runs, collected while reading repositories
    and their config (relative to the root, each with the reason it counts)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.existing: dict[str, str] = {}
        self.missing: dict[str, str] = {}
        self.links: dict[str, str] = {}
        """Links in the tree that git passes on the way to one of these paths."""
        self.unsure: dict[str, str] = {}
        """Config files git reads that cannot be read with certainty -> why."""
        self.crowded: set[str] = set()
        """Directories git reads from that hold more than _MAX_HOOKS entries: what is past the
        cap cannot be checked (red-team round 13 hid a hard-linked `commondir` there)."""
        self.hardlinked: dict[str, int] = {}
        """Hooks, config files and `.git` files with more than one name -> how many: a
        read-only mount guards a name, not the file, so a write through another name in the
        tree would change what git runs or reads."""
        self.configs: dict[str, set[tuple[Path, Path]]] = {}
        """Config files in the tree -> (work tree, directory includes are taken from)."""
        self._read: set[tuple[Path, Path]] = set()
        self._parsed: dict[Path, gitconfig.Parsed] = {}

    def add(self, target: Path, why: str) -> None:
        """Protect `target` when it lies inside the root."""
        rel = _relative(self.root, target)
        if rel is not None:
            into = self.existing if os.path.lexists(target) else self.missing
            into.setdefault(rel, why)

    def resolve(self, path: Path, why: str) -> Path:
        """`path` with every link followed (as the kernel does for git); links met inside the
        root are kept: re-pointed, they would send git elsewhere."""
        real, links = _resolve(path)
        for link in links:
            rel = _relative(self.root, link)
            if rel is not None and rel != "." and ".git" not in rel.lower().split("/"):
                # (a .git link is the toolbox's to guard: it quarantines a new one)
                self.links.setdefault(rel, f"a link git follows to {self.show(path)} ({why})")
        return real

    def show(self, path: Path) -> str:
        """`path` relative to the root when inside it (for messages)."""
        rel = _relative(self.root, Path(os.path.abspath(path)))
        return str(path) if rel is None else rel

    def paths(self) -> dict[str, str]:
        """Every path found (existing, missing, links) -> why git reads or runs it."""
        return {**self.missing, **self.existing, **self.links}

    def git_dirs(self, entry: Path, kind: str) -> list[Path]:
        """The git directories a `.git` entry stands for, each protected."""
        if kind == "dir":
            dirs = [entry]
        elif kind == "file":
            self.add(entry, "a .git file")  # rewritten, it would point at a planted repository
            self.names(entry)
            target = gitdir_target(entry)
            dirs = [target] if target else []
        elif kind == "symlink":
            real = Path(os.path.realpath(entry))
            if real.is_file():  # a link to a `.git` file: git reads that file the same way
                self.add(real, "a .git file (through the link .git)")
                self.names(real)
                target = gitdir_target(entry, real)
                dirs = [target] if target else []
            else:
                dirs = [real]
        else:
            dirs = []
        dirs += [c for d in dirs if (c := common_dir(d)) is not None]
        for git_dir in dirs:
            if os.path.isdir(git_dir):
                self.add(git_dir, "a git directory")
        return dirs

    def repository(self, worktree: Path, git_dirs: list[Path]) -> None:
        """The config files and hooks of one repository (its git dirs and their common dir)."""
        for git_dir in git_dirs:
            hooks = git_dir / "hooks"
            if os.path.islink(hooks):  # `ln -s ../githooks .git/hooks`: git runs what is there
                why = f"git runs the hooks in it ({self.show(hooks)} links to it)"
                hooks = self.resolve(hooks, why)
                self.add(hooks, why)
            self.hook_links(hooks)
            for name in ("config", "config.worktree"):
                self.config_paths(worktree, git_dir / name)
            self.top_files(git_dir)

    def top_files(self, git_dir: Path) -> None:
        """Second names of the files at the top of a git directory and of its linked worktrees'
        (`commondir`, `gitdir`, `HEAD`, `config` …): git reads them to find the rest of the
        repository, so one rewritten through another name sends it to a planted config (red-team
        round 12: `worktrees/<name>/commondir`)."""
        worktrees = [e for e in self.listing(git_dir / "worktrees")
                     if e.is_dir(follow_symlinks=False)]
        for folder in [git_dir, *(Path(e.path) for e in worktrees)]:
            for entry in self.listing(folder):
                self.names(Path(entry.path))

    def listing(self, folder: Path) -> list[os.DirEntry[str]]:
        """The entries of `folder` (none when it cannot be read); one with more than
        _MAX_HOOKS is noted as crowded, and refused."""
        try:
            with os.scandir(folder) as entries:
                listed = list(itertools.islice(entries, _MAX_HOOKS + 1))
        except OSError:
            return []
        if len(listed) > _MAX_HOOKS:
            self.crowded.add(self.show(folder))
        return listed[:_MAX_HOOKS]

    def config_paths(self, worktree: Path, config: Path,
                     why: str = "git reads it as config") -> None:
        """hooksPath and include targets of one config file (and of what it includes).

        `config` is the path as git builds it (not resolved): a relative include is taken
        from its directory, and the kernel resolves what is in between.
        """
        real = self.resolve(config, why)
        if (worktree, real) in self._read:
            return  # read already (an include cycle, which git refuses, ends here too)
        self._read.add((worktree, real))
        self.add(real, why)
        self.names(real)
        rel = _relative(self.root, real)
        if rel is not None:  # what a new version of it would name is taken from these
            self.configs.setdefault(rel, set()).add((worktree, config.parent))
        parsed = self._parsed.get(real) or self._parsed.setdefault(real, gitconfig.read(real))
        if parsed.error:
            self.unsure.setdefault(str(config), parsed.error)
        for entry in parsed.entries:
            for value in entry.values:
                for reading in gitconfig.path_readings(value):
                    self._config_value(worktree, config, entry.key, reading)

    def _config_value(self, worktree: Path, config: Path, key: str, value: str) -> None:
        named = path_key(key)
        if named == "hooks":
            why = f"git runs the hooks in it (core.hooksPath in {self.show(config)})"
            hooks = self.resolve(_expand(value, worktree), why)
            self.add(hooks, why)
            if hooks.name == "_":  # husky: .husky/_/pre-commit runs .husky/pre-commit
                self.add(hooks.parent, why)
            self.hook_links(hooks)
        elif named == "include":
            # an included file can set hooksPath, fsmonitor, more includes
            self.config_paths(worktree, _expand(value, config.parent),
                              f"git reads it as config (included by {self.show(config)})")

    def names(self, path: Path) -> None:
        """Note `path` when it is a regular file with more than one name (a hard link)."""
        with contextlib.suppress(OSError):  # a read-only mount guards a name, not the file
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                self.hardlinked[self.show(path)] = info.st_nlink

    def hook_links(self, hooks: Path) -> None:
        """What the links in a hooks directory point at: git runs the target."""
        listed = self.listing(hooks)
        for entry in listed:
            self.names(Path(entry.path))
        for link in [e.path for e in listed if e.is_symlink()]:
            why = f"git runs it (the hook {self.show(Path(link))} links to it)"
            self.add(self.resolve(Path(link), why), why)

    def refuse_unsure(self) -> None:
        """A ConfigError when something git reads or passes cannot be protected."""
        for config, why in self.unsure.items():
            raise ConfigError(
                f"git on the host reads {config} as config, but it cannot be read with "
                f"certainty ({why}): the files it names cannot be protected",
                fix=f"fix or remove it (`git config --file {config} --list` shows what git "
                    "makes of it), or run with --workspace copy or --read-only")
        for folder in sorted(self.crowded):
            raise ConfigError(
                f"{folder}, which git on the host reads from, holds more than {_MAX_HOOKS} "
                "entries: they cannot all be checked for links and second names",
                fix="clear it out, or run with --workspace copy or --read-only")
        for hook, names in self.hardlinked.items():
            raise ConfigError(
                f"{hook}, which git on the host runs or reads, has {names} names (hard links): "
                "a write to another name in the project would change it",
                fix="replace it with a copy (`cp --remove-destination`) or a symbolic link, or "
                    "run with --workspace copy or --read-only")
        uncovered = {rel: why for rel, why in self.links.items()
                     if not _covered(rel, set(self.existing))}
        for rel, why in uncovered.items():
            raise ConfigError(
                f"{rel} in the project is {why}: the sandbox could point it elsewhere",
                fix="replace the link with what it points to, or run with --workspace copy "
                    "or --read-only")

    def result(self) -> Protected:
        """The outermost paths (one mount covers what is inside it), within the mount cap."""
        existing = _outermost(set(self.existing))
        missing = {m for m in self.missing if not _covered(m, existing)}
        if len(existing) + len(missing) > MAX_MOUNTS:
            raise ConfigError(
                f"the project holds {len(existing) + len(missing)} git directories and hook "
                f"paths; more than {MAX_MOUNTS} cannot be mounted read-only",
                fix="point --root at a smaller directory, or pass --allow-git-writes",
            )
        return Protected(tuple(sorted(existing)), tuple(sorted(missing)))


def _resolve(path: Path) -> tuple[Path, list[Path]]:
    """`os.path.realpath(path)`, and the links met on the way (as their own paths)."""
    todo = os.path.join(os.getcwd(), path).split("/")[::-1]  # (abspath would drop `x/..`)
    here, links, hops = "", [], 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            here = os.path.dirname(here) if here else ""
            continue
        step = f"{here}/{name}"
        try:
            target = os.readlink(step)
        except OSError:
            here = step  # not a link (or not there: the rest is taken as written)
            continue
        links.append(Path(step))
        hops += 1
        if hops > _MAX_HOPS:
            return Path(os.path.realpath(path)), links
        todo.extend(target.split("/")[::-1])
        if target.startswith("/"):
            here = ""
    return Path(here or "/"), links


def common_dir(git_dir: Path) -> Path | None:
    """A linked worktree's main git dir (`commondir`), which holds the shared config and hooks."""
    text = small_text(git_dir / "commondir")
    return Path(os.path.realpath(git_dir / text.strip())) if text and text.strip() else None


def gitdir_target(entry: Path, read: Path | None = None) -> Path | None:
    """Where a `.git` file points (relative to the `.git` entry's directory, as git takes it);
    `read`: the file it links to, when `.git` is a link."""
    text = small_text(read or entry)
    if not text or not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:"):].strip())
    return Path(os.path.realpath(entry.parent / target))


def path_key(key: str) -> str | None:
    """What git does with the path a config key (lowercased) names: 'hooks' (it runs the
    hooks in it), 'include' (it reads it as config, relative to the config's directory), or
    None (nothing this module follows)."""
    if key == "core.hookspath":
        return "hooks"
    if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
        return "include"
    return None


def _expand(value: str, base: Path) -> Path:
    """A path value as git takes it (interpolate_path: `~` and `~user`), relative to `base`;
    not resolved (the caller follows links)."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def config_values(path: Path) -> list[tuple[str, str]]:
    """`(section[.subsection].key lowercased, value)` pairs of a git config file, as git reads
    them (up to where git would stop; both readings of a value where git versions differ)."""
    return [(entry.key, value) for entry in gitconfig.read(path).entries
            for value in entry.values]


def small_text(path: Path) -> str | None:
    """A small regular file's text, never through a link and never blocking; else None."""
    data = read_plain(path, most=_MAX_CONFIG)
    return None if data is None else data.decode("utf-8", "replace")


def user_git_configs() -> list[Path]:
    """The person's global and system git config files (they can point hooks into a tree)."""
    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    candidates = [os.environ.get("GIT_CONFIG_GLOBAL"), home / ".gitconfig", xdg / "git" / "config",
                  os.environ.get("GIT_CONFIG_SYSTEM"), "/etc/gitconfig"]
    return [Path(c) for c in candidates if c]


def _relative(root: Path, target: Path) -> str | None:
    if target == root:
        return "."
    try:
        return target.relative_to(root).as_posix()
    except ValueError:
        return None


def _covered(rel: str, parents: set[str]) -> bool:
    return "." in parents or any(rel.startswith(p + "/") or rel == p for p in parents)


def _outermost(paths: set[str]) -> set[str]:
    """Drop paths inside another one in the set (one mount covers them)."""
    return {p for p in paths if not _covered(p, paths - {p})}


