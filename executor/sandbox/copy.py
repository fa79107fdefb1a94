"""Loading a copy workspace into a session's container, through the engine API alone.

Nothing here needs the engine to see the person's disk, so it works against a remote engine.
`/workspace` is a tmpfs (memory storage) or a fresh anonymous volume (disk storage, removed
with the container). Either way its top belongs to uid 0 and is set to mode 1777 by a `chmod`
run as uid 0 (no capability is needed to chmod what you own): the sandbox's user
makes what it likes there, but the sticky bit keeps it from moving what is not its own, such as
the copy's `.git`. Then:

1. the main part (an archive the workspace side makes) goes over an exec's stdin to a small
   stdlib-only extractor running as the sandbox's user. It takes only what the host's
   archiver writes: directories, regular files, links, PAX path records.
2. the `.git` part goes to the same extractor running as another uid, so the repositories
   belong to someone else and stay read-only for the sandbox's user (no capability to chown
   is needed: the files are created by their owner). The directories that hold a `.git` were
   sent open (0777) for this, and are closed (0755) by their owner afterwards.

A read-only copy is extracted by uid 0 in one part; its tools run as yet another uid that owns
nothing, so the kernel refuses every write.

The sandbox does not know how the archive is made: it declares `CopyLoader`, which the workspace
side implements (executor/workspace/copyload.py) and whoever builds the sandbox wires in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from executor.errors import SandboxError, ToolboxError
from executor.sandbox.channel import Channel
from executor.sandbox.engine import docker_errors

if TYPE_CHECKING:
    from executor.sandbox.config import SandboxConfig

WORKSPACE = "/workspace"
COPY_TIMEOUT = 600.0
"""Seconds a copy may take to arrive and be written."""

# Runs in the container: reads the host's tar from stdin and writes it under argv[1].
EXTRACT = r'''
import json, os, sys
class Feed:
    def __init__(self, f):
        self.f, self.buf, self.pos = f, b"", 0
    def take(self, n):
        if self.pos + n > len(self.buf):
            parts, have = [self.buf[self.pos:]], len(self.buf) - self.pos
            while have < n:  # read1: what has arrived (the host never closes stdin)
                chunk = self.f.read1(max(n - have, 4 << 20))
                if not chunk:
                    raise ValueError("the archive ended early")
                parts.append(chunk)
                have += len(chunk)
            self.buf, self.pos = b"".join(parts), 0
        view = memoryview(self.buf)[self.pos:self.pos + n]
        self.pos += n
        return view
def number(field):
    return int(bytes(field).rstrip(b"\0 ").strip() or b"0", 8)
def pax(data):
    found = {}
    while data:
        length = int(data.split(b" ", 1)[0])
        key, _, value = data[:length].split(b" ", 1)[1][:-1].partition(b"=")
        found[key] = value
        data = data[length:]
    return found
def checked(name):
    name = name.rstrip(b"/")
    parts = name.split(b"/")
    if not name or name[:1] == b"/" or b"\0" in name or b".." in parts or b"." in parts \
            or b"" in parts:
        raise ValueError("refused entry name %r" % name)
    return name
def write_file(feed, fd, size):
    left = size
    while left:
        view = feed.take(min(left, 1 << 20))
        while view:
            view = view[os.write(fd, view):]
        left -= min(left, 1 << 20)
    feed.take(-size % 512)
def main(dest):
    os.chdir(dest)
    os.umask(0)
    feed, dirs, count, extra, end = Feed(sys.stdin.buffer), [], 0, {}, bytes(512)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    while True:
        block = bytes(feed.take(512))
        if block == end:
            break
        kind, size, mtime = block[156:157], number(block[124:136]), number(block[136:148])
        if kind == b"x":
            extra = pax(bytes(feed.take(size + (-size % 512))[:size]))
            continue
        name = checked(extra.get(b"path") or block[:100].rstrip(b"\0"))
        link = extra.get(b"linkpath") or block[157:257].rstrip(b"\0")
        mode, extra = number(block[100:108]) & 0o777, {}
        count += 1
        if kind == b"5":
            os.mkdir(name, mode)
            dirs.append((name, mtime))
        elif kind == b"2":
            os.symlink(link, name)
            os.utime(name, (mtime, mtime), follow_symlinks=False)
        elif kind in (b"0", b"\0"):
            fd = os.open(name, flags, mode)
            try:
                write_file(feed, fd, size)
                os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)
        else:
            raise ValueError("refused entry type %r" % kind)
    for name, mtime in reversed(dirs):
        os.utime(name, (mtime, mtime), follow_symlinks=False)
    return count
try:
    done = {"ok": True, "entries": main(sys.argv[1])}
except Exception as exc:
    done = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
sys.stdout.write(json.dumps(done) + "\n")
sys.stdout.flush()
'''
_CHMOD = "import os, sys; [os.chmod(p, int(sys.argv[1], 8)) for p in sys.argv[2:]]"


class CopyAbort:
    """Lets another thread end a copy at once: the extractor's socket is shut down (a send
    blocked on a full pipe returns), and no further step starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channel: Channel | None = None
        self.aborted = False

    def attach(self, channel: Channel) -> None:
        with self._lock:
            self._channel = channel
            if self.aborted:
                channel.abort()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            if self._channel is not None:
                self._channel.abort()

    def check(self) -> None:
        if self.aborted:
            raise SandboxError("the copy was stopped")


