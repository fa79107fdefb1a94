"""The Runtime: the toolbox client of one container (SWE-ReX's Runtime beside its Deployment).

`Toolbox` is the process inside, reached over an exec's attached stream, the container's own,
or the FIFOs of the channel directory (fifos.py); `Runtime` starts it, calls it (each reply's
`signals` parsed once, signals.py), kills it and what it left, and holds PID 1's lifeline.
What a container is and how it is made is the Deployment's (deployment.py).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from executor.errors import (
    SandboxAgentError,
    SandboxError,
    ToolboxError,
    WorkspaceUnreachableError,
)
from executor.messages import ToolResult
from executor.protocols import OutputCallback
from executor.sandbox import boot, signals
from executor.sandbox.bundle import INIT_MARK, filter_argv, toolbox_command, toolbox_payload
from executor.sandbox.channel import Channel, FifoChannel, OnProgress
from executor.sandbox.engine import docker_errors, endpoint
from executor.sandbox.fifos import (
    drop_channel,
    fifo_pair,
    hold_life,
    make_life,
    open_channel_dir,
    unlink_fifos,
)
from executor.sandbox.signals import Signals

_START_TIMEOUT = 30.0
_KILL_TIMEOUT = 15.0  # seconds the kill script may take (it waits 5 s, then settles for 2 s)
Warn = Callable[[str], None]
T = TypeVar("T")


class Toolbox:
    """The toolbox process inside the container, reached over an exec's attached stream, or
    over the container's own (`attached`: the socket `Deployment.create` attached before
    the start, the container's first process being `boot.first_toolbox()`)."""

    def __init__(self, api: Any, container_id: str, user: str, argv: list[str],
                 attached: Any = None, channel: Path | None = None,
                 cache: Path | None = None) -> None:
        self._api, self._cid, self._user, self._argv = api, container_id, user, argv
        self._attached = attached
        self._cache = cache
        """The lock dir, where the compiled toolbox is kept between processes (bundle.py)."""
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
        channel.send(b"\n")  # the bootstrap speaks only once we are attached (bootstrap.py)
        magic = self._started(channel.read_line)
        pipes = fifo_pair(self._fifos) if self._fifos and key else None
        try:
            channel.send(toolbox_payload(magic, self._cache) + signing)
            ready = self._started(channel.read_json)
            if pipes and key:  # the rest comes that way; our toolbox opens them or says why not
                if ready != {"channel": "fifo"}:
                    raise ToolboxError(f"the toolbox did not take the FIFO channel it was given "
                                       f"({str(ready.get('channel'))[:200]!r})")
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


