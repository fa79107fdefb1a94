"""Loading a copy workspace into a session's container, through the engine API alone.

Nothing here needs the engine to see the person's disk, so it works against a remote engine:

1. `/workspace` is a fresh anonymous volume (removed with the container), owned by root.
   Read-write: a `chmod 0777` run as uid 0 (no capability is needed to chmod what you own)
   lets the sandbox's user create the top level.
2. The main part (executor/workspace/archive.py) goes over an exec's stdin to a small
   stdlib-only extractor running as the sandbox's user (read-write) or as uid 0 (read-only:
   the tools then run as another uid, so the kernel refuses every write). It takes only what
   the host's archiver writes: directories, regular files, links, PAX path records.
3. The `.git` part goes through the engine's archive endpoint, which extracts it as root with
   the owner we name: a uid that is not the sandbox's, so repositories stay read-only.
"""

from __future__ import annotations

import time
from typing import Any

from executor.errors import SandboxError, ToolboxError
from executor.sandbox.channel import Channel
from executor.sandbox.engine import docker_errors
from executor.workspace.archive import Archive

WORKSPACE = "/workspace"
COPY_TIMEOUT = 600.0
"""Seconds a copy may take to arrive and be written."""

# Runs in the container: reads the host's tar from stdin and writes it under argv[1].
EXTRACT = r'''
import json, os, sys
inp = sys.stdin.buffer
def exact(n):
    parts, left = [], n
    while left:
        chunk = inp.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError("the archive ended early")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
def number(field):
    return int(field.rstrip(b"\0 ").strip() or b"0", 8)
def pax(data):
    found = {}
    while data:
        length = int(data.split(b" ", 1)[0])
        key, _, value = data[:length].split(b" ", 1)[1][:-1].partition(b"=")
        found[key] = value
        data = data[length:]
    return found
def checked(name):
    text = os.fsdecode(name).rstrip("/")
    parts = text.split("/")
    if not text or text.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("refused entry name %r" % text)
    return text
def copy_into(fd, size):
    left = size
    while left:
        chunk = inp.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError("the archive ended early")
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]
        left -= len(chunk)
    exact(-size % 512)
def main(dest):
    os.chdir(dest)
    os.umask(0)
    dirs, count, extra = [], 0, {}
    while True:
        block = exact(512)
        if block == bytes(512):
            break
        kind, size, mtime = block[156:157], number(block[124:136]), number(block[136:148])
        if kind == b"x":
            extra = pax(exact(size + (-size % 512))[:size])
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
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            try:
                copy_into(fd, size)
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
_CHMOD = "import os, sys; os.chmod(sys.argv[1], 0o777)"


def load_copy(api: Any, container: Any, archive: Archive, *, user: str, read_only: bool) -> None:
    """Fill the container's /workspace with `archive` (see the module docstring)."""
    if not read_only:
        _open_top(api, container.id)
    extractor = "0:0" if read_only else user
    count = _extract(api, container.id, extractor, archive)
    if archive.plan.git:
        with docker_errors("copying the project's git repositories"):
            if not container.put_archive(WORKSPACE, archive.git()):
                raise SandboxError("the engine refused the project's git repositories")
    if count != archive.main_entries:  # the extractor wrote what was sent, or said why not
        raise SandboxError(f"the copy is incomplete: {count} of {archive.main_entries} entries")


def _open_top(api: Any, container_id: str) -> None:
    """Let the sandbox's user write the top level of the volume (a root-owned mount point)."""
    for argv in (["chmod", "0777", WORKSPACE], ["python3", "-c", _CHMOD, WORKSPACE]):
        with docker_errors("preparing the copy workspace"):
            created = api.exec_create(container_id, argv, user="0:0", stdout=True, stderr=True)
            output = api.exec_start(created["Id"])
            code = api.exec_inspect(created["Id"]).get("ExitCode")
        if code == 0:
            return
    said = output.decode(errors="replace").strip()[-300:] if output else ""
    raise SandboxError(f"could not prepare the copy workspace (exit {code}): {said}")


def _extract(api: Any, container_id: str, user: str, archive: Archive) -> int:
    """Stream the main part to the extractor; the number of entries it wrote."""
    with docker_errors("starting the copy"):
        created = api.exec_create(container_id, ["python3", "-c", EXTRACT, WORKSPACE],
                                  stdin=True, stdout=True, stderr=True, user=user,
                                  workdir=WORKSPACE)
        sock = api.exec_start(created["Id"], socket=True)
    channel = Channel(getattr(sock, "_sock", sock))
    try:
        try:
            for chunk in archive.main():
                channel.send(chunk)
        except ToolboxError:
            pass  # the extractor stopped reading: its answer says why
        try:
            done = channel.read_json(time.monotonic() + COPY_TIMEOUT)
        except ToolboxError as exc:
            raise SandboxError(f"the copy into the container failed: {exc}") from exc
    finally:
        channel.close()
    if not done.get("ok"):
        raise SandboxError(f"the copy into the container failed: {done.get('error')}")
    return int(done.get("entries", 0))
