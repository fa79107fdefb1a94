"""The disk budget: growth of the project, watched while a command runs."""

from __future__ import annotations

import os
import time

from ..limits import DISK_POLL_SECONDS, DISK_STEP, DISK_WALK_GAP, ENTRY_BUDGET, ENTRY_STEP
from ..tracking import _tree_measure, _tree_size
from ..wire import ToolError

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Protocol

    from ..paths import Rooted
    from ..tracking import Tracker, _Tracking

    class Budgeted(Rooted, Protocol):
        """What the disk guard needs of the Context (declared here: context.py imports this)."""

        disk: Disk | None
        tracker: Tracker | None



# -- disk budget ------------------------------------------------------------------------------


class Disk:
    """The disk budget: how much the project grew during the session, and the host's free space.

    Growth is measured with stat-only walks (st_blocks). Growth between our calls is someone
    else's (the person on the host): it moves the base, not the growth.
    """

    # None until the first settle() (stopped: until a watch kills a command); see __init__
    base: int | None
    size: int | None
    before: int | None
    base_entries: int | None
    entries: int | None
    stopped: tuple[int, int] | None

    def __init__(self, budget: int, min_free: int) -> None:
        self.budget, self.min_free = budget, min_free
        self.base = self.size = self.before = None  # project bytes: no growth / now / at start
        self.base_entries = self.entries = None  # files and directories: at the start / now
        self.stopped = None  # (growth, free) when a watch killed the last command

    def growth(self) -> int:
        """Bytes the project grew by in our calls."""
        return 0 if self.base is None or self.size is None else self.size - self.base

    def new_entries(self) -> int:
        """Files and directories the project gained in our calls."""
        if self.base_entries is None or self.entries is None:
            return 0
        return self.entries - self.base_entries

    def too_many(self) -> bool:
        """Whether the session added more entries than ENTRY_BUDGET (empty files cost inodes)."""
        return bool(self.budget) and self.new_entries() > ENTRY_BUDGET

    def settle(self, size: int, entries: int | None = None) -> None:
        """Before a command (or the first write), with the project's size now."""
        if self.base is None or self.size is None:
            self.base = self.size = size
        self.base += size - self.size
        self.size = self.before = size
        if entries is not None:
            if self.base_entries is None or self.entries is None:
                self.base_entries = self.entries = entries
            self.base_entries += entries - self.entries
            self.entries = entries

    def text(self, growth: int, free: int | None = None) -> str:
        """Why the disk is over its limit, for the model."""
        if self.too_many() and not 0 < self.budget < growth:
            return (f"disk budget exceeded: the project gained {self.new_entries():,} files and "
                    f"directories (at most {ENTRY_BUDGET:,} new ones per session)")
        if free is not None and free < self.min_free and not 0 < self.budget < growth:
            return (f"disk nearly full: {_human(free)} free, less than the "
                    f"{_human(self.min_free)} the sandbox keeps free")
        return (f"disk budget exceeded: the project grew by {_human(growth)} "
                f"(budget {_human(self.budget)})")


def _human(size: float) -> str:
    """1536 -> '1.5 KB' (binary units, as budgets are given)."""
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1024
        if size < 1024 or unit == "TB":
            return f"{size:.1f} {unit}"
    return ""


def _fs_usage(root: str) -> tuple[int, int]:
    """(used, free for us) bytes of the file system holding root; (0, huge) when unknown."""
    return _fs_counts(root)[:2]


