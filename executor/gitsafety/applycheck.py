"""What a copy's `apply` must never write: the copy session's backup, on the person's tree.

In bind mode the paths git on the host runs or reads are read-only mounts (surface.py); in a
copy they are ordinary files the sandbox may change, so a changeset is checked against the
same set (hostgit.py), worked out on the person's tree as it is when the changes are shown
or applied: every `.git`, the `core.hooksPath` directories and what their hooks link to, the
config files git reads (`include.path`, `includeIf.*.path`, at any depth, each read as git
reads it), and the links in the tree on the way to any of them.

A path is refused when it is one of them, lies inside one, or is a directory above one that
would stop being a directory (a link there would send git elsewhere). That is enough for the
tree after the apply as well: which files git reads and runs is decided only by those files,
`.git` and the person's own config, none of which an apply changes, so applying the rest
cannot add an include or a hooks path. The refused config changes themselves are read too
(`after`): what their new version would include or take hooks from is refused with them, so
a person who makes such a change by hand after reading it has not already let in the file it
names. A config git reads that cannot be read with certainty leaves the set unknown: then
nothing is applied. Nor is anything that would make a directory git takes for a repository
(`lookalikes`: the toolbox's rule, gitshape.py).
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from executor import gitconfig
from executor.errors import WorkspaceError
from executor.gitsafety.hostgit import git_paths, path_key
from executor.gitsafety.walk import scan
from executor.toolbox.gitshape import GITDIR_CODE, GITDIR_PARTS, gitdir_shape

Content = Callable[[str], bytes | None]
Where = tuple[str, str]
"""(work tree, directory a relative include is taken from), both absolute."""


@dataclass(frozen=True)
class HostPaths:
    """The paths (relative to the root) git on the host reads or runs -> why."""

    root: str = ""
    paths: dict[str, str] = field(default_factory=dict)
    unsure: dict[str, str] = field(default_factory=dict)
    """Config files git reads that cannot be read with certainty -> why."""
    configs: dict[str, tuple[Where, ...]] = field(default_factory=dict)
    """Config files git reads in the tree -> where their relative paths are taken from."""

    @functools.cached_property
    def _folded(self) -> dict[str, str]:
        return {fold(rel): rel for rel in self.paths}

    @functools.cached_property
    def _above(self) -> dict[str, str]:
        """Each directory above a path (folded) -> that path."""
        above: dict[str, str] = {}
        for key, rel in self._folded.items():
            parts = key.split("/")
            for depth in range(1, len(parts)):
                above.setdefault("/".join(parts[:depth]), rel)
        return above

    def reason(self, path: str, *, stays_dir: bool) -> str | None:
        """Why a change to `path` must not be applied (what git does with it), or None;
        `stays_dir`: the change leaves a directory there."""
        if "." in self.paths:
            return f"inside the project root: {self.paths['.']}"
        parts = fold(path).split("/")
        for depth in range(len(parts), 0, -1):  # the path itself, then each directory above
            rel = self._folded.get("/".join(parts[:depth]))
            if rel is not None:
                where = "" if depth == len(parts) else f"inside {rel}: "
                return f"{where}{self.paths[rel]}"
        rel = self._above.get("/".join(parts))
        if rel is None or stays_dir:
            return None  # a directory that stays one: what git reads below it is not touched
        return f"on the way to {rel}: {self.paths[rel]}"

    def after(self, written: Mapping[str, str | None], content: Content) -> HostPaths:
        """This set plus what the changed config files would name in their new version
        (`written`: each changed path -> the sha256 of its new content, None when none)."""
        paths = dict(self.paths)
        by_key = {fold(path): path for path in written}
        todo = [(path, where) for path in written for where in self._where(path)]
        seen: set[tuple[str, Where]] = set()
        while todo:
            path, where = todo.pop()
            digest = written[path]
            if (path, where) in seen or not digest:
                continue
            seen.add((path, where))
            data = content(digest)
            entries = gitconfig.parse(data).entries if data is not None else []
            for key, target in _named(entries, where):
                rel = self._relative(target)
                if rel is None:
                    continue
                does = "run the hooks in it" if key == "hooks" else "read it as config"
                paths.setdefault(rel, f"git would {does} if the change to {path} were made")
                named = by_key.get(fold(rel))
                if named is not None and key == "include":
                    todo.append((named, (where[0], os.path.dirname(target))))
        return HostPaths(self.root, paths, self.unsure, self.configs)

    def _where(self, path: str) -> tuple[Where, ...]:
        key = fold(path)
        return next((w for rel, w in self.configs.items() if fold(rel) == key), ())

    def _relative(self, target: str) -> str | None:
        rel = os.path.relpath(os.path.normpath(target), self.root)
        return None if rel == ".." or rel.startswith("../") else rel

    def check_certain(self) -> None:
        """A WorkspaceError when a config git reads could not be read with certainty."""
        if self.unsure:
            config, problem = next(iter(self.unsure.items()))
            raise WorkspaceError(
                f"git on the host reads {config} as config, but it cannot be read with "
                f"certainty ({problem}): which files git runs is unknown, so nothing is applied",
                fix=f"fix or remove it (`git config --file {config} --list` shows what git makes "
                    "of it), then apply again")


def _named(entries: list[gitconfig.Entry], where: Where) -> list[tuple[str, str]]:
    """('hooks' or 'include', absolute path) of each hooks path and include in entries."""
    worktree, base = where
    found = []
    for entry in entries:
        kind = path_key(entry.key)
        if kind is None:
            continue
        for value in entry.values:
            for reading in gitconfig.path_readings(value):
                path = os.path.expanduser(reading)
                found.append((kind, os.path.join(base if kind == "include" else worktree, path)))
    return found


def host_paths(root: Path) -> HostPaths:
    """The paths git on the host reads or runs in the tree at `root` (walked now)."""
    found = git_paths(root, scan(root))
    configs = {rel: tuple(sorted((str(w), str(b)) for w, b in where))
               for rel, where in found.configs.items()}
    return HostPaths(str(found.root), found.paths(), dict(found.unsure), configs)


def flag(why: str) -> str:
    """The words that open a refusal: what git on the host does with the path."""
    return f"git on the host runs or reads this: {why}"


def lookalikes(paths: Iterable[str], kind_after: Callable[[str], str | None]
               ) -> dict[str, str]:
    """Of `paths` (changed ones), those that would leave a directory git takes for a
    repository (HEAD beside objects/ and refs/, or a commondir), writing its config, hooks or
    the parts that make it one: git on the host would run what that config says. Path -> why;
    `kind_after(path)`: 'dir', 'file', 'symlink', 'other' or None once the changes are in."""
    by_dir: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split("/")
        for depth, name in enumerate(parts):
            if name in GITDIR_CODE:
                by_dir.setdefault("/".join(parts[:depth]), []).append(path)
    refused: dict[str, str] = {}
    for folder, changed in by_dir.items():
        prefix = f"{folder}/" if folder else ""
        kinds = {part: kind for part in GITDIR_PARTS
                 if (kind := kind_after(prefix + part)) is not None}
        if gitdir_shape(kinds):
            why = (f"would make {folder or 'the project root'} look like a git repository (git "
                   "on the host would run its config): not applied")
            refused.update((path, why) for path in changed if path not in refused)
    return refused


def fold(path: str) -> str:
    """One spelling for names a case-insensitive or normalising host file system equates."""
    return unicodedata.normalize("NFC", path).casefold()
