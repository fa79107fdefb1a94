"""The signed channel: HMAC-signed lines on stdout, or the two FIFOs of the host."""

from __future__ import annotations

import errno
import os
import select
import stat
import sys

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable
    from typing import BinaryIO

    from .wire import Writer
    pass



class Signed:
    """Our stdout with every line prefixed by its HMAC (--sign): `<32 hex> <json>`.

    The key is the first stdin line after the source, read before any command runs. Where a
    command can open our /proc/PID/fd entries although we are not dumpable (gVisor checks only
    the file modes there), it can write lines into our stdout, but it cannot sign them.
    """

    def __init__(self, out: Writer, key: bytes) -> None:
        self.out, self.key = out, key

    def write(self, line: bytes) -> None:
        """Write one protocol line (ending in a newline) with its signature in front."""
        import hmac

        body = line.rstrip(b"\n")
        mac = hmac.new(self.key, body, "sha256").hexdigest()[:32].encode()
        self.out.write(mac + b" " + line)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self.out.flush()


def _read_key(inp: BinaryIO) -> bytes:
    """The signing key: one hex line on stdin."""
    return bytes.fromhex(inp.readline().decode("ascii").strip())


# -- channel ----------------------------------------------------------------------------------
# A request and its response through the engine's stream relay (dockerd and the container's
# shim copy every byte) cost more than the tool itself; two FIFOs on a directory the host
# mounted read-only carry them in the kernel alone. The directory is the host's: nothing in
# the container can make, replace or link a name there, and the host unlinks both FIFOs once
# we said we have them, so only a process that opened one before could still hold it. None
# runs when a toolbox starts (a restart kills what the last one left with kill(-1), repeated
# until none is left, else the next toolbox stays on stdio), and against one anyway
# every request is signed with a key of its own and its number in the sequence: a line
# written into `in` by anyone else, or played again, is dropped; our lines are signed as on
# stdout. Such a process can at most take lines away, which the host sees as a toolbox that
# does not answer, and restarts.


def _open_channel(directory: str) -> tuple[int, int] | str:
    """(read fd of `in`, write fd of `out`), or why not (the host made none: stay on stdio)."""
    fds: list[int] = []
    try:
        for name, mode in (("in", os.O_RDONLY), ("out", os.O_WRONLY)):
            # non-blocking: a FIFO nobody holds open fails now (ENXIO) instead of waiting
            fd = os.open(os.path.join(directory, name),
                         mode | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            fds.append(fd)
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, f"{name} is not a FIFO")
            os.set_blocking(fd, True)
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        return exc.strerror or str(exc)
    return fds[0], fds[1]


def _hangup_watch(fd: int) -> Callable[[], bool]:
    """Whether every writer of `fd` (the host's end of the requests) is gone: POLLHUP, which
    the kernel reports without asking (mask 0), so a pending request is never read here."""
    poller = select.poll()
    poller.register(fd, 0)
    return lambda: bool(poller.poll(0))


def request_key(key: bytes) -> bytes:
    """The key requests on the channel are signed with (not the one of our lines)."""
    import hmac

    return hmac.new(key, b"sandbox-agent requests", "sha256").digest()


def request_mac(key: bytes, number: int, body: bytes) -> bytes:
    """The signature of request `number` (0, 1, ...): 32 hex digits."""
    import hmac

    return hmac.new(key, b"%d " % number + body, "sha256").hexdigest()[:32].encode()


class Verified:
    """Request lines from the channel, each `<request_mac> <json>`: a line that is not the
    next one the host signed is dropped (and said on stderr)."""

    def __init__(self, inp: BinaryIO, key: bytes) -> None:
        self.inp, self.key, self.number = inp, request_key(key), 0

    def readline(self) -> bytes:
        """The next request line the host signed; b"" at EOF."""
        import hmac

        while True:
            line = self.inp.readline()
            if not line:
                return b""
            body = line[33:].rstrip(b"\n")
            if line[32:33] == b" " and hmac.compare_digest(
                    line[:32], request_mac(self.key, self.number, body)):
                self.number += 1
                return body
            sys.stderr.write("toolbox: dropped a request line the host did not sign\n")
