"""The Docker sandbox: one hardened container per session, one long-lived toolbox inside it.

`DockerSandbox` composes three parts and reacts to what a call signals:

- the Deployment (deployment.py, hardening.py): the container made, re-attached or removed,
  its options, the session lock, the run record, the egress forwarder;
- the Runtime (runtime.py, bundle.py, fifos.py): the toolbox started, called, killed, its
  channel and PID 1's lifeline;
- a bind session's git guard (gitsafety/guard.py; its run record: bindguard.py), or a copy
  session's `CopyLoader` (copy.py's protocol; executor/workspace/copyload.py loads the copy),
  which whoever builds the sandbox passes in.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from executor.errors import SandboxError, ToolboxError, ToolboxTimeoutError
from executor.gitsafety.guard import GitGuard
from executor.messages import ToolResult
from executor.network.egress import EgressHooks
from executor.protocols import OutputCallback, SandboxInfo
from executor.sandbox import bundle
from executor.sandbox.bindguard import Warn, run_record, settle_abandoned
from executor.sandbox.config import SandboxConfig, container_name, mount_user, tool_user
from executor.sandbox.copy import CopyLoader
from executor.sandbox.deployment import Deployment
from executor.sandbox.hardening import copy_storage
from executor.sandbox.runtime import Runtime, Toolbox, check_root
from executor.sandbox.signals import Signals
from executor.sandbox.spec import SandboxSpec

__all__ = ["DockerSandbox", "SandboxConfig", "container_name"]

_CALL_MARGIN = 15.0  # seconds the host waits beyond a tool's own timeout


class DockerSandbox:
    """A hardened per-session container; satisfies the `Sandbox` protocol."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn | None = None,
                 egress_hooks: EgressHooks | None = None,
                 copy_loader: CopyLoader | None = None) -> None:
        self._warn = warn or (lambda message: None)
        say: Warn = lambda message: self._warn(message)  # noqa: E731 (`_warn` may be swapped)
        self._deployment = Deployment(config, client=client, warn=say, egress_hooks=egress_hooks)
        self._runtime = Runtime(self._deployment.lock_path.parent, self.name, say,
                                fifo=config.fifo_channel)
        self._git = GitGuard(config.root, workspace=config.workspace, read_only=config.read_only,
                             allow_git_writes=config.allow_git_writes)
        self._loader = copy_loader
        self._info: SandboxInfo | None = None
        self._root_checked = False
        self._survivors = False
        """A kill failed: what the command left may still run in the container."""

    @property
    def config(self) -> SandboxConfig:
        """The config as decided so far (an image fallback, the copy's storage)."""
        return self._deployment.config

    @property
    def name(self) -> str:
        """The container's name."""
        return container_name(self.config.session_id)

    @property
    def reattached(self) -> bool:
        """Whether this start found the session's container (a copy session's) again."""
        return self._deployment.reattached

    @property
    def copying(self) -> bool:
        """Whether the sandbox works on a copy of the root (not on the root itself)."""
        return self.config.workspace == "copy"

    @property
    def _toolbox(self) -> Toolbox | None:
        return self._runtime.toolbox

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------

    def preflight(self) -> None:
        """Fail now, not at the first tool call, when the engine or the image is missing."""
        self._deployment.preflight()

    def start(self) -> None:
        """Create (or re-attach to) the session's container and start the toolbox."""
        place = self._deployment
        try:
            image = place.connect()
            # compiled while the engine makes the container (GIL released on its socket)
            threading.Thread(target=bundle.compiled_toolbox, name="toolbox-compile",
                             daemon=True).start()
            if self.copying:
                self._plan_copy()
            else:
                self._settle_abandoned()
                self._protect()
            place.lock()
            place.save_record(run_record(self._git, self.name, self.config.root))
            if place.existing(self.spec) is None:
                self._create()
            else:
                self._runtime.reattach_life(gvisor=place.gvisor)
                self._clear_left()
            place.start_egress()
            self._start_copy()
            self._start_toolbox(running=True)
            self._info = place.describe(image, tool_user(self.config))
        except BaseException:
            never_made = place.container is None
            self.stop()
            if never_made and self._runtime.has_channel:  # no container: nothing mounts it
                self._runtime.drop_channel()
            raise

    def stop(self) -> None:
        """Remove the container and release the session lock; safe to call twice."""
        if self._loader is not None:
            self._loader.abort()
        self._runtime.stop()
        self._deployment.stop_egress()
        if self._deployment.remove():
            self._runtime.drop_life()
            self._runtime.drop_channel()
            self._after_session()
        if self._loader is not None:
            self._loader.close()
        self._deployment.unlock()

    def detach(self) -> None:
        """Leave the container running for a later `--resume` (stdin closed, lock released)."""
        self._runtime.stop()
        self._runtime.drop_life()
        self._deployment.stop_egress()  # the proxy ends with this process: a resume starts both
        self._deployment.forget()
        self._deployment.unlock()

    def is_alive(self) -> bool:
        """Whether the container runs and the toolbox answers."""
        toolbox = self._runtime.toolbox
        if toolbox is None or not self._deployment.is_running():
            return False
        try:
            return toolbox.is_running()
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
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run `tool` in the toolbox; a dead or stuck toolbox is restarted and reported.

        `on_output(stream, text)` gets a running command's output while it runs. Ctrl-C
        (KeyboardInterrupt) during a call kills what it started and restarts the toolbox
        before it goes on up, so the session stays usable. A reply asking for a new container
        (`remount`) gets it, and the call runs once more there.
        """
        for retry in (False, True):
            if self._runtime.toolbox is None and self._deployment.container is not None:
                self._restart_toolbox()  # an interrupted call left none
            if self._runtime.toolbox is None:
                raise SandboxError("the sandbox is not started")
            self.wait_copied()
            deadline = timeout or self._deadline_for(args)
            try:
                result, signals = self._runtime.call(tool, args, deadline, on_output)
            except ToolboxTimeoutError:
                return self._recover(f"{tool} did not answer within {deadline:.0f}s")
            except ToolboxError as exc:
                return self._recover(f"the toolbox died during {tool} ({exc})")
            except KeyboardInterrupt:
                # it is still running the call: its next line is not ours
                self._survivors = not self._kill_toolbox()
                raise
            if not self._react(signals, retry):
                return result
        raise AssertionError("unreachable: the second try never asks for another")

    def _react(self, signals: Signals, retried: bool) -> bool:
        """Do what a reply signals; True: run the call once more (after a remount)."""
        self._git.undisabled.update(signals.undisabled)
        if signals.unrestored:  # it stays where git on the host may find a look-alike
            first = signals.unrestored[0]
            raise SandboxError(
                f"{first.path} is protected (git on the host runs it); a command moved it and "
                f"it could not be put back ({first.error}); the session ends so that the "
                "project can be checked")
        if signals.remount and not retried:
            self._remount(list(signals.remount))
            return True
        if signals.unstoppable:
            self._unstoppable()
        return False

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The toolbox's preview of a write: the diff against the file as the container sees it.

        The host never opens project files itself: a symlink there may point into the host.
        """
        return self.call("preview", {"tool": tool, "args": args})

    def _deadline_for(self, args: dict[str, Any]) -> float:
        requested = args.get("timeout_seconds")
        base = requested if isinstance(requested, int | float) else self.config.tool_timeout
        return float(max(base, self.config.tool_timeout)) + _CALL_MARGIN

    # -- reactions ---------------------------------------------------------------------------

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
        if self._loader is not None:
            self._loader.abort()
        self._runtime.stop()
        self._deployment.detach_egress()
        self._deployment.remove()
        self._runtime.drop_life()
        try:  # a tree the session left can make this fail (a hard-linked hook, a broken config)
            moved = self._git.moved()
            if moved:  # a new container would protect them where they are, not the originals
                raise SandboxError(f"protected paths are not where they were at the start "
                                   f"({', '.join(moved[:3])}); the session ends")
            self._protect()
            self._deployment.save_record(run_record(self._git, self.name, self.config.root))
            self._runtime.new_container()
            self._create()
            self._deployment.start_egress()
        except BaseException:
            self._after_session()  # then stop() finds no container: the checks happen here
            raise
        self._start_toolbox()
        assert self._info is not None
        self._info = self._info.model_copy(
            update={"container_id": self._deployment.container.id})

    def _recover(self, what: str) -> ToolResult:
        self._warn(f"{what}; restarting the toolbox")
        self._survivors = not self._kill_toolbox()
        try:
            self._restart_toolbox()
        except SandboxError as exc:
            raise ToolboxError(f"{what}, and it could not be restarted: {exc}") from exc
        return ToolResult.error(f"{what}. The toolbox was restarted; the call had no result.",
                                toolbox_restarted=True)

    def _restart_toolbox(self) -> None:
        """A new toolbox, never beside what a failed kill left: a process of the tools' uid
        could pause the new one before it makes itself non-dumpable, read its key from its
        stdin and answer in its place (red-team round 17). That costs a bind session its
        container; a copy session cannot go on without its container, so it ends."""
        if not self._survivors:
            self._start_toolbox()
            return
        if self.copying:
            raise SandboxError(
                f"processes a command started in container {self.name} could not be stopped; "
                "the copy session cannot go on safely",
                fix="start a new session (the copy's pending changes are in the container "
                    f"{self.name} until it is removed)")
        self._survivors = False
        self._recreate("processes the command started could not be stopped; restarting the "
                       "sandbox (files in /tmp are lost)")

    def _kill_toolbox(self) -> bool:
        """Kill the toolbox and what it left (`Runtime.kill`)."""
        place = self._deployment
        if place.container is None:
            self._runtime.stop()
            return True
        return self._runtime.kill(place.client.api, place.container.id, tool_user(self.config),
                                  place.ensure_running)

    def _kill_in_container(self, pid: int) -> bool:
        place = self._deployment
        return self._runtime.kill_in_container(place.client.api, place.container.id,
                                               tool_user(self.config), pid)

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
        self._deployment.remove()
        self._runtime.drop_life()
        self._runtime.new_container()
        self._create()

    # -- composing the parts -----------------------------------------------------------------

    def spec(self) -> SandboxSpec:
        """This run's sandbox as one value: what `_create` would make now (the copy's size
        left out: it is the data's, not a decision)."""
        decided = self.create_options(self.config.model_copy(update={"copy_bytes": 0}))
        egress = self.config.egress.spec() if self.config.egress else None
        return SandboxSpec.of(decided, self.toolbox_argv(), self._deployment.image_id,
                              network=egress, git=self._git.surface.spec())

    def create_options(self, config: SandboxConfig | None = None) -> dict[str, Any]:
        """What the container is created with (`Deployment.options`)."""
        return self._deployment.options(config or self.config, self._git.protected,
                                        toolbox=self.toolbox_argv, channel=self._channel_dir())

    def toolbox_argv(self) -> list[str]:
        """The toolbox's command line (see its docstring)."""
        return bundle.toolbox_argv(self.config, self._git.surface.toolbox_argv(),
                                   fifo=self._channel_dir() is not None)

    def _channel_dir(self) -> Path | None:
        return self._runtime.channel_dir(gvisor=self._deployment.gvisor)

    def _create(self) -> None:
        options = self.create_options()
        options["labels"].update(self.spec().labels())
        self._runtime.before_create(gvisor=self._deployment.gvisor)  # its PID 1 opens it first
        self._deployment.create(options)

    def _start_toolbox(self, *, running: bool = False) -> None:
        """Start the toolbox; `running`: the container was just started (no need to ask)."""
        place = self._deployment
        if not running:
            place.ensure_running()
        ready = self._runtime.start(place.client.api, place.container.id, tool_user(self.config),
                                    self.toolbox_argv(), place.take_attached(),
                                    gvisor=place.gvisor)
        if not self.copying and not self._root_checked:  # bind: the engine mounted the root
            self._root_checked = True
            check_root(self.config.root, ready.get("root"))
        filtered = str(ready.get("filter", "not reported"))
        if bundle.filter_argv() and not filtered.startswith("installed"):
            self._warn(f"the toolbox's own seccomp filter is {filtered}: under runsc, set-id "
                       "modes, unix sockets and new namespaces are then not refused")

    # -- a bind session's guard --------------------------------------------------------------

    def _protect(self) -> None:
        """Find what git on the host would run from the tree, before the container exists."""
        self._git.protect()

    def _after_session(self) -> None:
        """Clear set-id bits the session left, report new repositories, remove our mountpoints."""
        if self._git.baseline is None:
            return
        self._git.after_session(self._warn)
        self._deployment.forget_record()

    def _settle_abandoned(self) -> None:
        """Runs on this root whose controller died: their containers go (with whatever still
        runs there), then their end-of-session checks run, before this run's start looks at
        the tree (what they planted must not be taken for the person's)."""
        place = self._deployment
        settle_abandoned(place.client, place.abandoned(), place.lock_path.parent, self._warn)

    # -- a copy session's loader -------------------------------------------------------------

    def _plan_copy(self) -> None:
        """Walk the root and check the size guard before any container exists."""
        if self._loader is None:
            raise SandboxError("this sandbox was built without a copy loader: it cannot run a "
                               "copy workspace", fix="use --workspace bind")
        uid, gid = (int(n) for n in mount_user(self.config).split(":"))
        size = self._loader.plan(self.config, (uid, gid))
        storage = copy_storage(self.config, size, podman=self._deployment.podman, warn=self._warn)
        self._deployment.config = self.config.model_copy(
            update={"copy_storage": storage, "copy_bytes": size})

    def _start_copy(self) -> None:
        """Load the copy while the toolbox starts; tool calls wait for it (`wait_copied`)."""
        if self._loader is None:
            return
        if self.reattached:
            self._loader.drop()
            return
        self._loader.start(self._deployment.client.api, self._deployment.container,
                           user=mount_user(self.config), read_only=self.config.read_only)

    def wait_copied(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        if self._loader is not None:
            self._loader.wait()

    def copy_manifest(self) -> object | None:
        """What this start copied in (the base of its changes); None: an existing copy."""
        self.wait_copied()
        return None if self._loader is None else self._loader.manifest()

    @property
    def copy_notes(self) -> list[str]:
        """What the copy left out, and why."""
        return [] if self._loader is None else self._loader.notes
