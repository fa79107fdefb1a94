"""The Docker sandbox: one hardened container per session, one long-lived toolbox inside it.

`DockerSandbox` composes the parts and runs their steps in order (start, stop, a replacement
container), acting on what `Recovery` decides:

- the Deployment (deployment.py, hardening.py): the container made, re-attached or removed,
  its options, the session lock, the run record, the egress forwarder;
- the Runtime (runtime.py, bundle.py, fifos.py): the toolbox started, called, killed, its
  channel and PID 1's lifeline;
- the Blueprint (blueprint.py): what this run's container is (options, argv, spec), made,
  and the root its first toolbox sees checked;
- Recovery (recovery.py): what a signal or a failed call costs;
- a bind session's git protection (`BindSession`, bindguard.py, around gitsafety/guard.py),
  or a copy session's `CopyLoader` (copysession.py; the protocol in copy.py, loaded by
  executor/workspace/copyload.py), which whoever builds the sandbox passes in.
"""

from __future__ import annotations

import threading
from typing import Any

from executor.errors import SandboxError, ToolboxError, ToolboxTimeoutError
from executor.gitsafety.guard import GitGuard
from executor.lifecycle import StartStop
from executor.messages import ToolResult
from executor.network.egress import EgressHooks
from executor.protocols import OutputCallback, SandboxInfo
from executor.sandbox import bundle, warm
from executor.sandbox.bindguard import BindSession
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.config import SandboxConfig, container_name, tool_user
from executor.sandbox.copy import CopyLoader
from executor.sandbox.copysession import CopySession
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.recovery import Recovery
from executor.sandbox.runtime import Runtime, Toolbox
from executor.sandbox.signals import Signals
from executor.sandbox.spec import SandboxSpec

__all__ = ["DockerSandbox", "SandboxConfig", "container_name"]


