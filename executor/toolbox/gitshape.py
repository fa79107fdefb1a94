"""What makes git take a directory for a repository: one rule, for the toolbox and the host.

The host imports this module (gitsafety/) where it used to keep a copy; it is a
leaf of the toolbox package (nothing but the standard library), so importing it costs nothing.
"""

from __future__ import annotations

import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

GITDIR_PARTS = ("HEAD", "objects", "refs", "commondir")
"""What makes git take a directory for a repository (bare, or a .git under another name)."""
GITDIR_CODE = ("HEAD", "objects", "refs", "commondir", "config", "hooks")
"""Its parts a command may not write or complete: git on the host would act on them."""


def gitdir_shape(kinds: Mapping[str, str]) -> bool:
    """Whether git could take a directory with these entries (name -> 'dir', 'file', 'symlink'
    or 'other') for a repository. Looser than git on purpose: git's own test (setup.c,
    is_git_directory) takes a HEAD that is a file or a symlink, and checks objects/ and refs/
    with access(), which follows links and passes for an executable file; a commondir file
    points both elsewhere."""
    if kinds.get("HEAD") in (None, "dir"):
        return False
    return ("objects" in kinds and "refs" in kinds) or "commondir" in kinds


def kind_of(mode: int) -> str:
    """An lstat mode as the kind `gitdir_shape` takes."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"
