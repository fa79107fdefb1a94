"""The Docker sandbox: one hardened container per session, one long-lived toolbox inside it.

Lifecycle (create, re-attach, remove) and the work (tool calls over the toolbox's attached
stdin/stdout) are kept apart: `DockerSandbox` owns the container, `Toolbox` the process.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import functools
import marshal
import os
import platform
import re
import secrets
import socket
import stat
import threading
import time
import zlib
from collections.abc import Callable
from importlib import resources
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from pydantic import BaseModel, Field

from executor.config import (
    COPY_MEMORY_MAX,
    DEFAULT_COPY_LIMIT,
    DEFAULT_COPY_MAX_FILES,
    DEFAULT_DISK_BUDGET,
    DEFAULT_IMAGE,
    DEFAULT_MEMORY,
    DEFAULT_NOFILE,
    DEFAULT_NPROC,
    DEFAULT_PIDS_LIMIT,
    DEFAULT_TMP_SIZE,
    DEFAULT_TOOL_TIMEOUT,
    CopyStorage,
    WorkspaceMode,
    default_cpus,
    parse_size,
)
from executor.errors import (
    ImageNotFoundError,
    RuntimeNotFoundError,
    SandboxAgentError,
    SandboxError,
    ToolboxError,
    ToolboxTimeoutError,
    WorkspaceUnreachableError,
)
from executor.messages import ToolResult
from executor.network import egress as network
from executor.network.egress import EgressConfig, EgressHooks
from executor.protocols import OutputCallback, SandboxInfo
from executor.sandbox import boot, runrecord, seccomp
from executor.sandbox.channel import Channel, FifoChannel, OnProgress
from executor.sandbox.copy import CopyAbort, load_copy
from executor.sandbox.engine import (
    IMAGE_FIX,
    RUNTIME_FIX,
    connect,
    docker_errors,
    endpoint,
    is_podman,
    runtimes,
)
from executor.sandbox.gitsafety.aftercheck import after_session
from executor.sandbox.gitsafety.guard import GitGuard
from executor.sandbox.gitsafety.hostgit import Protected
from executor.sandbox.spec import SandboxSpec
from executor.state import LEGACY_DIR, check_outside, legacy_state, real_root
from executor.workspace.archive import Archive, Limits, Prefetch, overlay, plan
from executor.workspace.manifest import Manifest, from_row
from executor.workspace.paths import Excludes
from executor.workspace.store import BlobStore

WORKSPACE = "/workspace"
CHANNEL = "/run/sandbox-agent"
"""Where a session's channel directory (two FIFOs, see `fifo_pair`) is mounted, read-only."""
LABEL_SESSION = "sandbox-agent.session"
LABEL_ROOT = "sandbox-agent.root"
LABEL_LOCK = "sandbox-agent.lock"
LABEL_HOST = "sandbox-agent.host"
LABEL_WORKSPACE = "sandbox-agent.workspace"
NOBODY = 65534
"""The uid that owns a copy's repositories (and runs the tools of a read-only copy)."""
_INIT_TAG = "# sandbox-agent init"
"""The first line of PID 1's code (boot/init.py): how the kill script knows PID 1 is ours."""
INIT_MARK = b"sandbox-agent-init: the toolbox exited"
"""What the container's first process writes on stderr when its toolbox child is gone."""
EXIT_ORPHANED = 75
"""The toolbox's exit status when its host went away mid-command (init.py ends the container)."""
GVISOR_PIDS_FACTOR = 16
"""Host pids per process allowed under runsc (measured: 256 processes took 1,344 host pids)."""
_CALL_MARGIN = 15.0  # seconds the host waits beyond a tool's own timeout
_START_TIMEOUT = 30.0
_KILL_TIMEOUT = 15.0  # seconds the kill script may take (it waits 5 s, then settles for 2 s)
Warn = Callable[[str], None]
T = TypeVar("T")


class SandboxConfig(BaseModel):
    """How to build one session's container."""

    root: Path
    """Project root on the host, mounted at /workspace."""
    session_id: str
    """Session id; the container is named sandbox-agent-<session_id>."""
    image: str = DEFAULT_IMAGE
    """Image with python3 >= 3.9 (ripgrep and git optional)."""
    runtime: str | None = None
    """OCI runtime the engine runs the container with (`runsc`: gVisor); None: the engine's."""
    fallback_image: str | None = None
    """Used, with a warning, when `image` no longer exists (a resumed session's old digest)."""
    read_only: bool = False
    """Mount the root read-only."""
    network: bool = False
    """Give the container a network (off by default)."""
    memory: str = DEFAULT_MEMORY
    """Memory limit; swap is not allowed on top."""
    pids_limit: int = DEFAULT_PIDS_LIMIT
    """Maximum processes."""
    cpus: float = Field(default_factory=default_cpus)
    """CPU limit (default: the host's cores, at most 4)."""
    tmp_size: str = DEFAULT_TMP_SIZE
    """Size cap of the /tmp tmpfs."""
    tool_timeout: int = DEFAULT_TOOL_TIMEOUT
    """Default timeout of run_shell_command in seconds."""
    max_output: int = 30_000
    """Bytes of each command output stream kept for the model."""
    env: dict[str, str] = Field(default_factory=dict)
    """Allow-listed host environment passed in (already filtered by the caller)."""
    allow_git_writes: bool = False
    """Mount .git read-write."""
    disk_budget: int = DEFAULT_DISK_BUDGET
    """Bytes the project may grow by in the session (0: no budget); also each file's size limit."""
    lock_dir: Path | None = None
    """Where liveness lock files go (None: the user's cache dir)."""
    workspace: WorkspaceMode = "bind"
    """bind: the root is mounted at /workspace; copy: a copy of it is loaded there."""
    copy_limit: int = DEFAULT_COPY_LIMIT
    """Bytes a project may have to be copied."""
    copy_max_files: int = DEFAULT_COPY_MAX_FILES
    """Entries a project may have to be copied."""
    copy_exclude: list[str] = Field(default_factory=list)
    """gitignore-style patterns left out of the copy."""
    copy_storage: CopyStorage = "auto"
    """memory (tmpfs), disk (an anonymous volume) or auto (memory up to 256 MiB)."""
    copy_bytes: int = 0
    """Bytes of the planned copy (set when it is planned; sizes the memory storage)."""
    copy_overlay: dict[str, list[Any] | None] = Field(default_factory=dict)
    """Pending changes put back into a new copy (a resumed session): path -> entry or None."""
    blob_dir: Path | None = None
    """Where the contents of `copy_overlay` files are kept."""
    fifo_channel: bool = True
    """Carry tool calls over two FIFOs the host makes (`channel_dir`) instead of the engine's
    stream relay, where the engine is on this machine and the runtime is not gVisor."""
    egress: EgressConfig | None = None
    """The hosts the sandbox may reach through the host's proxy (None: no network at all)."""