def _fs_counts(root: str) -> tuple[int, int, int]:
    """(used bytes, free bytes for us, inodes used) of the file system holding root."""
    try:
        st = os.statvfs(root)
    except OSError:
        return 0, 1 << 62, 0
    return ((st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize,
            st.f_files - st.f_ffree)


class _DiskWatch:
    """Polled while a command runs: says "disk" when it must be killed.

    statvfs is cheap, so it is read every DISK_POLL_SECONDS; the file system's growth is only a
    hint (anything on the host writes there), confirmed by a walk measuring the project.
    """

    disk: Disk

    def __init__(self, ctx: Budgeted) -> None:
        assert ctx.disk is not None  # watched only when there is a disk to watch
        self.ctx, self.disk = ctx, ctx.disk
        self.next_poll = self.next_walk = 0.0
        self.used0, _, self.inodes0 = _fs_counts(ctx.root)
        self.trigger = self._trigger(self.used0, self.disk.growth())
        self.inode_trigger = self.inodes0 + ENTRY_STEP

    def _trigger(self, used: int, growth: int) -> int | None:
        """The file system usage at which to measure the project again."""
        if not self.disk.budget:
            return None
        return used + max(self.disk.budget - growth, DISK_STEP)

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self.next_poll:
            return None
        self.next_poll = now + DISK_POLL_SECONDS
        used, free, inodes = _fs_counts(self.ctx.root)
        low = free < self.disk.min_free
        grew = self.trigger is not None and used >= self.trigger
        many = bool(self.disk.budget) and inodes >= self.inode_trigger
        if now < self.next_walk or not (low or grew or many):
            return None
        assert self.disk.before is not None and self.disk.base is not None  # settled first
        size, entries, complete = _tree_measure(self.ctx)
        if not complete:  # a walk that could not see everything: all new space may be ours
            size = max(size, self.disk.before + used - self.used0)
        # Others writing to the same file system must not keep us walking all the time.
        self.next_walk = now + max(DISK_WALK_GAP, 3 * (time.monotonic() - now))
        growth = size - self.disk.base
        self.disk.entries = entries
        if self.disk.too_many() or (size > self.disk.before and (
                low or 0 < self.disk.budget < growth)):
            self.disk.stopped = (growth, free)  # this command is adding to it
            return "disk"
        self.trigger = self._trigger(used, growth)  # the growth was someone else's
        self.inode_trigger = inodes + ENTRY_STEP
        return None


def _disk_verdict(disk: Disk, report: _Tracking, reason: str | None) -> None:
    """The disk lines of a shell result; ok false when this command took the project over."""
    assert disk.size is not None and disk.before is not None  # settled before the command
    growth = disk.growth()
    if disk.budget:
        report.meta["disk_growth"] = growth
    over = 0 < disk.budget < growth or disk.too_many()
    if reason == "disk":
        assert disk.stopped is not None  # the watch that said "disk" set it
        seen, free = disk.stopped
        report.status = (disk.text(max(growth, seen), free) + "; the command was killed. "
                         "Delete files you do not need to go on.")
    elif over and (disk.size > disk.before or disk.too_many()):
        report.lines.append(disk.text(growth) + ". Delete files you do not need to go on.")
    else:
        if over:
            report.lines.append(f"note: {disk.text(growth)}; delete files you do not need")
        return
    report.failed = report.meta["disk_budget_exceeded"] = True


def _check_write(ctx: Budgeted, real: str, size: int) -> int:
    """Refuse a write that takes the project over its disk budget; returns the old allocation."""
    disk = ctx.disk
    try:
        old = os.lstat(real).st_blocks * 512
    except OSError:
        old = 0
    if disk is None:
        return old
    grow = -(-size // 4096) * 4096 - old  # whole blocks
    if grow > 0 and disk.budget and disk.base is None:
        disk.settle(_tree_size(ctx))  # no command yet: the project as it is now is the base
    if grow > 0 and 0 < disk.budget < disk.growth() + grow:
        raise ToolError(f"disk budget exceeded: writing {_human(size)} would make the project "
                        f"{_human(disk.growth() + grow)} bigger than at the start (budget "
                        f"{_human(disk.budget)}), so it was refused. Delete files you do not "
                        "need to go on.", disk_budget_exceeded=True)
    free = _fs_usage(ctx.root)[1]
    if grow > 0 and free - grow < disk.min_free:
        raise ToolError(disk.text(0, free) + f"; writing {_human(size)} was refused. Delete "
                        "files you do not need to go on.", disk_budget_exceeded=True)
    return old


def _note_write(ctx: Budgeted, real: str, old: int, digest: str) -> None:
    """Keep the index and the disk's size in step with a write of ours."""
    if ctx.tracker is not None:
        ctx.tracker.note_write(real, digest)
    if ctx.disk is not None and ctx.disk.size is not None:
        ctx.disk.size += os.lstat(real).st_blocks * 512 - old
