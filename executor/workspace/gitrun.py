"""What git on the host runs or reads as config: `apply` never writes it, `diff` says so.

In bind mode these paths are read-only mounts (executor/sandbox/protect.py); in a copy they are
ordinary files the sandbox may change, so the changeset is checked against the same set, worked
out on the person's tree as it is when the changes are shown or applied: every `.git`, the
`core.hooksPath` directories and what their hooks link to, the config files git reads
(`include.path`, `includeIf.*.path`, at any depth, each read as git reads it), and the links
in the tree on the way to any of them.

A change is refused when its path is one of them, lies inside one, or is a directory above one
that would stop being a directory (a link there would send git elsewhere). That is enough for
the tree after the apply as well: which files git reads and runs is decided only by those
files, `.git` and the person's own config, none of which an apply changes, so applying the
rest cannot add an include or a hooks path. The refused config changes themselves are read
too (`after`): what their new version would include or take hooks from is refused with them,
so a person who makes such a change by hand after reading it has not already let in the file
it names. A config git reads that cannot be read with certainty leaves the set unknown: then
nothing is applied.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from executor import gitconfig
from executor.errors import WorkspaceError
from executor.workspace.changes import Change

Content = Callable[[str], bytes | None]
_WHERE = tuple[str, str]
"""(work tree, directory a relative include is taken from), both absolute."""


@dataclass(frozen=True)
class GitRun:
    """The paths (relative to the root) git on the host reads or runs -> why."""

    root: str = ""
    paths: dict[str, str] = field(default_factory=dict)
    unsure: dict[str, str] = field(default_factory=dict)
    """Config files git reads that cannot be read with certainty -> why."""
    configs: dict[str, tuple[_WHERE, ...]] = field(default_factory=dict)
    """Config files git reads in the tree -> where their relative paths are taken from."""

    @functools.cached_property
    def _folded(self) -> dict[str, str]:
        return {_fold(rel): rel for rel in self.paths}

    @functools.cached_property
    def _above(self) -> dict[str, str]:
        """Each directory above a path (folded) -> that path."""
        above: dict[str, str] = {}
        for key, rel in self._folded.items():
            parts = key.split("/")
            for depth in range(1, len(parts)):
                above.setdefault("/".join(parts[:depth]), rel)
        return above

    def reason(self, change: Change) -> str | None:
        """Why `change` must not be applied (what git does with the path), or None."""
        if "." in self.paths:
            return f"inside the project root: {self.paths['.']}"
        parts = _fold(change.path).split("/")
        for depth in range(len(parts), 0, -1):  # the path itself, then each directory above
            rel = self._folded.get("/".join(parts[:depth]))
            if rel is not None:
                where = "" if depth == len(parts) else f"inside {rel}: "
                return f"{where}{self.paths[rel]}"
        rel = self._above.get("/".join(parts))
        if rel is None or (change.after is not None and change.after.kind == "dir"):
            return None  # a directory that stays one: what git reads below it is not touched
        return f"on the way to {rel}: {self.paths[rel]}"

    def after(self, changes: list[Change], content: Content) -> GitRun:
        """This set plus what the changed config files would name in their new version."""
        paths = dict(self.paths)
        by_key = {_fold(c.path): c for c in changes}
        todo = [(c, where) for c in changes for where in self._where(c.path)]
        seen: set[tuple[str, _WHERE]] = set()
        while todo:
            change, where = todo.pop()
            if (change.path, where) in seen or change.after is None or not change.after.sha256:
                continue
            seen.add((change.path, where))
            data = content(change.after.sha256)
            entries = gitconfig.parse(data).entries if data is not None else []
            for key, target in _named(entries, where):
                rel = self._relative(target)
                if rel is None:
                    continue
                does = "run the hooks in it" if key == "core.hookspath" else "read it as config"
                paths.setdefault(rel, f"git would {does} if the change to {change.path} were "
                                      "made")
                named = by_key.get(_fold(rel))
                if named is not None and key != "core.hookspath":
                    todo.append((named, (where[0], os.path.dirname(target))))
        return GitRun(self.root, paths, self.unsure, self.configs)

    def _where(self, path: str) -> tuple[_WHERE, ...]:
        key = _fold(path)
        return next((w for rel, w in self.configs.items() if _fold(rel) == key), ())

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

    def refusals(self, changes: list[Change], content: Content) -> dict[str, str]:
        """Path -> why, for each change `apply` refuses (what to do included)."""
        self.check_certain()
        every = self.after(changes, content)
        found = {}
        for change in changes:
            why = every.reason(change)
            if why is not None:
                found[change.path] = (f"{flag(why)}; never applied: read it with "
                                      "`sandbox-agent diff`, and make the change yourself if "
                                      "you want it")
        return found

    def mark(self, changes: list[Change], content: Content) -> list[Change]:
        """`changes` with a flag on each one `apply` refuses."""
        every = self.after(changes, content)
        marked = []
        for change in changes:
            why = every.reason(change)
            if why is not None:
                flags = list(dict.fromkeys([f"{flag(why)} — apply refuses it", *change.flags]))
                change = Change(change.path, change.before, change.after, flags,
                                change.added, change.removed)
            marked.append(change)
        return marked


def _named(entries: list[gitconfig.Entry], where: _WHERE) -> list[tuple[str, str]]:
    """(key, absolute path) of each hooks path and include in a config's entries."""
    worktree, base = where
    found = []
    for entry in entries:
        key = entry.key
        include = key == "include.path" or (key.startswith("includeif.") and key.endswith(".path"))
        if key != "core.hookspath" and not include:
            continue
        for value in entry.values:
            for reading in gitconfig.path_readings(value):
                path = os.path.expanduser(reading)
                found.append((key, os.path.join(base if include else worktree, path)))
    return found


def flag(why: str) -> str:
    """The words that open a refusal: what git on the host does with the path."""
    return f"git on the host runs or reads this: {why}"


def git_run(root: Path) -> GitRun:
    """The paths git on the host reads or runs in the tree at `root` (walked now)."""
    from executor.sandbox.protect import git_paths, scan

    found = git_paths(root, scan(root))
    configs = {rel: tuple(sorted((str(w), str(b)) for w, b in where))
               for rel, where in found.configs.items()}
    return GitRun(str(found.root), found.paths(), dict(found.unsure), configs)


def _fold(path: str) -> str:
    """One spelling for names a case-insensitive or normalising host file system equates."""
    return unicodedata.normalize("NFC", path).casefold()