class Toolbox:
    """The toolbox process inside the container, reached over an exec's attached stream, or
    over the container's own (`attached`: the socket `DockerSandbox._create` attached before
    the start, the container's first process being `boot.first_toolbox()`)."""

    def __init__(self, api: Any, container_id: str, user: str, argv: list[str],
                 attached: Any = None, channel: Path | None = None) -> None:
        self._api, self._cid, self._user, self._argv = api, container_id, user, argv
        self._attached = attached
        self._fifos = channel
        """The host side of the container's `CHANNEL` directory (None: stdio only)."""
        self._channel: Channel | None = None
        self._stdio: Channel | None = None
        self._next_id = 0
        self.ready: dict[str, Any] = {}
        """The toolbox's ready line (pid, version, python, rg, guarded)."""
        self.pid: int | None = None
        self.exec_id = ""

    def start(self) -> dict[str, Any]:
        """Start the process, send it the toolbox (code or source, as it asks); its ready line."""
        sock = self._attached
        # an exec's stream ends with its process; the container's own only with the container
        end_mark = INIT_MARK if sock is not None else None
        if sock is None:
            with docker_errors("starting the toolbox"):
                created = self._api.exec_create(
                    self._cid, toolbox_command(self._argv), stdin=True, stdout=True,
                    stderr=True, user=self._user, workdir="/",
                )
                self.exec_id = created["Id"]
                sock = self._api.exec_start(self.exec_id, socket=True)
        key = secrets.token_bytes(32) if "--sign" in self._argv else None
        gone = self._container_gone if self._attached is None else None
        channel = self._channel = self._stdio = Channel(getattr(sock, "_sock", sock), key,
                                                        end_mark, gone)
        signing = key.hex().encode() + b"\n" if key else b""
        magic = self._started(channel.read_line)
        pipes = fifo_pair(self._fifos) if self._fifos and key else None
        try:
            channel.send(toolbox_payload(magic) + signing)
            ready = self._started(channel.read_json)
            if pipes and key and ready == {"channel": "fifo"}:  # the rest comes that way
                self._channel = FifoChannel(*pipes, key, channel)
                pipes = None
                ready = self._started(self._channel.read_json)
        except BaseException:
            self._channel.close()  # our FIFO ends and the stream: nothing is left open
            raise
        finally:
            if self._fifos and key:  # opened by now, or never: nobody else may open them
                unlink_fifos(self._fifos)
            for fd in pipes or ():
                os.close(fd)
        if not ready.get("ready"):
            raise ToolboxError(f"the toolbox sent {ready!r} instead of its ready line")
        self.ready = ready
        self.pid = int(ready.get("pid", 0)) or None
        return ready

    def _started(self, read: Callable[[float], T]) -> T:
        """What the starting toolbox says next (its magic line, its ready line)."""
        try:
            return read(time.monotonic() + _START_TIMEOUT)
        except ToolboxError as exc:
            raise ToolboxError(
                f"the toolbox did not start: {exc}",
                fix="the image needs python3 >= 3.9; check `sandbox-agent doctor`",
            ) from exc

    def call(self, tool: str, args: dict[str, Any], timeout: float,
             on_progress: OnProgress | None = None) -> dict[str, Any]:
        """One request/response; raises ToolboxError/ToolboxTimeoutError when the process fails.

        With `on_progress`, a running command's output comes to it while it runs.
        """
        if self._channel is None or self._channel.closed:
            raise ToolboxError("the toolbox is not running")
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "tool": tool, "args": args}
        if on_progress is not None:
            request["progress"] = True
        reply = self._channel.request(request, time.monotonic() + timeout, on_progress)
        if reply.get("id") != self._next_id:  # a reply without our id is not an answer
            raise ToolboxError(f"toolbox answered request {reply.get('id')}, not {self._next_id}")
        return reply

    def _container_gone(self) -> str | None:
        """Why the container no longer runs (None: it runs, or the engine did not say)."""
        try:
            with docker_errors("inspecting the sandbox"):
                state = self._api.inspect_container(self._cid).get("State") or {}
        except SandboxAgentError:
            return None
        if state.get("Running", True):
            return None
        oom = ": the host's kernel killed it for memory" if state.get("OOMKilled") else ""
        return f"its container {state.get('Status', 'stopped')}{oom}"

    def is_running(self) -> bool:
        """Whether the process is still alive."""
        if self._channel is None or self._channel.closed:
            return False
        if self._attached is not None:  # the container runs (the caller asked): its stream
            self._channel.poll()
            return not (self._channel.closed or self._channel.ended)
        if not self.exec_id:
            return False
        with docker_errors("inspecting the toolbox"):
            return bool(self._api.exec_inspect(self.exec_id).get("Running"))

    def stop(self) -> None:
        """Close its stdin (it exits on EOF)."""
        if self._channel is not None:
            self._channel.close()

    def stderr_tail(self) -> str:
        """What the process last wrote to stderr."""
        return self._channel.stderr_tail() if self._channel else ""