class DockerSandbox(StartStop):
    """A hardened per-session container; satisfies the `Sandbox` protocol."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn | None = None,
                 egress_hooks: EgressHooks | None = None,
                 copy_loader: CopyLoader | None = None) -> None:
        self._warn = warn or (lambda message: None)
        self._git = GitGuard(config.root, workspace=config.workspace, read_only=config.read_only,
                             allow_git_writes=config.allow_git_writes)
        self._copy = CopySession(copy_loader)
        place = Deployment(config, client=client, warn=self._say, egress_hooks=egress_hooks)
        self._assemble(place, Runtime(place.lock_path.parent, place.name, self._say,
                                      fifo=config.fifo_channel))
        self._info: SandboxInfo | None = None
        self._adopted: dict[str, str] | None = None
        """When and by which run the standby this start adopted was made (warm.py)."""

    def _assemble(self, deployment: Deployment, runtime: Runtime) -> None:
        """Compose the parts (tests pass fakes of the engine-facing two)."""
        self._deployment, self._runtime = deployment, runtime
        self._recovery = Recovery(deployment, runtime, self._say)
        self._bind = BindSession(self._git, deployment, self._say)
        self._plan = Blueprint(deployment, runtime, self._git)

    def _say(self, message: str) -> None:
        """The parts warn through here: a caller may swap `_warn` after they are made."""
        self._warn(message)

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
            if self.copying:
                self._copy.plan(place, self._say)
            else:
                place.lock_root()  # before the dead runs' checks and this run's walk
                self._bind.prepare()
            place.lock()  # the lock dir is checked to lie outside the project: the bundle's
            # cache is there, loaded (or compiled) while the engine makes the container
            threading.Thread(target=bundle.compiled_toolbox, args=(place.lock_path.parent,),
                             name="toolbox-compile", daemon=True).start()
            self._git.also_made(place.made_ahead)
            self._bind.record()
            adopted = place.adopt(self._plan.spec)  # a standby made ahead (warm.py)
            if adopted is not None:
                self._runtime.keep_life(adopted.take_life())
                self._adopted = adopted.origin()
            elif place.existing(self._plan.spec) is None:
                self._plan.create()
            else:
                self._runtime.reattach_life(gvisor=place.gvisor)
                if self._recovery.clear_left():
                    self._plan.create()
            place.start_egress()
            self._copy.start(place)
            self._start_toolbox(running=True)
            self._info = place.describe(image, tool_user(self.config)).model_copy(
                update={"adopted": self._adopted})
        except BaseException:
            never_made = place.container is None
            self.stop()
            if never_made and self._runtime.has_channel:  # no container: nothing mounts it
                self._runtime.drop_channel()
            raise

    def standby(self, ttl: int = 0) -> warm.Standby | None:
        """This session's container made now, with no toolbox in it yet (warm.py), its PID 1
        armed (`ttl` 0: it ends with this process; else it waits that long for a later one);
        None when this session can have none (`warm.eligible`)."""
        place = self._deployment
        place.connect()
        with place.root_locked():  # its walk and mounts: no other process's sandbox on the root
            return self._standby(ttl)

    def _standby(self, ttl: int) -> warm.Standby | None:
        place = self._deployment
        self._bind.protect()
        place.standby_mode = True
        place.lock()
        why = warm.eligible(self.config, self._git.protected.missing,
                            quick=bool(self._plan.options().get("stdin_open"))
                            and self._plan.channel_dir() is not None)
        if why:
            self.stop()
            return None
        try:
            record = self._bind.record()  # `gc` settles it if this process dies
            self._plan.create()
            self._runtime.take_life(gvisor=False)
        except BaseException:
            self.stop()
            raise
        standby = place.standby_made(self._plan.spec(), warm.mounted_paths(
            self.config, self._git.protected.existing), record)
        standby.life = self._runtime.give_life()
        standby.root, standby.maker_session = str(self.config.root), self.config.session_name or ""
        try:
            standby.arm(ttl)
        except BaseException:
            standby.settle(self._say)
            raise
        return standby

    def stop(self) -> None:
        """Remove the container and release the session lock; safe to call twice."""
        self._copy.abort()
        self._runtime.stop()
        self._deployment.stop_egress()
        if self._deployment.remove():
            self._runtime.drop_life()
            self._runtime.drop_channel()
            self._bind.after()
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
            deadline = timeout or self._recovery.deadline(args)
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

    # -- acting on what `Recovery` decides (recovery.py) -------------------------------------

    def _react(self, signals: Signals, retried: bool) -> bool:
        """Do what a reply signals; True: run the call once more (in a new container)."""
        self._bind.note(signals)
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
        """After a toolbox died or was killed: the checks it skipped, then a new one (in a new
        container when what the kill left may still run: Recovery)."""
        step = self._recovery.restart()
        if step is None:
            self._bind.check_now()  # the kill left PID 1 alone: nothing races the host
            self._start_toolbox()
        else:
            self._recreate(step.why, check=True)

    def _recreate(self, why: str, *, check: bool = False) -> None:
        """A new container for the session (same mounts, decided afresh); the old one goes;
        `check`: the tree checked first (the old toolbox skipped that)."""
        self._warn(why)
        self._copy.abort()
        self._runtime.stop()
        self._deployment.detach_egress()
        self._deployment.remove()
        self._runtime.drop_life()
        try:
            if check:
                self._bind.check_now()
            self._bind.renew()
            self._runtime.new_container()
            self._plan.create()
            self._deployment.start_egress()
        except BaseException:
            self._bind.after()  # then stop() finds no container: the checks happen here
            raise
        self._start_toolbox()
        assert self._info is not None
        self._info = self._info.model_copy(
            update={"container_id": self._deployment.container.id})

    # -- what this run's container is (blueprint.py) ----------------------------------------

    def spec(self) -> SandboxSpec:
        """This run's sandbox as one value (`Blueprint.spec`)."""
        return self._plan.spec()

    def create_options(self, config: SandboxConfig | None = None) -> dict[str, Any]:
        """What the container is created with (`Blueprint.options`)."""
        return self._plan.options(config)

    def toolbox_argv(self) -> list[str]:
        """The toolbox's command line (`Blueprint.toolbox_argv`)."""
        return self._plan.toolbox_argv()

    def _start_toolbox(self, *, running: bool = False) -> None:
        """Start the toolbox (`Recovery.start_toolbox`), then check what it sees."""
        self._plan.check_root(self._recovery.start_toolbox(self._plan.toolbox_argv(),
                                                           running=running))

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
