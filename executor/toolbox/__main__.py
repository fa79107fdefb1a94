"""Entry point: parse argv, open the channel, serve."""

from __future__ import annotations

import os
import signal
import sys

from .channel import Signed, Verified, _hangup_watch, _open_channel, _read_key
from .confine import PR_GET_DUMPABLE, PR_SET_DUMPABLE, confine
from .context import Context
from .limits import EXIT_ORPHANED
from .options import parse_args
from .server import serve
from .wire import send

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from types import FrameType
    from typing import NoReturn

    from .wire import Reader, Writer
    pass



def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(0)


def _not_dumpable() -> bool:
    """Keep the commands we run (same uid) out of our /proc files and away from ptrace.

    Otherwise a command could read our stdin and write our stdout through /proc/PID/fd, and
    answer the host in our place: fake previews, fake results, a forged audit trail. Returns
    whether we are now non-dumpable (the ready line reports it).
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        dumpable: int = libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
        return dumpable == 0
    except (ImportError, OSError, AttributeError) as exc:
        sys.stderr.write(f"toolbox: could not make itself non-dumpable: {exc}\n")
        return False


def main(argv: list[str]) -> int:
    """Entry point: parse argv, then serve on stdin/stdout."""
    guarded = _not_dumpable()
    opts = parse_args(argv)
    if not os.path.isdir(opts.root):
        sys.stderr.write(f"toolbox: root {opts.root!r} is not a directory\n")
        return 2
    key = _read_key(sys.stdin.buffer) if opts.sign else None
    pipes = _open_channel(opts.channel) if opts.channel and key else None
    filtered = confine(opts.seccomp_filter)
    ctx = Context(opts)
    ctx.guarded = guarded
    sys.stdout.flush()
    raw = os.fdopen(os.dup(1), "wb")
    out: Writer = Signed(raw, key) if key else raw
    inp: Reader = sys.stdin.buffer
    if isinstance(pipes, tuple) and key:
        send(out, {"channel": "fifo"})
        inp, out = Verified(os.fdopen(pipes[0], "rb"), key), Signed(os.fdopen(pipes[1], "wb"), key)
        ctx.channel = "fifo"
    elif pipes is not None:
        ctx.channel = f"stdio: {pipes}"
    ctx.hangup = _hangup_watch(pipes[0] if isinstance(pipes, tuple) and key else 0)
    os.dup2(2, 1)  # a stray print can never corrupt the protocol
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return serve(ctx, inp, out, filtered)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # our host's end is gone: PID 1 ends a bind container on this
        return EXIT_ORPHANED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
