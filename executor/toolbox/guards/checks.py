"""The checks around every command: the git guard before, the guards after it."""

from __future__ import annotations

import os

from ..guards.disk import _disk_verdict
from ..guards.fifo import _remove_fifos
from ..guards.git import _disable_gitdirs, _quarantine_git, _quarantine_past_the_walk
from ..guards.setid import _clear_setid
from ..limits import TRACK_MAX_ENTRIES
from ..paths import rel
from ..tracking import _counts, _mount_table, _readonly_mounts, _snapshot
from ..wire import fail

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable

    from ..context import Context
    from ..tracking import _Tracking
    from ..wire import MountRecord, Result
    pass



def _track_before(ctx: Context, report: _Tracking) -> Result | None:
    """Index the tree before a command: outside changes, the disk baseline, the git guard."""
    tracker = ctx.tracker
    assert tracker is not None  # called only when tracking is on
    if tracker.index is None:
        tracker.start()
    else:
        old, new, found = tracker.rewalk()
        if found:
            report.add_changes("outside_changes", old, new, found)
            report.lines.append("note: files changed outside the sandbox since the last call "
                                f"(not by you): {_counts(found)}")
    assert tracker.index is not None  # made just above
    if ctx.disk is not None:
        ctx.disk.settle(tracker.index.size, len(tracker.index.stats))
    return _git_guard(ctx, report) if ctx.git_guard else None


def _git_guard(ctx: Context, report: _Tracking) -> Result | None:
    """A refusal when a .git appeared from outside and is not mounted read-only; else None."""
    assert ctx.tracker is not None  # called only when tracking is on
    mounts = _readonly_mounts(ctx.root)
    found = [path for path in ctx.tracker.foreign_git()
             if os.path.join(ctx.root, path) not in mounts]
    if not found:
        return None
    shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    return fail(f"a git repository appeared in the project from outside the sandbox during this "
                f"session ({shown}); the command was not run. The sandbox has to be restarted "
                "with it mounted read-only first.", remount_needed=found, **report.meta)


def _restore_mounts(ctx: Context, report: _Tracking) -> None:
    """Put back a protected mount a command moved by renaming a directory above it.

    A read-only mount (a hooks dir, an included git config) moves with its parent: `mv .husky
    .husky.old && mkdir -p .husky/_` would leave a writable look-alike where git looks. The
    look-alike is moved aside and the renamed directory is renamed back.
    """
    moved = [(ctx.mounts[i], now) for i, now in _mount_table(ctx.root).items()
             if i in ctx.mounts and now != ctx.mounts[i]]
    done: list[MountRecord] = []
    renames: dict[tuple[str, str], MountRecord] = {}  # two mounts in one moved directory: once
    for was, now in moved:
        a, b = rel(ctx, was).split("/"), rel(ctx, now).split("/")
        keep = 0
        while keep < min(len(a), len(b)) - 1 and a[-1 - keep] == b[-1 - keep]:
            keep += 1
        old_dir = os.path.join(ctx.root, *a[:len(a) - keep])
        new_dir = os.path.join(ctx.root, *b[:len(b) - keep])
        if (old_dir, new_dir) not in renames:
            renames[old_dir, new_dir] = _move_back(ctx, old_dir, new_dir, was)
        done.append({**renames[old_dir, new_dir], "path": rel(ctx, was)})
    for record in done:
        report.lines.append(f"{record['path']} is protected (git on the host runs it) and was "
                            "moved by renaming a directory above it; "
                            + _put_back(record))
    if done:
        report.meta["protected_restored"] = done
        assert ctx.tracker is not None  # called only when tracking is on
        ctx.tracker.index = _snapshot(ctx, ctx.tracker.index)  # our renames are not theirs


def _put_back(record: MountRecord) -> str:
    if "error" in record:
        return f"it could not be put back: {record['error']}"
    if "replaced_by" in record:
        return f"it was put back (what took its place is now {record['replaced_by']})"
    return "it was put back"


def _move_back(ctx: Context, old_dir: str, new_dir: str, was: str) -> MountRecord:
    record: MountRecord = {"path": rel(ctx, was), "moved_to": rel(ctx, new_dir)}
    try:
        if os.path.lexists(old_dir):
            aside = old_dir + ".replaced-" + os.urandom(4).hex()
            os.rename(old_dir, aside)
            record["replaced_by"] = rel(ctx, aside)
        os.rename(new_dir, old_dir)
    except OSError as exc:
        record["error"] = exc.strerror or str(exc)
    return record


def _track_after(ctx: Context, report: _Tracking, reason: str | None) -> None:
    """Index the tree after a command: its changes, then set-id bits and new .git entries."""
    assert ctx.tracker is not None  # called only when tracking is on
    old, new, found = ctx.tracker.rewalk()
    report.add_changes("changes", old, new, found)
    report.meta["changes_incomplete"] = not (old.complete and new.complete)
    if found:
        report.lines.append(f"files changed: {_counts(found)}")
    if report.meta["changes_incomplete"]:
        report.lines.append(f"note: the project has more than {TRACK_MAX_ENTRIES} entries; "
                            "only part of it was checked for changes")
    # Each guard runs whatever happened to the one before: a bug in one must not skip the rest.
    _guard(report, "set-id", lambda: _clear_setid(ctx, old, found, report))
    _guard(report, "FIFO", lambda: _remove_fifos(ctx, found, report))
    if ".git" in ctx.readonly:  # with --allow-git-writes the person allowed repositories
        _guard(report, "protected mount", lambda: _restore_mounts(ctx, report))
        _guard(report, ".git", lambda: _quarantine_git(ctx, old, report))
        _guard(report, "repository look-alike", lambda: _disable_gitdirs(ctx, found, report))
        if report.meta["changes_incomplete"]:
            _guard(report, "repositories past the walk",
                   lambda: _quarantine_past_the_walk(ctx, report))
    if ctx.disk is not None:
        ctx.disk.size, ctx.disk.entries = new.size, len(new.stats)
        _disk_verdict(ctx.disk, report, reason)


def _guard(report: _Tracking, name: str, step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as exc:  # reported to the model and the host; the other guards go on
        report.meta.setdefault("guard_errors", []).append(name)
        report.lines.append(f"internal error in the {name} check after the command: "
                            f"{type(exc).__name__}: {exc}")
