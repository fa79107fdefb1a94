"""`list_files`: the tree, links and hidden state left out."""

from __future__ import annotations

import fnmatch
import os
from collections import deque

from ..limits import LIST_DEPTH, LIST_GLOB_DEPTH, LIST_MAX_ENTRIES
from ..paths import _skipped, rel, resolve, shown
from ..wire import ToolError, ok

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from ..context import Context
    from ..wire import Result
    pass



# -- list_files -------------------------------------------------------------------------------


def tool_list_files(ctx: Context, path: str = ".", glob: str | None = None,
                    depth: int | None = None) -> Result:
    """Entries under a directory, relative to the root, directories ending in '/'."""
    if depth is not None and depth < 1:
        raise ToolError("argument 'depth' must be 1 or more")
    real = resolve(ctx, path)
    if not os.path.isdir(real):
        os.stat(real)  # a clear "file not found" when missing
        return ok(shown(rel(ctx, real)), entries=1, truncated=False, depth=0)
    depth = depth or (LIST_GLOB_DEPTH if glob else LIST_DEPTH)
    found, more, deeper = _collect(ctx, real, glob, depth)
    found.sort(key=lambda entry: entry.rstrip("/").split("/"))
    lines = list(found) or [f"no entries match '{glob}' in {path}" if glob else "(empty directory)"]
    if more:
        lines.append(f"[stopped at {LIST_MAX_ENTRIES} entries; pass a subdirectory as path, or "
                     "use glob or depth to narrow]")
    if deeper:
        lines.append(f"[directories deeper than depth={depth} are not expanded; pass one as path, "
                     "or a bigger depth]")
    return ok("\n".join(lines), entries=len(found), truncated=more, depth=depth)


def _collect(ctx: Context, top: str, glob: str | None,
             depth: int) -> tuple[list[str], bool, bool]:
    """Breadth first, so a cap keeps the top levels whole: (entries, capped, deeper dirs)."""
    found: list[str]
    found, queue, deeper = [], deque([(top, 1)]), False
    while queue:
        directory, level = queue.popleft()
        for entry in _scan(directory, first=directory == top):
            if _skipped(ctx, directory, entry.name):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            name = shown(rel(ctx, entry.path)) + ("/" if is_dir else "")  # as the model reads it
            if glob is None or _glob_match(glob, name):
                found.append(name)
                if len(found) > LIST_MAX_ENTRIES:
                    return found[:-1], True, deeper
            if is_dir and level < depth:
                queue.append((entry.path, level + 1))
            deeper = deeper or (is_dir and level >= depth)
    return found, False, deeper


def _scan(directory: str, first: bool) -> list[os.DirEntry[str]]:
    """Sorted directory entries; an unreadable subdirectory is skipped, not fatal."""
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda entry: entry.name)
    except OSError:
        if first:
            raise
        return []


def _glob_match(glob: str, name: str) -> bool:
    name = name.rstrip("/")
    base = name.rsplit("/", 1)[-1]
    if "/" not in glob:
        return fnmatch.fnmatchcase(base, glob)
    if glob.startswith("**/") and fnmatch.fnmatchcase(base, glob[3:]):
        return True
    return fnmatch.fnmatchcase(name, glob)
