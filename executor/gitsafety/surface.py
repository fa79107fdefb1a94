"""The git surface: what of the project is protected from the sandbox, why, and by what.

A planted hook or config must never run on the host, so every path git on the host runs or
reads as config (hostgit.py) is kept from the sandbox. That is decided once, here, as one
frozen value, the way Codex CLI declares `WritableRoot { root, read_only_subpaths }` and its
sandbox turns it into mounts: a `GitSurface` is a list of `Guard`s, each a path, the reason it
counts and the `Mechanism` that enforces it. The kernel enforces the surface (read-only bind
mounts over the read-write root, an empty read-only mount where a path must stay missing, the
root itself read-only); the sandbox spec carries it as its `git` field, so a re-attached
container is one made with the same surface (executor/sandbox/spec.py). Where the kernel
cannot reach, named backups stand behind it, each in its own room (`BACKUPS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from executor.gitsafety.hostgit import Protected, git_paths
from executor.gitsafety.walk import TreeScan

Mode = Literal["bind", "copy", "read-only"]
"""How the sandbox sees the root: bind-mounted read-write, a copy, or bind-mounted read-only."""

Mechanism = Literal["read-only mount", "empty read-only mount", "read-only root",
                    "toolbox refuses writes"]

MECHANISMS: dict[str, str] = {
    "read-only mount": "a read-only bind mount over the read-write root (the kernel: EROFS)",
    "empty read-only mount": "an empty read-only tmpfs where git would look, so nothing can "
                             "be created there (the kernel)",
    "read-only root": "the whole root is mounted read-only (--read-only; the kernel)",
    "toolbox refuses writes": "the toolbox refuses a tool's write into any `.git` (a copy: "
                              "git on the host never runs there, and apply refuses it)",
}
"""Each mechanism in words: what enforces it."""


@dataclass(frozen=True)
class Backup:
    """A check standing behind the kernel's mounts, where they cannot reach."""

    name: str
    room: str
    """The module that holds it."""
    does: str


BACKUPS: dict[str, Backup] = {backup.name: backup for backup in (
    Backup("toolbox guard", "executor/toolbox/guards/git.py",
           "renames a `.git` or repository look-alike a command makes, before git on the host "
           "can see it; asks for a remount when one appears from outside (--git-guard)"),
    Backup("after-session check", "executor/gitsafety/aftercheck.py",
           "after a bind session: moves aside what replaced a protected path, renames every "
           "new `.git` and look-alike, clears set-id bits"),
    Backup("apply refusal", "executor/workspace/gitrun.py",
           "a copy's `apply` never writes what git on the host runs or reads, worked out on "
           "the person's tree when the changes are applied"),
)}


@dataclass(frozen=True)
class Guard:
    """One protected path."""

    path: str
    """Relative to the root ('.' for the root itself)."""
    why: str
    """What git on the host does with it."""
    mechanism: Mechanism


@dataclass(frozen=True)
class GitSurface:
    """The run's git protection: every protected path with its reason and its mechanism."""

    mode: Mode
    writes_allowed: bool = False
    """--allow-git-writes: nothing is protected (the checks after a session still run)."""
    guards: tuple[Guard, ...] = ()

    @property
    def protected(self) -> Protected:
        """The read-only mounts the kernel is asked for (bind mode)."""
        return Protected(self._paths("read-only mount"), self._paths("empty read-only mount"))

    def _paths(self, mechanism: Mechanism) -> tuple[str, ...]:
        return tuple(g.path for g in self.guards if g.mechanism == mechanism)

    @property
    def backups(self) -> tuple[Backup, ...]:
        """The backups that stand behind this surface's mechanisms."""
        names = {"bind": ("toolbox guard", "after-session check"), "copy": ("apply refusal",),
                 "read-only": ("toolbox guard",)}[self.mode]
        return tuple(BACKUPS[n] for n in names if n != "toolbox guard" or self.toolbox_argv())

    def toolbox_argv(self) -> list[str]:
        """The toolbox's part: refuse writes into `.git` and, unless a copy (its repositories
        cannot appear from outside), guard against new ones."""
        if self.writes_allowed:
            return []
        return ["--readonly-dir", ".git"] + ([] if self.mode == "copy" else ["--git-guard"])

    def spec(self) -> dict[str, Any]:
        """The surface as the sandbox spec's `git` field (plain data, canonical order)."""
        return {"mode": self.mode, "writes_allowed": self.writes_allowed,
                "toolbox": self.toolbox_argv(),
                "guards": [[g.path, g.mechanism, g.why] for g in self.guards]}


def mode_of(*, workspace: str, read_only: bool) -> Mode:
    """The mode a run's workspace and --read-only give."""
    if workspace == "copy":
        return "copy"
    return "read-only" if read_only else "bind"


def decide(root: Path, mode: Mode, tree: TreeScan | None = None, *,
           writes_allowed: bool = False, global_configs: list[Path] | None = None
           ) -> GitSurface:
    """The surface of a run in `mode`; for a bind session, of the tree `tree` (walked at the
    start: the paths git on the host runs from it, refused when one cannot be protected)."""
    if mode == "read-only":
        return GitSurface(mode, writes_allowed,
                          (Guard(".", "the whole project (--read-only)", "read-only root"),))
    if writes_allowed:
        return GitSurface(mode, writes_allowed)
    if mode == "copy":
        return GitSurface(mode, guards=(Guard(".git", "every repository in the copy, at any "
                                              "depth", "toolbox refuses writes"),))
    if tree is None:
        return GitSurface(mode)  # not walked yet: nothing decided
    found = git_paths(root, tree, global_configs=global_configs)
    found.refuse_unsure()
    protected = found.result()
    return GitSurface(mode, guards=tuple(
        [Guard(rel, found.existing[rel], "read-only mount") for rel in protected.existing]
        + [Guard(rel, found.missing[rel], "empty read-only mount") for rel in protected.missing]))
