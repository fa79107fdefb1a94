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
from typing import Any

from executor.errors import SandboxError, ToolboxError, ToolboxTimeoutError
from executor.gitsafety.guard import GitGuard
from executor.lifecycle import StartStop
from executor.messages import ToolResult
from executor.network.egress import EgressHooks
from executor.protocols import OutputCallback, SandboxInfo
from executor.sandbox import bundle, warm
from executor.sandbox.bindguard import Warn, run_record, settle_abandoned
from executor.sandbox.config import SandboxConfig, container_name, tool_user
from executor.sandbox.copy import CopyLoader
from executor.sandbox.copysession import CopySession
from executor.sandbox.deployment import Deployment
from executor.sandbox.recovery import Recovery
from executor.sandbox.runtime import Runtime, Toolbox, check_root
from executor.sandbox.signals import Signals
from executor.sandbox.spec import SandboxSpec

__all__ = ["DockerSandbox", "SandboxConfig", "container_name"]

_CALL_MARGIN = 15.0  # seconds the host waits beyond a tool's own timeout


class DockerSandbox(StartStop):
    """A hardened per-session container; satisfies the `Sandbox` protocol."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn | None = None,
                 egress_hooks: EgressHooks | None = None,
                 copy_loader: CopyLoader | None = None) -> None:
        self._warn = warn or (lambda message: None)
        say: Warn = lambda message: self._warn(message)  # noqa: E731 (`_warn` may be swapped)
        place = Deployment(config, client=client, warn=say, egress_hooks=egress_hooks)
        self._assemble(place, Runtime(place.lock_path.parent, place.name, say,
                                      fifo=config.fifo_channel))
        self._git = GitGuard(config.root, workspace=config.workspace, read_only=config.read_only,
                             allow_git_writes=config.allow_git_writes)
        self._copy = CopySession(copy_loader)
        self._info: SandboxInfo | None = None
        self._root_checked = False

    def _assemble(self, deployment: Deployment, runtime: Runtime) -> None:
        """Compose the parts (tests pass fakes of the engine-facing two)."""
        self._deployment, self._runtime = deployment, runtime
        self._recovery = Recovery(deployment, runtime, lambda message: self._warn(message))

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
    def adopted(self) -> bool:
        """Whether this start adopted a container made ahead (warm.py)."""
        return self._deployment.adopted

    @property
    def copying(self) -> bool:
        """Whether the sandbox works on a copy of the root (not on the root itself)."""
        return self.config.workspace == "copy"

    @property
    def _toolbox(self) -> Toolbox | None:
        return self._runtime.toolbox

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
                self._copy.plan(place, self._warn)
            else:
                place.lock_root()  # before the dead runs' checks and this run's walk
                settle_abandoned(place.client, place.abandoned(), place.lock_path.parent,
                                 self._warn)  # what dead runs planted is not the person's
                self._protect()
            place.lock()
            self._git.also_made(place.made_ahead)
            place.save_record(run_record(self._git, self.name, self.config.root))
            adopted = place.adopt(self.spec)  # a standby made ahead (warm.py)
            if adopted is not None:
                self._runtime.keep_life(adopted.take_life())
            elif place.existing(self.spec) is None:
                self._create()
            else:
                self._runtime.reattach_life(gvisor=place.gvisor)
                if self._recovery.clear_left():
                    self._create()
            place.start_egress()
            self._copy.start(place)
            self._start_toolbox(running=True)
            self._info = place.describe(image, tool_user(self.config))
        except BaseException:
            never_made = place.container is None
            self.stop()
            if never_made and self._runtime.has_channel:  # no container: nothing mounts it
                self._runtime.drop_channel()
            raise

    def standby(self) -> warm.Standby | None:
        """This session's container made now, with no toolbox in it yet (warm.py); None when
        this session can have none (`warm.eligible`)."""
        place = self._deployment
        place.connect()
        with place.root_locked():  # its walk and mounts: no other process's sandbox on the root
            return self._standby()

    def _standby(self) -> warm.Standby | None:
        place = self._deployment
        self._protect()
        place.standby_mode = True
        place.lock()
        why = warm.eligible(self.config, self._git.protected.missing,
                            quick=bool(self.create_options().get("stdin_open"))
                            and self._channel_dir() is not None)
        if why:
            self.stop()
            return None
        record = run_record(self._git, self.name, self.config.root)
        try:
            place.save_record(record)  # `gc` settles it if this process dies
            self._create()
            self._runtime.take_life(gvisor=False)
        except BaseException:
            self.stop()
            raise
        standby = place.standby_made(self.spec(), warm.mounted_paths(
            self.config, self._git.protected.existing), record)
        standby.life = self._runtime.give_life()
        return standby

    def stop(self) -> None:
        """Remove the container and release the session lock; safe to call twice."""
        self._copy.abort()
        self._runtime.stop()
        self._deployment.stop_egress()
        if self._deployment.remove():
            self._runtime.drop_life()
            self._runtime.drop_channel()
            self._after_session()
        self._copy.close()
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
                self._recovery.interrupted()
                raise
            if not self._react(signals, retry):
                return result
        raise AssertionError("unreachable: the second try never asks for another")

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The toolbox's preview of a write: the diff against the file as the container sees it.

        The host never opens project files itself: a symlink there may point into the host.
        """
        return self.call("preview", {"tool": tool, "args": args})

    def _deadline_for(self, args: dict[str, Any]) -> float:
        requested = args.get("timeout_seconds")
        base = requested if isinstance(requested, int | float) else self.config.tool_timeout
        return float(max(base, self.config.tool_timeout)) + _CALL_MARGIN

    # -- acting on what `Recovery` decides (recovery.py) -------------------------------------

    def _react(self, signals: Signals, retried: bool) -> bool:
        """Do what a reply signals; True: run the call once more (in a new container)."""
        self._git.undisabled.update(signals.undisabled)
        step = self._recovery.react(signals, retried)
        if step is not None:
            self._recreate(step.why)
        return step is not None and step.retry

    def _recover(self, what: str) -> ToolResult:
        result = self._recovery.recover(what)
        try:
            self._restart_toolbox()
        except SandboxError as exc:
            raise ToolboxError(f"{what}, and it could not be restarted: {exc}") from exc
        return result

    def _restart_toolbox(self) -> None:
        step = self._recovery.restart()
        if step is None:
            self._start_toolbox()
        else:
            self._recreate(step.why)

    def _recreate(self, why: str) -> None:
        """A new container for the session (same mounts, decided afresh); the old one goes."""
        self._warn(why)
        self._copy.abort()
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
        self._git.check_mounted()  # the engine followed no link swapped in since the walk

    def _start_toolbox(self, *, running: bool = False) -> None:
        """Start the toolbox; `running`: the container was just started (no need to ask)."""
        place = self._deployment
        if not running:
            place.ensure_running()
        try:
            ready = self._runtime.start(place.client.api, place.container.id,
                                        tool_user(self.config), self.toolbox_argv(),
                                        place.take_attached(), gvisor=place.gvisor)
        except BaseException:  # a half-started toolbox may still run: none starts beside it
            self._recovery.survivors = True
            raise
        if not self.copying and not self._root_checked:  # bind: the engine mounted the root
            self._root_checked = True
            check_root(self.config.root, ready.get("root"))

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

    # -- a copy session's loader (copysession.py) -------------------------------------------

    def wait_copied(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        self._copy.wait()

    def copy_manifest(self) -> object | None:
        """What this start copied in (the base of its changes); None: an existing copy."""
        self.wait_copied()
        return self._copy.manifest()

    @property
    def copy_notes(self) -> list[str]:
        """What the copy left out, and why."""
        return self._copy.notes
