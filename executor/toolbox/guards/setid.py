"""Set-id bits a command left are cleared."""

from __future__ import annotations

import stat

from ..limits import SETID
from ..paths import _chmod_nofollow
from ..tracking import _octal

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from ..context import Context
    from ..tracking import Snapshot, _Tracking
    from ..wire import Change, Lstat, SetidRecord
    pass



# -- set-id bits and new .git entries ---------------------------------------------------------


def _clear_setid(ctx: Context, old: Snapshot, found: list[Change], report: _Tracking) -> None:
    """Drop set-id bits a command added: on the host such a file runs with its owner's rights."""
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    cleared: list[SetidRecord] = []
    for path, _ in found:
        st, prev = ctx.tracker.index.stats.get(path), old.stats.get(path)
        if st is None or not stat.S_ISREG(st[0]):
            continue
        added = st[0] & SETID & ~(prev[0] if prev and stat.S_ISREG(prev[0]) else 0)
        if added:
            cleared.append(_drop_bits(ctx, path, st, added))
    for record in cleared:
        bits = " and ".join(record["removed"]) + " bit" + "s" * (len(record["removed"]) > 1)
        if "error" in record:
            report.lines.append(f"could not remove the {bits} from ./{record['path']} "
                                f"({record['error']}): set-id files are not allowed in the project")
        else:
            report.lines.append(f"removed {bits} from ./{record['path']}: set-id files are not "
                                "allowed in the project")
    if cleared:
        report.meta["setid_cleared"] = cleared


def _drop_bits(ctx: Context, path: str, st: Lstat, bits: int) -> SetidRecord:
    names = [name for flag, name in ((stat.S_ISUID, "set-uid"), (stat.S_ISGID, "set-gid"))
             if bits & flag]
    record: SetidRecord = {"path": path, "removed": names, "mode_before": _octal(st)}
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    try:
        _chmod_nofollow(ctx.root, path, st[4], stat.S_IMODE(st[0]) & ~bits)
        ctx.tracker.refresh(path)
        record["mode_after"] = _octal(ctx.tracker.index.stats[path])
    except OSError as exc:
        record["error"] = exc.strerror or str(exc)
    return record