class DockerSandbox:
    """A hardened per-session container; satisfies the `Sandbox` protocol."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn | None = None,
                 egress_hooks: EgressHooks | None = None):
        self.config = config
        self._egress_hooks = egress_hooks
        self._egress: network.Egress | None = None
        self._client = client
        self._warn = warn or (lambda message: None)
        self._container: Any = None
        self._attached: Any = None
        """The stream of a container just made with the toolbox as its first process."""
        self._toolbox: Toolbox | None = None
        self._lock_fd: int | None = None
        self._info: SandboxInfo | None = None
        self._git = GitGuard(config.root, workspace=config.workspace, read_only=config.read_only,
                             allow_git_writes=config.allow_git_writes)
        self._seccomp_file: Path | None = None
        self._podman = False
        self._gvisor = False
        self._copy: Archive | None = None
        self._prefetch: Prefetch | None = None
        self._copying: threading.Thread | None = None
        self._copy_error: BaseException | None = None
        self._copy_abort = CopyAbort()
        self._root_checked = False
        self._channel: Path | bool | None = False
        """The channel directory once decided (`_channel_dir`); False: not yet."""
        self._image_id = ""
        self._life: int | None = None
        """Our end of PID 1's lifeline (`hold_life`): closed, by us or by our death, it ends
        what the container runs."""
        self.reattached = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def name(self) -> str:
        """The container's name."""
        return container_name(self.config.session_id)

    def preflight(self) -> None:
        """Fail now, not at the first tool call, when the engine or the image is missing
        (cheap: one ping and one lookup; the container itself may start later)."""
        self._client = self._client or connect()
        self._image()
        if self.config.runtime:  # one more question to the engine, only when a runtime is named
            self._podman = is_podman(self._client)
            network.check_engine(self.config.egress, gvisor=self._runtime_is_gvisor())

    def start(self) -> None:
        """Create (or re-attach to) the session's container and start the toolbox."""
        try:
            self._client = self._client or connect()
            self._podman = is_podman(self._client)
            if self._podman:  # it reads the profile from a file, not from the request
                self._seccomp_file = seccomp.profile_file(self._lock_path().parent)
            self._gvisor = self._runtime_is_gvisor()
            network.check_engine(self.config.egress, gvisor=self._gvisor)
            image = self._image()
            self._image_id = str(image.id)
            # compiled while the engine makes the container (GIL released on its socket)
            threading.Thread(target=compiled_toolbox, name="toolbox-compile", daemon=True).start()
            if self.copying:
                self._plan_copy()
            else:
                self._settle_abandoned()
                self._protect()
            self._lock()
            self._record_start()
            self._container = self._existing() or self._create()
            if self.reattached:
                channel = self._channel_dir()
                if channel is not None and self._life is None:
                    # its PID 1 kills what is left when the last host went, then opens a new
                    # lifeline: nothing may start there before that (it would be killed)
                    make_life(channel)
                    self._life = hold_life(channel, timeout=10.0)
                self._clear_left()
            self._start_egress()
            self._start_copy()
            self._start_toolbox(running=True)
            self._info = self._describe(image)
        except BaseException:
            never_made = self._container is None
            self.stop()
            if never_made and isinstance(self._channel, Path):  # no container: nothing mounts it
                self._drop_channel_dir()
            raise

    def stop(self) -> None:
        """Remove the container and release the session lock; safe to call twice."""
        self._copy_abort.abort()  # a copy still arriving ends now, not when the engine says so
        if self._copying is not None:
            self._stop_prefetch()
        if self._toolbox is not None:
            self._toolbox.stop()
            self._toolbox = None
        self._stop_egress()
        if self._container is not None:
            with docker_errors("removing the sandbox container"):
                self._container.remove(force=True, v=True)
            self._container = None
            self._drop_life()
            self._drop_channel_dir()
            self._after_session()
        if self._copying is not None:  # its container is gone: a copy still running ends now
            self._copying.join(timeout=30)
            self._copying, self._copy_error = None, None
        self._stop_prefetch()
        self._unlock()

    def _protect(self) -> None:
        """Find what git on the host would run from the tree, before the container exists."""
        self._git.protect()

    # -- copy workspace ----------------------------------------------------------------------

    @property
    def copying(self) -> bool:
        """Whether the sandbox works on a copy of the root (not on the root itself)."""
        return self.config.workspace == "copy"

    def _plan_copy(self) -> None:
        """Walk the root and check the size guard before any container exists."""
        limits = Limits(self.config.copy_limit, self.config.copy_max_files,
                        Excludes(self.config.copy_exclude),
                        git_apart=not (self.config.allow_git_writes or self.config.read_only))
        found = plan(self.config.root, limits)
        pending = {path: from_row(row) if row else None
                   for path, row in self.config.copy_overlay.items()}
        if pending:
            found = overlay(found, pending)
        storage = self.config.copy_storage
        if storage == "memory" and self._podman:
            self._warn("Podman cannot give a tmpfs an owner (uid=); the copy is kept on disk")
        if storage == "auto" or self._podman:
            storage = "memory" if found.bytes <= COPY_MEMORY_MAX and not self._podman else "disk"
        self.config = self.config.model_copy(update={"copy_storage": storage,
                                                     "copy_bytes": found.bytes})
        blobs = BlobStore(self.config.blob_dir) if self.config.blob_dir else None
        uid, gid = (int(n) for n in self._mount_user().split(":"))
        git_uid = NOBODY if uid != NOBODY else 0
        self._copy = Archive(self.config.root, found, uid=uid, gid=gid, git_uid=git_uid,
                             git_gid=git_uid, blobs=blobs.get if blobs else None)
        self._prefetch = Prefetch(self._copy.main())  # read while the container is made

    def _start_copy(self) -> None:
        """Load the copy while the toolbox starts; tool calls wait for it (`wait_copied`)."""
        if self._copy is None or self._prefetch is None or self.reattached:
            self._copy = None
            self._stop_prefetch()
            return
        archive, container, main = self._copy, self._container, self._prefetch
        abort = self._copy_abort = CopyAbort()

        def run() -> None:
            try:
                load_copy(self._client.api, container, archive, main, user=self._mount_user(),
                          git_user=f"{archive.git_uid}:{archive.git_gid}",
                          read_only=self.config.read_only,
                          abort=abort)
            except BaseException as exc:  # re-raised in the caller's thread by wait_copied
                self._copy_error = exc
            finally:
                self._stop_prefetch()

        self._copying = threading.Thread(target=run, name="sandbox-copy", daemon=True)
        self._copying.start()

    def _stop_prefetch(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()
            self._prefetch = None

    def wait_copied(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        if self._copying is not None:
            self._copying.join()
            self._copying = None
        if self._copy_error is not None:
            error, self._copy_error = self._copy_error, None
            if isinstance(error, SandboxAgentError):
                raise error
            raise SandboxError(f"the copy into the container failed: {error}") from error

    def copy_manifest(self) -> Manifest | None:
        """What this start copied in (the base of its changes); None: an existing copy."""
        self.wait_copied()
        return None if self._copy is None else self._copy.manifest

    @property
    def copy_notes(self) -> list[str]:
        """What the copy left out, and why."""
        return [] if self._copy is None else list(self._copy.notes)

    def _check_root(self, seen: Any) -> None:
        """Bind mode: the engine must have mounted this very directory (not another disk's)."""
        self._root_checked = True
        if not isinstance(seen, dict):
            return  # an older toolbox does not say
        here = os.stat(self.config.root)
        if (seen.get("dev"), seen.get("ino")) == (here.st_dev, here.st_ino):
            return
        if seen.get("mtime_ns") == here.st_mtime_ns:  # gVisor shows its own device and inode
            return
        raise WorkspaceUnreachableError(
            f"the Docker engine at {endpoint()} mounted another directory at "
            f"{self.config.root}: it cannot see this machine's disk",
            fix="use --workspace copy (or an engine on this machine)")

    def _after_session(self) -> None:
        """Clear set-id bits the session left, report new repositories, remove our mountpoints."""
        if self._git.baseline is None:
            return
        self._git.after_session(self._warn)
        runrecord.forget(self._lock_path().parent, self.name)

    def _record_start(self) -> None:
        """What the end-of-session checks need, on disk until they ran (runrecord.py)."""
        start, root = self._git.baseline, self.config.root
        if start is None:
            return
        runrecord.RunRecord(
            name=self.name, root=str(root), started_ns=start.started_ns, tree=start.tree,
            identities=start.identities,
            made_dirs=[str(path.relative_to(root)) for path in start.made_dirs],
        ).save(self._lock_path().parent)

    def _settle_abandoned(self) -> None:
        """Runs on this root whose controller died: their containers go (with whatever still
        runs there), then their end-of-session checks run, before this run's start looks at
        the tree (what they planted must not be taken for the person's)."""
        for record in runrecord.abandoned(self._lock_path().parent, self.config.root):
            self._warn(f"a run on this project ({record.name}) ended without its controller: "
                       "its container is removed and its end-of-session checks run now")
            settle(self._client, record, self._lock_path().parent, self._warn)

    def detach(self) -> None:
        """Leave the container running for a later `--resume` (stdin closed, lock released)."""
        if self._toolbox is not None:
            self._toolbox.stop()
            self._toolbox = None
        self._drop_life()
        self._stop_egress()  # the proxy ends with this process: a resume starts both again
        self._container = None
        self._unlock()

    def is_alive(self) -> bool:
        """Whether the container runs and the toolbox answers."""
        if self._container is None or self._toolbox is None:
            return False
        try:
            with docker_errors("inspecting the sandbox"):
                self._container.reload()
            return bool(self._container.status == "running" and self._toolbox.is_running())
        except SandboxError:
            return False

    @property
    def info(self) -> SandboxInfo:
        """Identity of the running sandbox."""
        if self._info is None:
            raise SandboxError("the sandbox is not started")
        return self._info

    # -- the work ----------------------------------------------------------------------------

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None, remounted: bool = False) -> ToolResult:
        """Run `tool` in the toolbox; a dead or stuck toolbox is restarted and reported.

        `on_output(stream, text)` gets a running command's output while it runs. Ctrl-C
        (KeyboardInterrupt) during a call kills what it started and restarts the toolbox
        before it goes on up, so the session stays usable.
        """
        if self._toolbox is None and self._container is not None:
            self._start_toolbox()  # an interrupted call left none
        if self._toolbox is None:
            raise SandboxError("the sandbox is not started")
        self.wait_copied()
        deadline = timeout or self._deadline_for(args)
        try:
            reply = self._toolbox.call(tool, args, deadline, _progress_to(on_output))
        except ToolboxTimeoutError:
            return self._recover(f"{tool} did not answer within {deadline:.0f}s")
        except ToolboxError as exc:
            return self._recover(f"the toolbox died during {tool} ({exc})")
        except KeyboardInterrupt:
            self._kill_toolbox()  # it is still running the call: its next line is not ours
            raise
        result = ToolResult(
            ok=bool(reply.get("ok")), output=str(reply.get("output", "")),
            meta=dict(reply.get("meta") or {}),
        )
        self._git.note(result.meta)  # what the toolbox guard did (may end the session)
        found = result.meta.get("remount_needed")
        if found and not remounted:
            self._remount([str(path) for path in found])
            return self.call(tool, args, timeout=timeout, on_output=on_output, remounted=True)
        if result.meta.get("processes_unstopped"):
            self._unstoppable()
        return result

    def _unstoppable(self) -> None:
        """A command left a process the toolbox could not stop (under gVisor, one that clones
        and exits faster than kill(-1) reaches it): only a new container ends it for sure."""
        if self.copying:  # a new container would lose the copy: what it holds shows in its diff
            self._warn("a process the command started could not be stopped; it may still change "
                       "the copy workspace: review its diff before applying it")
            return
        self._recreate("a process the command started could not be stopped; restarting the "
                       "sandbox (files in /tmp are lost)")

    def _remount(self, found: list[str]) -> None:
        """Recreate the container so repositories made on the host meanwhile are read-only.

        Mounts are fixed when a container is created, so a `.git` the person made during the
        session (found by the toolbox's guard, which then refused the command) needs a new one.
        """
        self._recreate(f"a git repository appeared in the project during the session "
                       f"({', '.join(found[:3])}); restarting the sandbox with it read-only "
                       "(files in /tmp are lost); it is renamed when the session ends")

    def _recreate(self, why: str) -> None:
        """A new container for the session (same mounts, decided afresh); the old one goes."""
        self._warn(why)
        self._copy_abort.abort()  # a copy still arriving ends now, not when the engine says so
        if self._copying is not None:
            self._stop_prefetch()
        if self._toolbox is not None:
            self._toolbox.stop()
            self._toolbox = None
        if self._egress is not None:
            self._egress.detach()
        if self._container is not None:
            with docker_errors("removing the sandbox container"):
                self._container.remove(force=True, v=True)
            self._container = None
        self._drop_life()
        try:  # a tree the session left can make this fail (a hard-linked hook, a broken config)
            moved = self._git.moved()
            if moved:  # a new container would protect them where they are, not the originals
                raise SandboxError(f"protected paths are not where they were at the start "
                                   f"({', '.join(sorted(moved)[:3])}); the session ends")
            self._protect()
            self._record_start()
            self._channel = False  # a new container has nothing left in it: decided afresh
            self._container = self._create()
            self._start_egress()
        except BaseException:
            self._after_session()  # then stop() finds no container: the checks happen here
            raise
        self._start_toolbox()
        assert self._info is not None
        self._info = self._info.model_copy(update={"container_id": self._container.id})

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The toolbox's preview of a write: the diff against the file as the container sees it.

        The host never opens project files itself: a symlink there may point into the host.
        """
        return self.call("preview", {"tool": tool, "args": args})

    def _deadline_for(self, args: dict[str, Any]) -> float:
        requested = args.get("timeout_seconds")
        base = requested if isinstance(requested, int | float) else self.config.tool_timeout
        return float(max(base, self.config.tool_timeout)) + _CALL_MARGIN

    def _recover(self, what: str) -> ToolResult:
        self._warn(f"{what}; restarting the toolbox")
        settled = self._kill_toolbox()
        try:
            if settled or self.copying:  # a new container would lose the copy
                self._start_toolbox()
            else:
                self._recreate("processes the command started could not be stopped; "
                               "restarting the sandbox (files in /tmp are lost)")
        except SandboxError as exc:
            raise ToolboxError(f"{what}, and it could not be restarted: {exc}") from exc
        return ToolResult.error(f"{what}. The toolbox was restarted; the call had no result.",
                                toolbox_restarted=True)

    def _kill_toolbox(self) -> bool:
        """Kill the toolbox and what it left; False when some of it may still run (then no
        later toolbox of this container uses the FIFOs: a survivor could open them)."""
        old = self._toolbox
        self._toolbox = None
        if old is None:
            return True
        try:  # killed before its channel closes: a toolbox that sees its host's end go
            # stops its command and ends the container (`EXIT_ORPHANED`)
            if self._ensure_running() and old.pid and not self._kill_in_container(old.pid):
                self._channel = None
                return False
            return True  # a container that had stopped has nothing left
        finally:
            old.stop()

    def _clear_left(self) -> None:
        """Kill what a run that died mid-command left in the container it re-attaches to,
        before a toolbox starts there: a process of the tools' uid could otherwise read the
        new toolbox's key from its stdin before it makes itself non-dumpable, and answer in
        its place (red-team round 13). What cannot be stopped costs a bind session its
        container; a copy session cannot go on without its container, so it ends."""
        if self._kill_in_container(0):
            return
        if self.copying:
            raise SandboxError(
                f"processes the last run left in container {self.name} could not be stopped; "
                "the session cannot be resumed safely",
                fix=f"remove the container (`docker rm -f {self.name}`; its pending copy is "
                    "lost) and start a new session")
        self._warn("processes the last run left in the container could not be stopped; "
                   "starting a new container (files in /tmp are lost)")
        with docker_errors("removing the sandbox container"):
            self._container.remove(force=True, v=True)
        self._container = None
        self._drop_life()
        self._channel = False
        self._container = self._create()

    def _kill_in_container(self, pid: int) -> bool:
        """SIGKILL the old toolbox (`pid`; 0: none) and every process it left; warn (and
        False) when that fails."""
        api = self._client.api
        try:
            with docker_errors("killing the stuck toolbox"):
                created = api.exec_create(
                    self._container.id, ["python3", "-I", "-c", boot.source("kill"), str(pid)],
                    user=self._tool_user(), workdir="/", stdout=True, stderr=True)
                sock = api.exec_start(created["Id"], socket=True)
                stream = Channel(getattr(sock, "_sock", sock))
                try:  # bounded: a command of the same uid can SIGSTOP the script (round 13)
                    ended = stream.until_end(time.monotonic() + _KILL_TIMEOUT)
                finally:
                    stream.close()
                code = api.exec_inspect(created["Id"]).get("ExitCode") if ended else None
        except SandboxError as exc:
            what = f"the stuck toolbox (pid {pid})" if pid else "what the last run left"
            self._warn(f"could not kill {what}: {exc}")
            return False
        if code != 0:
            said = stream.said()[-300:]
            how = f"exit {code}" if ended else f"it did not finish in {_KILL_TIMEOUT:.0f} s"
            what = f"the stuck toolbox (pid {pid})" if pid else "what the last run left"
            self._warn(f"could not kill {what}: {how}: {said}")
        return bool(code == 0)

    def _ensure_running(self) -> bool:
        """Start the container if it stopped; whether it was running."""
        with docker_errors("checking the sandbox container"):
            self._container.reload()
            if self._container.status == "running":
                return True
            self._warn(f"container {self.name} was {self._container.status}; starting it")
            self._container.start()
        return False

    # -- helpers -----------------------------------------------------------------------------

    def _image(self) -> Any:
        """The configured image, else (with a warning) the fallback when one is given."""
        import docker.errors

        with docker_errors(f"looking up image {self.config.image}"):
            try:
                return self._client.images.get(self.config.image)
            except docker.errors.ImageNotFound:
                if not self.config.fallback_image:
                    raise ImageNotFoundError(
                        f"sandbox image {self.config.image!r} not found", fix=IMAGE_FIX
                    ) from None
        self._warn(f"image {self.config.image[:19]} is gone; using {self.config.fallback_image}")
        self.config = self.config.model_copy(
            update={"image": self.config.fallback_image, "fallback_image": None})
        return self._image()

    def spec(self) -> SandboxSpec:
        """This run's sandbox as one value: what `_create` would make now (the copy's size
        left out: it is the data's, not a decision)."""
        decided = self.create_options(self.config.model_copy(update={"copy_bytes": 0}))
        egress = self.config.egress.spec() if self.config.egress else None
        return SandboxSpec.of(decided, self.toolbox_argv(), self._image_id, network=egress,
                              git=self._git.surface.spec())

    def _existing(self) -> Any:
        """A copy session's container when it is exactly what this run would create (else the
        run stops: the session's changes are in it). A bind session never re-uses one: its
        mounts hold the tree as it was when it was made, and a protected directory the person
        replaced since (`rm -rf .git && git init`) is silently no longer mounted in it."""
        import docker.errors

        with docker_errors("looking for the session's container"):
            try:
                container = self._client.containers.get(self.name)
            except docker.errors.NotFound:
                return None
            if container.labels.get(LABEL_ROOT) != str(self.config.root):
                raise SandboxError(f"container {self.name} belongs to another project root")
            if not self.copying:  # its mounts are the tree as it was: see the docstring
                self._warn(f"container {self.name} of an earlier run is not re-used: a bind "
                           "session always starts a new one (files in /tmp are lost)")
                container.remove(force=True, v=True)
                return None
            changed = ", ".join(self.spec().differences(container.labels))
            if changed:
                raise SandboxError(
                    f"container {self.name} holds this session's copy, but it was made with "
                    f"other {changed} than this run asks for, so it is not re-used",
                    fix="resume with the options of the run that made it, or discard it "
                        f"(`docker rm -f {self.name}`: its uncollected changes are lost)")
            if container.status != "running":
                container.start()
        self.reattached = True
        return container

    def _create(self) -> Any:
        options = self.create_options()
        options["labels"].update(self.spec().labels())
        channel = self._channel_dir()
        if channel is not None:  # its PID 1 opens it first thing
            make_life(channel)
        with _unreachable_root(self.config.root), docker_errors("creating the sandbox container"):
            container = self._client.containers.create(**options)
            try:
                self._check_runtime(container)
                if options.get("stdin_open"):  # the toolbox is its first process: attach first
                    self._attached = self._client.api.attach_socket(
                        container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                container.start()
            except BaseException:
                if self._attached is not None:
                    self._attached.close()
                    self._attached = None
                container.remove(force=True)
                raise
        return container

    def _runtime_is_gvisor(self) -> bool:
        """Whether the runtime asked for is gVisor's runsc; an error when the engine lacks it."""
        name = self.config.runtime
        if not name:
            return False
        if self._podman:
            raise RuntimeNotFoundError(
                f"Podman's Docker-compatible API ignores the runtime a container asks for: the "
                f"sandbox would run under Podman's default runtime, not {name!r}",
                fix=f'set runtime = "{name}" under [engine] in Podman\'s containers.conf and '
                "drop --runtime / SANDBOX_AGENT_RUNTIME")
        offered, _ = runtimes(self._client)
        if name not in offered:
            raise RuntimeNotFoundError(
                f"the engine has no OCI runtime {name!r} (it offers: {', '.join(offered)})",
                fix=RUNTIME_FIX)
        return Path(offered[name]).name.startswith("runsc")

    def create_options(self, config: SandboxConfig | None = None) -> dict[str, Any]:
        """What the container is created with (`container_options` for this engine)."""
        config = config or self.config
        quick = (config.workspace == "bind" and not self._podman and not config.network
                 and config.egress is None)  # a forwarder joins a namespace the engine made
        first = config.workspace == "bind" and not self._podman and not self._gvisor
        return container_options(config, self._lock_path(), self._mount_user(),
                                 self._git.protected, podman_profile=self._seccomp_file,
                                 gvisor=self._gvisor,
                                 hosts=hosts_file(self._lock_path().parent) if quick else None,
                                 toolbox=self.toolbox_argv() if first else None,
                                 channel=self._channel_dir())

    def _start_egress(self) -> None:
        """The forwarder of this container, before any command runs (none without egress)."""
        if self.config.egress is None:
            return
        if self._egress is None:
            self._egress = network.Egress(self.config.egress, self._lock_path().parent,
                                          self.name, self._egress_hooks)
        kept = (LABEL_SESSION, LABEL_ROOT, LABEL_LOCK, LABEL_HOST)  # so `gc` knows it too
        labels = {k: v for k, v in self._container.labels.items() if k in kept}
        profile = (f"seccomp={seccomp.profile_file(self._lock_path().parent, unix=True)}"
                   if self._podman else seccomp.forwarder_security_opt())  # Podman: a path
        self._egress.attach(self._client, self._container, self._image_id, labels,
                            ["no-new-privileges", profile],
                            _ulimits(self.config.model_copy(update={"disk_budget": 0}),
                                     gvisor=False))

    def _stop_egress(self) -> None:
        if self._egress is not None:
            self._egress.stop()
            self._egress = None

    def _check_runtime(self, container: Any) -> None:
        """The runtime asked for is the one the engine used (Podman's API ignores it)."""
        used = _runtime_of(container)
        if self.config.runtime and used != self.config.runtime:
            raise RuntimeNotFoundError(f"the engine would run the sandbox under {used!r}, not "
                                       f"{self.config.runtime!r}", fix=RUNTIME_FIX)

    def _start_toolbox(self, *, running: bool = False) -> None:
        """Start the toolbox; `running`: the container was just started (no need to ask)."""
        if not running:
            self._ensure_running()
        attached, self._attached = self._attached, None
        toolbox = Toolbox(self._client.api, self._container.id, self._tool_user(),
                          self.toolbox_argv(), attached, self._channel_dir())
        ready = toolbox.start()
        self._toolbox = toolbox
        channel = self._channel_dir()
        if self._life is None and channel is not None:
            self._life = hold_life(channel)
        if not self.copying and not self._root_checked:
            self._check_root(ready.get("root"))
        filtered = str(ready.get("filter", "not reported"))
        if _filter_argv() and not filtered.startswith("installed"):
            self._warn(f"the toolbox's own seccomp filter is {filtered}: under runsc, set-id "
                       "modes, unix sockets and new namespaces are then not refused")

    def toolbox_argv(self) -> list[str]:
        """The toolbox's command line (see its docstring)."""
        # --kill-strays: the container is ours alone, whether the toolbox was exec'd (ppid 0)
        # or forked by PID 1 (boot/init.py; ppid 1), so every process a command leaves can go
        argv = ["--kill-strays", "--root", WORKSPACE,
                "--default-timeout", str(self.config.tool_timeout),
                "--max-output", str(self.config.max_output), "--hidden", LEGACY_DIR,
                "--disk-budget", str(self.config.disk_budget)]
        argv += self._git.surface.toolbox_argv()
        if self._channel_dir() is not None:
            argv += ["--channel", CHANNEL]
        return [*argv, "--sign", *_filter_argv()]

    def _channel_dir(self) -> Path | None:
        """The host side of `CHANNEL` (made when missing), or None: the engine runs elsewhere
        (it would not see our FIFOs), gVisor (its gofer opens no host FIFO), or not wanted."""
        if self._channel is not False:
            return self._channel if isinstance(self._channel, Path) else None
        self._channel = None
        if not self.config.fifo_channel or self._gvisor or not endpoint().startswith("unix://"):
            return None
        path = channel_dir(self._lock_path().parent, self.name)
        try:
            path.mkdir(mode=0o755, exist_ok=True)
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                return None
            os.chmod(path, 0o755)  # the tools' uid passes through it in the container
        except OSError:
            return None
        self._channel = path
        return path

    def _drop_channel_dir(self) -> None:
        """Remove the channel directory once the container is gone."""
        drop_channel(self._lock_path().parent, self.name)

    def _drop_life(self) -> None:
        """Let go of PID 1's lifeline: it ends (bind) or clears (copy) what the container runs."""
        if self._life is not None:
            os.close(self._life)
            self._life = None

    def _tool_user(self) -> str:
        """Who the tools run as: a read-only copy's tools own nothing in it."""
        if self.copying and self.config.read_only:
            return f"{NOBODY}:{NOBODY}"
        return self._mount_user()

    def _mount_user(self) -> str:
        info = self.config.root.stat()
        return f"{info.st_uid}:{info.st_gid}"

    def _describe(self, image: Any) -> SandboxInfo:
        return SandboxInfo(
            container_id=self._container.id, container_name=self.name, image=self.config.image,
            image_digest=str(image.id), mount_mode="ro" if self.config.read_only else "rw",
            network="bridge" if self.config.network else "egress" if self.config.egress
            else "none", user=self._tool_user(),
            workspace=self.config.workspace, runtime=_runtime_of(self._container),
            engine="Podman" if self._podman else "Docker",
        )

    def _lock_path(self) -> Path:
        lock_dir = self.config.lock_dir or default_lock_dir()
        return lock_dir / f"{self.name}.lock"

    def _lock(self) -> None:
        # A held flock marks the container as in use; `gc` removes those whose lock is free,
        # which also covers a controller killed with SIGKILL.
        path = self._lock_path()
        # what is there is mounted into the container (hosts file, channel): never the sandbox's
        check_outside(real_root(self.config.root), path.parent,
                      "the lock dir (XDG_RUNTIME_DIR or XDG_CACHE_HOME)")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        for _ in range(20):  # `gc` holds a free lock for a moment while it checks it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.1)
                continue
            self._lock_fd = fd
            return
        os.close(fd)
        raise SandboxError(f"session {self.config.session_id} is in use by another process")

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def settle(client: Any, record: runrecord.RunRecord, lock_dir: Path, warn: Warn) -> None:
    """A dead bind session's container removed and its end-of-session checks run."""
    import docker.errors

    root = Path(record.root)
    with docker_errors(f"removing {record.name}"):
        try:
            container = client.containers.get(record.name)
            if container.labels.get(LABEL_ROOT) == record.root:
                container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    drop_channel(lock_dir, record.name)
    after_session(root, record.tree, record.started_ns, record.identities,
                  [root / rel for rel in record.made_dirs], set(), warn)
    runrecord.forget(lock_dir, record.name)


def _runtime_of(container: Any) -> str:
    """The OCI runtime the engine says a container runs under (Podman always says 'oci')."""
    return str((container.attrs.get("HostConfig") or {}).get("Runtime") or "")


def _progress_to(on_output: OutputCallback | None) -> OnProgress | None:
    """The toolbox's progress lines as (stream, text) calls; a line of another shape is dropped."""
    if on_output is None:
        return None

    def relay(progress: dict[str, Any]) -> None:
        stream, text = progress.get("stream"), progress.get("text")
        if stream in ("stdout", "stderr") and isinstance(text, str) and text:
            on_output(stream, text)

    return relay


HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"
"""/etc/hosts of a container without a network (its hostname is `sandbox`)."""


def fifo_pair(directory: Path) -> tuple[int, int] | None:
    """Fresh FIFOs `in` and `out` in `directory` (ours, mounted read-only at `CHANNEL`): our
    (read end of `out`, write end of `in`), held open so that the toolbox's non-blocking opens
    succeed; None when they cannot be made (the toolbox then stays on stdio)."""
    fds: list[int] = []
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for name in _FIFOS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
            os.mkfifo(name, 0o600, dir_fd=folder)
            os.chmod(name, 0o666, dir_fd=folder)  # for the tools' uid, whichever it is
        for name, mode in (("out", os.O_RDONLY | os.O_NONBLOCK), ("in", os.O_RDWR)):
            fds.append(os.open(name, mode | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder))
        return fds[0], fds[1]
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    finally:
        os.close(folder)


_FIFOS = ("in", "out")


_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*")


def channel_dir(lock_dir: Path, name: str) -> Path:
    """The host side of container `name`'s `CHANNEL`: beside its lock file."""
    return lock_dir / f"{name}.channel"


def drop_channel(lock_dir: Path, name: str) -> None:
    """Remove container `name`'s channel directory and what is left in it (`gc` passes the
    engine's name for a container: checked, never a path)."""
    if _NAME.fullmatch(name):
        path = channel_dir(lock_dir, name)
        unlink_fifos(path)
        with contextlib.suppress(OSError):
            path.rmdir()


def unlink_fifos(directory: Path) -> None:
    """Remove the FIFOs' names: once both ends are open, nothing else may open them. Never
    through a link: `directory` is reached without following one."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in _FIFOS:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
    finally:
        os.close(folder)


def make_life(directory: Path) -> None:
    """A fresh FIFO `life` in our channel `directory`, for the container's PID 1 to open
    (boot/init.py: it watches the host through it)."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink("life", dir_fd=folder)
        os.mkfifo("life", 0o600, dir_fd=folder)
        os.chmod("life", 0o666, dir_fd=folder)  # PID 1 runs as the root's owner
    except OSError:
        pass
    finally:
        os.close(folder)


def hold_life(directory: Path, timeout: float = 2.0) -> int | None:
    """Our write end of `life`, once PID 1 holds the other (a non-blocking open for writing
    fails until a reader exists); the name is unlinked either way. None: no PID 1 took it."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    deadline, fd = time.monotonic() + timeout, None
    try:
        while fd is None and time.monotonic() < deadline:
            try:
                fd = os.open("life", os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=folder)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    break
                time.sleep(0.005)
        with contextlib.suppress(OSError):
            os.unlink("life", dir_fd=folder)
    finally:
        os.close(folder)
    return fd


def hosts_file(directory: Path) -> Path:
    """`HOSTS` as a file in `directory` (a private dir of ours), rewritten when it differs."""
    return seccomp.publish(directory / "hosts", HOSTS, "the hosts file")


def toolbox_command(argv: list[str], *, first: bool = False) -> list[str]:
    """The toolbox's command line in the container; `first`: as the container's own command,
    under PID 1 (boot/init.py, which stays and reaps)."""
    program = boot.first_toolbox() if first else boot.source("bootstrap")
    return ["python3", "-I", "-S", "-u", "-c", program, *argv]


def toolbox_payload(magic: bytes) -> bytes:
    """What boot/bootstrap.py reads once it said its bytecode `magic` (a hex line): the toolbox
    compiled by this interpreter when the formats agree, else its source; zlib-compressed."""
    try:
        same = bytes.fromhex(magic.decode("ascii").strip()) == MAGIC_NUMBER
    except ValueError:
        same = False
    kind, blob = ("code", compiled_toolbox()) if same else ("source", _toolbox_source())
    return f"{kind} {len(blob)}\n".encode() + blob


@functools.cache
def compiled_toolbox() -> bytes:
    """The toolbox package compiled here, as the bundle boot/bootstrap.py imports from (module
    name -> (is a package, code), marshalled, compressed); made once a process."""
    bundle = {name: (package, compile(text, filename, "exec", dont_inherit=True))
              for name, (package, filename, text) in _toolbox_modules().items()}
    return zlib.compress(marshal.dumps(bundle), 6)


@functools.cache
def _toolbox_source() -> bytes:
    """The same bundle with each module's source, for a Python of another bytecode format."""
    bundle = {name: (package, text) for name, (package, _, text) in _toolbox_modules().items()}
    return zlib.compress(marshal.dumps(bundle), 6)


def _toolbox_modules() -> dict[str, tuple[bool, str, bytes]]:
    """Every module of executor/sandbox/toolbox as it is named in the container (`toolbox`,
    `toolbox.tools.shell`, ...): (is a package, its file name there, its source)."""
    found: dict[str, tuple[bool, str, bytes]] = {}

    def walk(folder: Any, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and entry.joinpath("__init__.py").is_file():
                walk(entry, f"{prefix}.{entry.name}")
            elif entry.name.endswith(".py"):
                package = entry.name == "__init__.py"
                name = prefix if package else f"{prefix}.{entry.name[:-3]}"
                filename = name.replace(".", "/") + ("/__init__.py" if package else ".py")
                found[name] = (package, filename, entry.read_bytes())

    walk(resources.files("executor.sandbox.toolbox"), "toolbox")
    return found


def container_name(session_id: str) -> str:
    """Docker name of a session's container."""
    return f"sandbox-agent-{session_id}"


def default_lock_dir() -> Path:
    """Per-user directory of session liveness locks."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sandbox-agent"
    )
    return Path(base) / "sandbox-agent-locks"


def container_options(config: SandboxConfig, lock_path: Path, user: str,
                      protected: Protected | None = None, *,
                      podman_profile: Path | None = None, gvisor: bool = False,
                      hosts: Path | None = None,
                      toolbox: list[str] | None = None,
                      channel: Path | None = None) -> dict[str, Any]:
    """Keyword arguments for `containers.create`: every hardening switch in one place.

    `podman_profile`: for Podman, the seccomp profile as a file on its host (it reads a path
    where Docker takes the JSON); the writable /run and /var/tmp it adds to a read-only
    container are then capped and made read-only like the rest.
    `gvisor`: the runtime is runsc. Its ptrace platform costs about five host pids per process
    and the whole sandbox dies when the host's pids limit is hit, so the process limit moves
    inside, where gVisor enforces RLIMIT_NPROC per uid (root included): nproc = pids_limit,
    and the host's limit becomes GVISOR_PIDS_FACTOR times that.
    `hosts`: an /etc/hosts file on the engine's host (`hosts_file`) for a container without a
    network. The container is then created with networking disabled as well: the OCI runtime
    gives it a new network namespace with only `lo`, as `none` does, but the engine sets up no
    network sandbox for it, which took 150 of the 250 ms a start took here (measured with
    Docker 20.10: its libnetwork re-executes dockerd as a prestart hook). That sandbox also
    wrote /etc/hosts, hence the file.
    `toolbox`: the toolbox's argv, to make it the container's first process
    (`boot.first_toolbox`) on a
    stdin the host attaches to before the start, instead of `sleep` and an exec. The engine
    logs nothing of its stdout (all tool results would otherwise land in its log files).
    `channel`: a directory of ours mounted read-only at `CHANNEL`, for the toolbox's FIFOs.
    """
    from docker.types import LogConfig, Mount

    root = str(config.root)
    protected = protected or Protected((), ())
    tmpfs = {"/tmp": f"rw,nosuid,nodev,noexec,size={config.tmp_size},mode=1777"}
    memory = parse_size(config.memory)
    if config.workspace == "copy" and config.copy_storage == "disk":
        mounts = [Mount(WORKSPACE, None, type="volume")]  # anonymous: gone with the container
    elif config.workspace == "copy":  # the copy is charged to the container's memory
        mounts, memory = [], memory + config.copy_bytes
        tmpfs[WORKSPACE] = _copy_tmpfs(config)
    else:
        mounts = [Mount(WORKSPACE, root, type="bind", read_only=config.read_only)]
        mounts += [Mount(_inside(rel), str(config.root / rel), type="bind", read_only=True)
                   for rel in protected.existing]
        empty = "ro,nosuid,nodev,noexec,size=4k,mode=0555"
        tmpfs.update({_inside(rel): empty for rel in protected.missing})
    if config.workspace == "bind" and legacy_state(config.root) is not None:
        # an old in-tree state dir may hold transcripts (a copy never takes it)
        tmpfs[f"{WORKSPACE}/{LEGACY_DIR}"] = "ro,nosuid,nodev,noexec,size=4k,mode=0500"
    tmpfs = _podman_tmpfs(tmpfs) if podman_profile is not None else tmpfs
    ulimits = _ulimits(config, gvisor=gvisor)
    runtime: dict[str, Any] = {"runtime": config.runtime} if config.runtime else {}
    if hosts is not None and not config.network:
        mounts.append(Mount("/etc/hosts", str(hosts), type="bind", read_only=True))
        runtime["network_disabled"] = True
    if channel is not None:
        mounts.append(Mount(CHANNEL, str(channel), type="bind", read_only=True))
    mounts += network.mounts(config.egress)
    if toolbox is not None:
        first: dict[str, Any] = {"command": toolbox_command(toolbox, first=True), "init": False,
                                 "stdin_open": True, "log_config": LogConfig(type="none")}
    else:
        first = {"command": ["python3", "-I", "-S", "-c",
                             boot.reaper(end=config.workspace == "bind")], "init": False}
    return {**runtime, **first,
        "image": config.image, "name": container_name(config.session_id), "user": user,
        "working_dir": WORKSPACE, "hostname": "sandbox", "mounts": mounts, "tmpfs": tmpfs,
        "network_mode": "bridge" if config.network else "none",
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges", _seccomp_opt(podman_profile)],
        "read_only": True,
        "pids_limit": config.pids_limit * (GVISOR_PIDS_FACTOR if gvisor else 1),
        "mem_limit": memory, "memswap_limit": memory, "nano_cpus": int(config.cpus * 1e9),
        "environment": {**_BASE_ENV, **network.environment(config.egress), **config.env},
        "ipc_mode": "private", "ulimits": ulimits,
        "labels": {
            LABEL_SESSION: config.session_id, LABEL_ROOT: root,
            LABEL_LOCK: str(lock_path), LABEL_HOST: socket.gethostname(),
            LABEL_WORKSPACE: config.workspace,
        },
    }


@functools.cache
def _filter_argv() -> list[str]:
    """The toolbox's own seccomp programs, built for this host's machine (none elsewhere)."""
    program = seccomp.toolbox_filter(platform.machine())
    return ["--seccomp-filter", base64.b64encode(program).decode()] if program else []


def _podman_tmpfs(tmpfs: dict[str, str]) -> dict[str, str]:
    """Podman mounts /run and /var/tmp writable and uncapped (its init is in /run): capped and
    read-only here. It also copies what a tmpfs covers into it unless told not to: the hidden
    state would be readable again (Docker knows no such option, nor does it copy)."""
    tmpfs = {**tmpfs, "/run": "rw,nosuid,nodev,noexec,size=1m,mode=0755",
             "/var/tmp": "ro,nosuid,nodev,noexec,size=4k,mode=0755"}
    return {path: f"{options},notmpcopyup" for path, options in tmpfs.items()}


def _ulimits(config: SandboxConfig, *, gvisor: bool) -> list[Any]:
    """fsize (the disk budget's, between two polls of the toolbox), nofile and nproc."""
    from docker.types import Ulimit

    budget = config.disk_budget if not config.read_only else 0
    ulimits = [Ulimit(name="fsize", soft=budget, hard=budget)] if budget else []
    rlimits = _rlimits() | ({"nproc": config.pids_limit} if gvisor else {})
    return ulimits + [Ulimit(name=name, soft=limit, hard=limit) for name, limit in rlimits.items()]


def _seccomp_opt(path: Path | None) -> str:
    return f"seccomp={path}" if path else seccomp.security_opt()


def _rlimits() -> dict[str, int]:
    """nofile and nproc, set explicitly: Podman's defaults exceed common hard limits (it then
    fails with "error setting rlimit"). Never above our own hard limit, which a local rootless
    engine inherits."""
    import resource

    wanted = {"nofile": (resource.RLIMIT_NOFILE, DEFAULT_NOFILE),
              "nproc": (resource.RLIMIT_NPROC, DEFAULT_NPROC)}
    return {name: _capped(limit, resource.getrlimit(which)[1]) for name, (which, limit)
            in wanted.items()}


def _capped(limit: int, hard: int) -> int:
    import resource

    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)


MIN_FREE = 256 * 1024 * 1024
"""Room the toolbox keeps free on the project's file system (its --min-free)."""


def _copy_tmpfs(config: SandboxConfig) -> str:
    """A tmpfs for the copy: room for it, its growth budget and the toolbox's free margin.
    Its top is root's: 0755 for a read-only copy (whose tools own nothing), else 1777, so the
    sandbox's user makes what it likes there but cannot move the copy's `.git` (copy.py)."""
    growth = config.disk_budget or DEFAULT_DISK_BUDGET
    size = config.copy_bytes + growth + MIN_FREE
    mode = "0755" if config.read_only else "1777"
    return f"rw,exec,nosuid,nodev,size={size},uid=0,gid=0,mode={mode}"


@contextlib.contextmanager
def _unreachable_root(root: Path) -> Any:
    """An engine that refuses to bind a path it does not have cannot see this disk."""
    try:
        yield
    except SandboxError as exc:
        if "bind source path does not exist" not in str(exc):
            raise
        raise WorkspaceUnreachableError(
            f"the Docker engine at {endpoint()} has no {root}: it cannot see this machine's "
            "disk", fix="use --workspace copy (or an engine on this machine)") from exc


def _inside(rel: str) -> str:
    return WORKSPACE if rel == "." else f"{WORKSPACE}/{rel}"


_BASE_ENV = {
    "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE": "1", "GIT_CONFIG_NOSYSTEM": "1",
}