class Runtime:
    """The toolbox client of one session's container: start, call, kill; the channel directory
    and PID 1's lifeline."""

    def __init__(self, lock_dir: Path, name: str, warn: Warn, *, fifo: bool = True) -> None:
        self._lock_dir, self._name, self._warn, self._fifo = lock_dir, name, warn, fifo
        self.toolbox: Toolbox | None = None
        self._channel: Path | bool | None = False
        """The channel directory once decided (`channel_dir`); False: not yet."""
        self._life: int | None = None
        """Our end of PID 1's lifeline (`hold_life`): closed, by us or by our death, it ends
        what the container runs."""

    # -- the channel directory and the lifeline ----------------------------------------------

    def channel_dir(self, *, gvisor: bool) -> Path | None:
        """The host side of `CHANNEL` (made when missing), or None: the engine runs elsewhere
        (it would not see our FIFOs), gVisor (its gofer opens no host FIFO), or not wanted."""
        if self._channel is not False:
            return self._channel if isinstance(self._channel, Path) else None
        self._channel = None
        if self._fifo and not gvisor:
            self._channel = open_channel_dir(self._lock_dir, self._name)
        return self._channel

    @property
    def has_channel(self) -> bool:
        """Whether a channel directory was decided on and made."""
        return isinstance(self._channel, Path)

    def new_container(self) -> None:
        """A new container has nothing left in it: the channel is decided afresh."""
        self._channel = False

    def before_create(self, *, gvisor: bool) -> None:
        """A fresh lifeline for the container's PID 1, which opens it first thing."""
        channel = self.channel_dir(gvisor=gvisor)
        if channel is not None:
            make_life(channel)

    def take_life(self, *, gvisor: bool, timeout: float = 2.0) -> None:
        """Hold our end of PID 1's lifeline, once it holds its own (none: nothing to hold)."""
        channel = self.channel_dir(gvisor=gvisor)
        if self._life is None and channel is not None:
            self._life = hold_life(channel, timeout=timeout)

    def reattach_life(self, *, gvisor: bool) -> None:
        """A re-attached container's PID 1 kills what is left when the last host went, then
        opens a new lifeline: nothing may start there before that (it would be killed)."""
        channel = self.channel_dir(gvisor=gvisor)
        if channel is not None and self._life is None:
            make_life(channel)
            self._life = hold_life(channel, timeout=10.0)

    def keep_life(self, fd: int | None) -> None:
        """Hold a lifeline taken before (a standby's, executor/sandbox/warm.py)."""
        if fd is not None:
            self.drop_life()
            self._life = fd

    def give_life(self) -> int | None:
        """Let go of our end of the lifeline without closing it (a standby keeps it)."""
        fd, self._life = self._life, None
        return fd

    def drop_life(self) -> None:
        """Let go of PID 1's lifeline: it ends (bind) or clears (copy) what the container runs."""
        if self._life is not None:
            os.close(self._life)
            self._life = None

    def drop_channel(self) -> None:
        """Remove the channel directory once the container is gone."""
        drop_channel(self._lock_dir, self._name)

    # -- the toolbox -------------------------------------------------------------------------

    def start(self, api: Any, container_id: str, user: str, argv: list[str],
              attached: Any = None, *, gvisor: bool) -> dict[str, Any]:
        """Start the toolbox (on `attached`: the container's own stream); its ready line."""
        toolbox = Toolbox(api, container_id, user, argv, attached,
                          self.channel_dir(gvisor=gvisor), self._lock_dir)
        ready = toolbox.start()
        self.toolbox = toolbox
        self.take_life(gvisor=gvisor)
        filtered = str(ready.get("filter", "not reported"))
        if filter_argv() and not filtered.startswith("installed"):
            self._warn(f"the toolbox's own seccomp filter is {filtered}: under runsc, set-id "
                       "modes, unix sockets and new namespaces are then not refused")
        return ready

    def is_alive(self, container_running: Callable[[], bool]) -> bool:
        """Whether a toolbox runs, in a container that runs (`container_running`, asked of
        the engine first)."""
        toolbox = self.toolbox
        if toolbox is None or not container_running():
            return False
        try:
            return toolbox.is_running()
        except SandboxError:
            return False

    def call(self, tool: str, args: dict[str, Any], timeout: float,
             on_output: OutputCallback | None) -> tuple[ToolResult, Signals]:
        """One call: its result and its signals; ToolboxError/ToolboxTimeoutError when the
        process fails."""
        if self.toolbox is None:
            raise SandboxError("the sandbox is not started")
        reply = self.toolbox.call(tool, args, timeout, _progress_to(on_output))
        result = ToolResult(ok=bool(reply.get("ok")), output=str(reply.get("output", "")),
                            meta=dict(reply.get("meta") or {}))
        return result, signals.parse(reply.get("signals"))

    def stop(self) -> None:
        """Close the toolbox's stdin (it exits on EOF)."""
        if self.toolbox is not None:
            self.toolbox.stop()
            self.toolbox = None

    def kill(self, api: Any, container_id: str, user: str,
             ensure_running: Callable[[], bool],
             alone: Callable[[], bool] = lambda: True) -> bool:
        """Kill the toolbox and what it left; False when some of it may still run (then no
        later toolbox of this container uses the FIFOs: a survivor could open them)."""
        old, self.toolbox = self.toolbox, None
        if old is None:
            return True
        killed = False
        try:  # killed before its channel closes: a toolbox that sees its host's end go
            # stops its command and ends the container (`EXIT_ORPHANED`)
            killed = not (ensure_running() and old.pid) or (self.kill_in_container(
                api, container_id, user, old.pid) and alone())
            return killed  # a container that had stopped has nothing left
        finally:
            if not killed:  # also when interrupted mid-wait: what it left may hold the FIFOs
                self._channel = None
            old.stop()

    def kill_in_container(self, api: Any, container_id: str, user: str, pid: int) -> bool:
        """SIGKILL the old toolbox (`pid`; 0: none) and every process it left; warn (and
        False) when that fails."""
        what = f"the stuck toolbox (pid {pid})" if pid else "what the last run left"
        try:
            with docker_errors("killing the stuck toolbox"):
                created = api.exec_create(
                    container_id, ["python3", "-I", "-c", boot.source("kill"), str(pid)],
                    user=user, workdir="/", stdout=True, stderr=True)
                sock = api.exec_start(created["Id"], socket=True)
                stream = Channel(getattr(sock, "_sock", sock))
                try:  # bounded: a command of the same uid can SIGSTOP the script (round 13)
                    ended = stream.until_end(time.monotonic() + _KILL_TIMEOUT)
                finally:
                    stream.close()
                code = api.exec_inspect(created["Id"]).get("ExitCode") if ended else None
        except SandboxError as exc:
            self._warn(f"could not kill {what}: {exc}")
            return False
        if code != 0:
            said = stream.said()[-300:]
            how = f"exit {code}" if ended else f"it did not finish in {_KILL_TIMEOUT:.0f} s"
            self._warn(f"could not kill {what}: {how}: {said}")
        return bool(code == 0)


def _progress_to(on_output: OutputCallback | None) -> OnProgress | None:
    """The toolbox's progress lines as (stream, text) calls; a line of another shape is dropped."""
    if on_output is None:
        return None

    def relay(progress: dict[str, Any]) -> None:
        stream, text = progress.get("stream"), progress.get("text")
        if stream in ("stdout", "stderr") and isinstance(text, str) and text:
            on_output(stream, text)

    return relay


def check_root(root: Path, seen: Any) -> None:
    """Bind mode: the engine must have mounted this very directory (not another disk's);
    `seen`: the root as the toolbox's ready line describes it."""
    if not isinstance(seen, dict):
        return  # an older toolbox does not say
    here = os.stat(root)
    if (seen.get("dev"), seen.get("ino")) == (here.st_dev, here.st_ino):
        return
    if seen.get("mtime_ns") == here.st_mtime_ns:  # gVisor shows its own device and inode
        return
    raise WorkspaceUnreachableError(
        f"the Docker engine at {endpoint()} mounted another directory at {root}: it cannot "
        "see this machine's disk", fix="use --workspace copy (or an engine on this machine)")