class CopyLoader(Protocol):
    """Gets a copy of the project into a session's container (one start at a time)."""

    def plan(self, config: SandboxConfig, owner: tuple[int, int]) -> int:
        """Walk the root and check the size guard before any container exists, and start
        reading what will be sent; the copy's bytes. `owner`: uid, gid of the copy's files."""
        ...

    def start(self, api: Any, container: Any, *, user: str, read_only: bool) -> None:
        """Load the planned copy into `container` in the background (`wait` joins it)."""
        ...

    def drop(self) -> None:
        """Forget the plan: the container re-attached to holds its copy already."""
        ...

    def abort(self) -> None:
        """End a copy still arriving now, not when the engine says so."""
        ...

    def wait(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        ...

    def close(self) -> None:
        """After the container went: wait (bounded) for the loading to end, release the plan."""
        ...

    def manifest(self) -> object | None:
        """What this start copied in (after `wait`); None: nothing was copied."""
        ...

    def sent(self) -> object | None:
        """What this start copies in, once all of it is read (it may still be arriving);
        None: nothing is copied, or the copy failed (`wait` says why)."""
        ...

    @property
    def notes(self) -> list[str]:
        """What the copy left out, and why."""
        ...


def chmod(api: Any, container_id: str, user: str, mode: str, paths: list[str]) -> None:
    """chmod as `user` (the owner of `paths`), with chmod or else python3."""
    for argv in (["chmod", mode, *paths], ["python3", "-I", "-S", "-c", _CHMOD, mode, *paths]):
        with docker_errors("preparing the copy workspace"):
            created = api.exec_create(container_id, argv, user=user, stdout=True, stderr=True,
                                      workdir="/")
            output = api.exec_start(created["Id"])
            code = api.exec_inspect(created["Id"]).get("ExitCode")
        if code == 0:
            return
    said = output.decode(errors="replace").strip()[-300:] if output else ""
    raise SandboxError(f"could not prepare the copy workspace (exit {code}): {said}")


def extract(api: Any, container_id: str, user: str, stream: Iterable[bytes], *,
            abort: CopyAbort, before: Callable[[], None] | None = None) -> int:
    """Stream a tar to the extractor running as `user`; the number of entries it wrote.
    `before` runs once the extractor has started, before a byte is sent (so the extractor's
    start overlaps it: the chmod that lets it write)."""
    abort.check()
    # -I: the repository's own modules (a `json.py` in the copy) are never imported, nor the
    # package volume's (PYTHONUSERBASE); from "/", not the copy (red-team round 26)
    argv = ["python3", "-I", "-S", "-c", EXTRACT, WORKSPACE]
    with docker_errors("starting the copy"):
        created = api.exec_create(container_id, argv,
                                  stdin=True, stdout=True, stderr=True, user=user,
                                  workdir="/")
        sock = api.exec_start(created["Id"], socket=True)
    channel = Channel(getattr(sock, "_sock", sock))
    abort.attach(channel)
    try:
        if before is not None:
            before()
        try:
            for chunk in stream:
                abort.check()
                channel.send(chunk)
        except ToolboxError:
            pass  # the extractor stopped reading: its answer says why
        try:
            done = channel.read_json(time.monotonic() + COPY_TIMEOUT)
        except ToolboxError as exc:
            abort.check()
            raise SandboxError(f"the copy into the container failed: {exc}") from exc
    finally:
        channel.close()
    if not done.get("ok"):
        raise SandboxError(f"the copy into the container failed: {done.get('error')}")
    return int(done.get("entries", 0))
