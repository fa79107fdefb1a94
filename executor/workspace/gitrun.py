"""What git on the host runs or reads as config: `apply` never writes it, `diff` says so.

The rules are git safety's (executor/gitsafety/applycheck.py: which paths, why, and
what a changed config would name); this is where a changeset meets them: a `Change` is
refused when its path is one of them, lies inside one, or is a directory above one that would
stop being a directory, and the refused config changes' new versions are read too (`after`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from executor.gitsafety.applycheck import HostPaths, flag, host_paths
from executor.workspace.changes import Change

Content = Callable[[str], bytes | None]


@dataclass(frozen=True)
class GitRun:
    """The paths git on the host reads or runs, as a changeset meets them."""

    host: HostPaths

    @property
    def unsure(self) -> dict[str, str]:
        """Config files git reads that cannot be read with certainty -> why."""
        return self.host.unsure

    def check_certain(self) -> None:
        """A WorkspaceError when a config git reads could not be read with certainty."""
        self.host.check_certain()

    def reason(self, change: Change) -> str | None:
        """Why `change` must not be applied (what git does with the path), or None."""
        stays_dir = change.after is not None and change.after.kind == "dir"
        return self.host.reason(change.path, stays_dir=stays_dir)

    def after(self, changes: list[Change], content: Content) -> GitRun:
        """This set plus what the changed config files would name in their new version."""
        written = {c.path: c.after.sha256 if c.after is not None else None for c in changes}
        return GitRun(self.host.after(written, content))

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


def git_run(root: Path) -> GitRun:
    """The paths git on the host reads or runs in the tree at `root` (walked now)."""
    return GitRun(host_paths(root))
