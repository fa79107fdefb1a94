"""Processes: pumping a child's output, and killing everything a call left."""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import signal
import subprocess
import time

from .limits import (
    CHUNK,
    PROGRESS_CHARS,
    PROGRESS_SECONDS,
    PROGRESS_TOTAL,
    SETTLE_SECONDS,
    SWEEP_SECONDS,
    TOKEN_VAR,
)
from .wire import send

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable
    from typing import Protocol

    from .wire import Sink, Writer

    class Reaping(Protocol):
        """What the reaper needs of the Context (declared here: context.py imports this)."""

        token: str
        keep: frozenset[int]
        kill_all: bool
        broad_sweep: bool



def _finish(proc: subprocess.Popen[bytes]) -> None:
    """Reap a child whose pipes we are done with."""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _reap() -> None:
    """Collect exited children other than our own Popen ones (matters when we are PID 1)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


class _Capture:
    """Head (2/3) and tail (1/3) of one output stream within a byte budget."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit * 2 // 3
        self.tail_cap = limit - self.head_cap
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        """Count a chunk; keep it if it falls in the head or the tail."""
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[:max(0, len(self.tail) - self.tail_cap)]

    @property
    def cut(self) -> bool:
        """Whether bytes were dropped between head and tail."""
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        """What the model sees, with a marker where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.cut:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


class _Lines:
    """Complete lines of a stream, up to a count."""

    lines: list[bytes]

    def __init__(self, limit: int) -> None:
        self.limit, self.lines, self.partial = limit, [], b""

    def add(self, chunk: bytes) -> None:
        """Split a chunk into lines, until there are enough."""
        if not self.full():
            parts = (self.partial + chunk).split(b"\n")
            self.partial = parts.pop()
            self.lines.extend(parts)

    def full(self) -> bool:
        """Whether the limit is reached."""
        return len(self.lines) >= self.limit

    def done(self) -> list[bytes]:
        """The lines, including an unterminated last one."""
        tail = [self.partial] if self.partial and not self.full() else []
        return (self.lines + tail)[:self.limit]


class _Progress:
    """A running command's output, sent as progress lines while it runs (rate-limited, capped)."""

    def __init__(self, out: Writer, rid: int | None) -> None:
        self.out, self.rid = out, rid
        self.pending = {"stdout": "", "stderr": ""}
        self.dropped = {"stdout": 0, "stderr": 0}
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                         for name in self.pending}
        self.sent, self.due = 0, 0.0
        self.broken = False
        """The host's end of our lines is gone (EPIPE): nothing more is sent, and the call's
        command is stopped as for a hang-up (`_run`)."""

    def tee(self, stream: str, capture: _Capture) -> _Tee:
        """A sink for _pump that feeds `capture` and this stream's progress."""
        return _Tee(self, stream, capture)

    def feed(self, stream: str, chunk: bytes) -> None:
        """Keep the newest PROGRESS_CHARS of what `stream` wrote since the last line sent."""
        text = self.pending[stream] + self.decoders[stream].decode(chunk)
        if len(text) > PROGRESS_CHARS:
            self.dropped[stream] += len(text) - PROGRESS_CHARS
            text = text[-PROGRESS_CHARS:]
        self.pending[stream] = text

    def flush(self, final: bool = False) -> None:
        """Send what is pending, at most every PROGRESS_SECONDS (always when `final`)."""
        now = time.monotonic()
        if not final and now < self.due:
            return
        self.due = now + PROGRESS_SECONDS
        for stream, text in self.pending.items():
            if final:
                text += self.decoders[stream].decode(b"", final=True)
            if (text or self.dropped[stream]) and self.sent < PROGRESS_TOTAL and not self.broken:
                self.sent += len(text)
                try:
                    send(self.out, {"id": self.rid, "progress": {
                        "stream": stream, "text": text, "dropped": self.dropped[stream]}})
                except BrokenPipeError:
                    self.broken = True
            self.pending[stream], self.dropped[stream] = "", 0


class _Tee:
    """Feeds a chunk to a _Capture and to the progress of its stream."""

    def __init__(self, progress: _Progress, stream: str, capture: _Capture) -> None:
        self.progress, self.stream, self.capture = progress, stream, capture

    def add(self, chunk: bytes) -> None:
        """Capture the chunk and queue it as progress."""
        self.capture.add(chunk)
        self.progress.feed(self.stream, chunk)


def _pump(proc: subprocess.Popen[bytes], sinks: tuple[Sink, Sink], deadline: float,
          should_stop: Callable[[], str | None], tick: float | None = None) -> str | None:
    """Feed stdout and stderr to sinks until both close, the deadline, or should_stop() says.

    should_stop() runs after every read, and at least every `tick` seconds when one is given.
    """
    sel = selectors.DefaultSelector()
    for pipe, sink in ((proc.stdout, sinks[0]), (proc.stderr, sinks[1])):
        if pipe is not None and not pipe.closed:  # both are pipes: never None
            sel.register(pipe, selectors.EVENT_READ, sink)
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(min(remaining, tick) if tick else remaining):
                chunk = os.read(key.fd, CHUNK)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
            reason = should_stop()
            if reason:
                return reason
        return None
    finally:
        sel.close()


# -- process cleanup --------------------------------------------------------------------------


