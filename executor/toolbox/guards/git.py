"""A `.git` (or a look-alike) that a command made is disabled before git on the host can see it."""

from __future__ import annotations

import contextlib
import os

from ..gitshape import GITDIR_CODE, GITDIR_PARTS, gitdir_shape, kind_of
from ..gitshape import kind_of as _kind
from ..limits import GIT_SCAN_MAX_ENTRIES, QUARANTINE
from ..nofollow import as_owner, open_parent
from ..tracking import _readonly_mounts

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from ..context import Context
    from ..tracking import Snapshot, _Tracking
    from ..wire import Change, QuarantineRecord


def _quarantine_git(ctx: Context, old: Snapshot, report: _Tracking) -> None:
    """Rename .git entries a command made or replaced, so git on the host never honours them."""
    tracker = ctx.tracker
    assert tracker is not None and tracker.index is not None  # after _track_before
    made = [path for path in tracker.index.gits
            if tracker.identity(old, path) != tracker.identity(tracker.index, path)]
    if not made:
        return
    mounts = _readonly_mounts(ctx.root)
    _say([_disable_git(ctx, path) for path in made
          if os.path.join(ctx.root, path) not in mounts], report)


def _say(done: list[QuarantineRecord], report: _Tracking) -> None:
    """Tell the model (and the host: `git_quarantined`) which new repositories were disabled."""
    for record in done:
        what = ("could not be disabled: " + record["error"] if "error" in record
                else "was disabled" + (f" (renamed to {record['renamed_to']})"
                                       if record["renamed_to"] else ""))
        report.lines.append("new git repositories inside the project are not allowed in the "
                            f"sandbox; {record['path']} {what}")
    if done:
        report.meta.setdefault("git_quarantined", []).extend(done)


def _disable_git(ctx: Context, path: str) -> QuarantineRecord:
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    kind = _kind(ctx.tracker.index.stats[path][0])
    renamed = path[:-4] + QUARANTINE + os.urandom(4).hex()
    try:
        _rename_in_place(ctx, path, renamed)
        ctx.tracker.rename(path, renamed)
        if kind == "dir":  # not a repository under its new name either (cd into it + git)
            _rename_head(ctx, renamed)
    except OSError as exc:
        ctx.tracker.own_git.add(path)  # not "from outside": the git guard must not trip on it
        return {"path": path, "kind": kind, "renamed_to": None, "error": exc.strerror or str(exc)}
    return {"path": path, "kind": kind, "renamed_to": renamed}


def _rename_in_place(ctx: Context, path: str, renamed: str) -> None:
    """Rename an entry within its directory, never through a link; a directory the command
    made read-only (ours: same uid) gets its owner rights back for the rename (`as_owner`)."""
    parent, leaf = open_parent(ctx.root, path)
    try:
        as_owner(parent, lambda: os.rename(leaf, renamed.rsplit("/", 1)[-1], src_dir_fd=parent,
                                           dst_dir_fd=parent))
    finally:
        os.close(parent)


def _disable_gitdirs(ctx: Context, found: list[Change], report: _Tracking) -> None:
    """Directories a command turned into something git takes for a repository, whatever their
    name (`fake/` with HEAD, objects/, refs/ and a config with core.fsmonitor): their HEAD is
    renamed, so git on the host no longer sees a repository there."""
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    index, mounts = ctx.tracker.index, _readonly_mounts(ctx.root)
    touched = {path.rsplit("/", 1)[0] if "/" in path else "" for path, _ in found}
    suspects = sorted(d for d in touched | {p for p, _ in found} if _looks_like_gitdir(index, d)
                      and os.path.join(ctx.root, d) not in mounts)
    done: list[QuarantineRecord] = []
    for folder in suspects:
        prefix = folder + "/" if folder else ""
        if not any(p == prefix + part or p.startswith(prefix + part + "/")
                   for p, _ in found for part in GITDIR_CODE):
            continue  # the command neither completed it nor wrote what git would run
        head = prefix + "HEAD"
        renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
        record: QuarantineRecord = {"path": folder or ".", "kind": "gitdir", "renamed_to": renamed}
        try:
            _rename_in_place(ctx, head, renamed)
            index.stats.pop(head)
            ctx.tracker.refresh(renamed)
            if folder:
                ctx.tracker.refresh(folder)
        except OSError as exc:
            record.update({"renamed_to": None, "error": exc.strerror or str(exc)})
        done.append(record)
        report.lines.append(f"{record['path']} was made to look like a git repository; its HEAD "
                            + (f"was renamed to {renamed}" if record["renamed_to"]
                               else f"could not be renamed: {record['error']}")
                            + " so git on the host does not use it")
    if done:
        report.meta.setdefault("git_quarantined", []).extend(done)


