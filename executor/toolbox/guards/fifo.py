"""FIFOs a command left in the project are removed.

Git on the host opens `.gitignore`, `.gitattributes`, `.mailmap` and the like by name, and an
editor or a shell prompt opens what it finds: each blocks for ever on a FIFO, which no
repository can ship (git does not track one) but any command can make. A command's own FIFO
is gone once the command ends (its processes end with it); a FIFO between two commands is
made in /tmp.
"""

from __future__ import annotations

import stat

from ..nofollow import unlink_fifo

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from ..context import Context
    from ..tracking import _Tracking
    from ..wire import Change
    pass


def _remove_fifos(ctx: Context, found: list[Change], report: _Tracking) -> None:
    """Unlink every FIFO among the command's changes (no link followed), and say so."""
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    removed: list[str] = []
    for path, _ in found:
        st = ctx.tracker.index.stats.get(path)
        if st is None or not stat.S_ISFIFO(st[0]):
            continue
        try:
            if unlink_fifo(ctx.root, path):
                removed.append(path)
                ctx.tracker.forget(path)
        except OSError as exc:
            report.lines.append(f"could not remove the FIFO ./{path} ({exc.strerror or exc}): "
                                "git and editors on the host block opening it")
    for path in removed:
        report.lines.append(f"removed the FIFO ./{path}: git and editors on the host block "
                            "opening one (make FIFOs in /tmp)")
    if removed:
        report.meta["fifos_removed"] = removed