def _sweep(ctx: Reaping, pgid: int, since: int | None) -> int:
    """SIGKILL the command's group and strays until none is left; how many there were (at
    most at once)."""
    most, deadline, quiet = 0, time.monotonic() + SWEEP_SECONDS, False
    every = ctx.kill_all and since is not None
    while True:
        pids = [pid for pid in _strays(ctx, pgid, since) if pid != pgid]
        most = max(most, len(pids))
        if every:  # one kernel pass: a process that forks and exits in a loop cannot hop past
            _kill(-1)
        _kill(pgid, group=True)  # most leftovers at once; a fork bomb cannot outrun it
        for pid in pids:
            _kill(pid)
        # Without kill(-1) (a toolbox on a host), one more look after an empty one: a process
        # between `setsid` and its exec has left the group and shows no environment yet.
        if (not pids and (every or quiet)) or time.monotonic() > deadline:
            return most
        quiet = not pids
        time.sleep(0.01)


def _settled(ctx: Reaping) -> tuple[bool, int]:
    """After the sweep, in a session container: whether nothing but ours is left running.

    gVisor's kill(-1) misses a process that clones and exits in a loop (a generation born
    during the pass), and its /proc/PID is gone before it can be read. But some generation is
    always alive, so /proc always lists one: kill(-1) again while anything of our uid (or an
    entry that vanished as it was read) is listed. (False when that never ends, the number
    of processes it killed.)"""
    deadline, uid = time.monotonic() + SETTLE_SECONDS, os.geteuid()
    seen: set[int] = set()
    while True:
        try:
            names = os.listdir("/proc")
        except OSError:
            return True, len(seen)  # nothing to go by; the sweep did what it could
        left = [int(name) for name in names if name.isdigit() and int(name) not in ctx.keep
                and _ours_or_gone(name, uid)]
        if not left:
            return True, len(seen)
        if time.monotonic() > deadline:
            return False, len(seen)
        seen.update(left)
        _kill(-1)
        for pid in left:
            _kill(pid)
        time.sleep(0.002)


def _ours_or_gone(pid: str, uid: int) -> bool:
    """A live process of ours (a zombie only when its threads live on), or an entry that
    vanished as it was read (a generation of a hopper)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        state = _proc_stat(pid)[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X") or _live_threads(pid)


def _alone_in_our_container() -> bool:
    """Whether kill(-1) reaches only what the sandbox's commands left: PID 1 is our init (so
    this is a session container's pid namespace) and the toolbox holds no capability (so only
    processes of its own uid, which are the commands', can be signalled). Never on a host."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            ours = b"# sandbox-agent init" in f.read()
        with open("/proc/self/status", "rb") as f:
            caps = [line.split()[1] for line in f if line.startswith(b"CapEff:")]
    except (OSError, IndexError):
        return False
    return ours and caps == [b"0000000000000000"]


def _kill(pid: int, group: bool = False) -> None:
    with contextlib.suppress(OSError):  # already gone
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)


def _strays(ctx: Reaping, pgid: int, since: int | None) -> list[int]:
    """Live processes a call left behind (see the module docstring for which)."""
    found: list[int]
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    uid, found = os.geteuid(), []
    for name in names:
        if not name.isdigit() or int(name) in ctx.keep:
            continue
        group = _live_group(name, since)
        if group is None or not _owned(name, uid):
            continue
        broad = ctx.broad_sweep and since is not None
        if group == pgid or broad or _has_token(name, ctx.token):
            found.append(int(name))
    return found


def _proc_stat(pid: int | str) -> list[bytes]:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _live_group(pid: str, since: int | None) -> int | None:
    """Process group of a live process started no earlier than `since`, else None.

    Nothing a command started can be older than its shell: this cheap test rules out most of
    /proc before any further syscall.
    """
    try:
        fields = _proc_stat(pid)
        group, start = int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
    if since is not None and start < since:
        return None
    if fields[0] in (b"Z", b"X") and not _live_threads(pid):
        return None  # a real zombie; a leader whose own thread exited lives on in the others
    return group


def _live_threads(pid: str) -> bool:
    """Whether a process whose leader is a zombie still has a running thread (the leader
    called exit(2) for itself alone: SIGKILL to its pid still ends them all). `Threads:` in
    its status counts them, under gVisor too, where /proc/PID/task cannot be listed."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1]) > 1
    except (OSError, IndexError, ValueError):
        pass
    return False


def _owned(pid: str, uid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def _start_tick(pid: int) -> int | None:
    try:
        return int(_proc_stat(pid)[19])
    except (OSError, IndexError, ValueError):
        return None  # without it the broad sweep stays off for this call


def _has_token(pid: str, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TOKEN_VAR}={token}".encode() in f.read()
    except OSError:
        return False


def _which(name: str) -> str | None:
    """`shutil.which` for one program, on absolute PATH entries only (importing shutil took
    a tenth of the start in a container)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.path.isabs(folder) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _ancestors() -> list[int]:
    """Our ancestors' pids (never swept)."""
    found: list[int]
    found, pid = [], os.getppid()
    while pid > 1 and pid not in found:
        found.append(pid)
        try:
            pid = int(_proc_stat(pid)[1])
        except (OSError, IndexError, ValueError):
            break
    return found