def _rename_head(ctx: Context, folder: str) -> None:
    head = folder + "/HEAD"
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    if head in ctx.tracker.index.stats:
        renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
        with contextlib.suppress(OSError):
            _rename_in_place(ctx, head, renamed)
            ctx.tracker.index.stats.pop(head)
            ctx.tracker.refresh(renamed)  # renaming changed its ctime: not a change of theirs
            ctx.tracker.refresh(folder)


def _looks_like_gitdir(index: Snapshot, folder: str) -> bool:
    prefix = folder + "/" if folder else ""
    stats = {part: index.stats.get(prefix + part) for part in GITDIR_PARTS}
    return gitdir_shape({part: kind_of(st[0]) for part, st in stats.items() if st is not None})


def _quarantine_past_the_walk(ctx: Context, report: _Tracking) -> None:
    """A tree too big for the walk (TRACK_MAX_ENTRIES) hides what a command made past it, and
    git on the host would honour it until the session's end (or for good, if the controller
    dies first). So every `.git` and repository look-alike under the root that is not one of
    the read-only mounts the session started with is taken for the command's: at the start
    every repository was one of them. Names only (no stat beyond scandir's), up to
    GIT_SCAN_MAX_ENTRIES; past that the result says the check was not whole."""
    mounts = _readonly_mounts(ctx.root)
    found, whole = _unmounted_gits(ctx, mounts)
    done: list[QuarantineRecord] = []
    for path, kind in found:
        if kind == "look-alike":
            with contextlib.suppress(OSError):
                _rename_in_place(ctx, f"{path}/HEAD", f"{path}/HEAD.{QUARANTINE.strip('.')}"
                                 + os.urandom(4).hex())
                done.append({"path": path, "kind": "look-alike", "renamed_to": None})
            continue
        renamed = path[:-4] + QUARANTINE + os.urandom(4).hex()
        try:
            _rename_in_place(ctx, path, renamed)
            done.append({"path": path, "kind": kind, "renamed_to": renamed})
        except OSError as exc:
            done.append({"path": path, "kind": kind, "renamed_to": None,
                         "error": exc.strerror or str(exc)})
    _say(done, report)
    if not whole:
        report.meta["git_unchecked"] = True
        report.lines.append(f"warning: the project has more than {GIT_SCAN_MAX_ENTRIES} "
                            "entries; not all of it was checked for new git repositories")


def _unmounted_gits(ctx: Context, mounts: set[str]) -> tuple[list[tuple[str, str]], bool]:
    """(relative path, kind) of `.git` entries and look-alikes outside `mounts`; whole?"""
    found: list[tuple[str, str]] = []
    stack, seen = [""], 0
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(ctx.root, folder) if folder else ctx.root))
        except OSError:
            continue
        seen += len(entries)
        if seen > GIT_SCAN_MAX_ENTRIES:
            return found, False
        kinds = {}
        for entry in entries:
            path = f"{folder}/{entry.name}" if folder else entry.name
            if entry.path in mounts or QUARANTINE.strip(".") in entry.name:
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name in GITDIR_PARTS:
                kinds[entry.name] = "dir" if is_dir else "file"
            if entry.name.lower() == ".git":
                found.append((path, "dir" if is_dir else "file"))
            elif is_dir and not (folder == "" and entry.name in ctx.hidden):
                stack.append(path)
        if folder and gitdir_shape(kinds) and os.path.join(ctx.root, folder) not in mounts:
            found.append((folder, "look-alike"))
    return found, True
