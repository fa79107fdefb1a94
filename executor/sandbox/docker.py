"""The Docker sandbox: one hardened container per session, one long-lived toolbox inside it.

`DockerSandbox` composes the parts and runs the start, stop and detach sequences; callers that
need a part reach it (`deployment`, `runtime`, `blueprint`, `git`):

- the Deployment (deployment.py, hardening.py): the container made, re-attached or removed,
  its options, the session lock, the run record, the egress forwarder;
- the Runtime (runtime.py, bundle.py, fifos.py): the toolbox started, called, killed, its
  channel and PID 1's lifeline;
- the Blueprint (blueprint.py): what this run's container is (options, argv, spec), made,
  and the root its first toolbox sees checked;
- Recovery (recovery.py): what a signal or a failed call costs, and `Restarts`
  (restarts.py): that cost paid — a new toolbox after the checks the dead one skipped, or a
  new container;
- a standby (warm.py): this session's container made ahead, with no toolbox yet (ahead.py);
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
from executor.sandbox import ahead, bundle, warm
from executor.sandbox.bindguard import BindSession
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.config import SandboxConfig, container_name, tool_user
from executor.sandbox.copy import CopyLoader
from executor.sandbox.copysession import CopySession
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.recovery import Recovery
from executor.sandbox.restarts import Restarts
from executor.sandbox.runtime import Runtime

__all__ = ["DockerSandbox", "SandboxConfig", "container_name"]


class DockerSandbox(StartStop):
    """A hardened per-session container; satisfies the `Sandbox` protocol."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn | None = None,
                 egress_hooks: EgressHooks | None = None,
                 copy_loader: CopyLoader | None = None) -> None:
        self._warn = warn or (lambda message: None)
        self.git = GitGuard(config.root, workspace=config.workspace, read_only=config.read_only,
                            allow_git_writes=config.allow_git_writes)
        """The session's git surface and its backups (gitsafety/guard.py)."""
        self._copy = CopySession(copy_loader)
        place = Deployment(config, client=client, warn=self._say, egress_hooks=egress_hooks)
        self._assemble(place, Runtime(place.lock_path.parent, place.name, self._say,
                                      fifo=config.fifo_channel))
        self._info: SandboxInfo | None = None
        self._adopted: dict[str, str] | None = None
        """When and by which run the standby this start adopted was made (warm.py)."""

    def _assemble(self, deployment: Deployment, runtime: Runtime) -> None:
        """Compose the parts (tests pass fakes of the engine-facing two)."""
        self.deployment, self.runtime = deployment, runtime
        self.blueprint = self._blueprint(deployment, runtime)
        self._recovery = Recovery(deployment, runtime, self._say)
        self._bind = BindSession(self.git, deployment, self._say)
        self._restarts = Restarts(deployment, runtime, blueprint=self.blueprint,
                                  recovery=self._recovery, bind=self._bind, copy=self._copy,
                                  warn=self._say)

    def _blueprint(self, deployment: Deployment, runtime: Runtime) -> Blueprint:
        """What this run's container is (a probe's or a benchmark's subclass weakens it)."""
        return Blueprint(deployment, runtime, self.git)

    def _say(self, message: str) -> None:
        """The parts warn through here: a caller may swap `_warn` after they are made."""
        self._warn(message)

    @property
    def reattached(self) -> bool:
        """Whether this start found the session's container (a copy session's) again."""
        return self.deployment.reattached

    @property
    def adopted(self) -> bool:
        """Whether this start adopted a container made ahead (warm.py)."""
        return self.deployment.adopted

    # -- lifecycle ---------------------------------------------------------------------------

    def preflight(self) -> None:
        """Fail now, not at the first tool call, when the engine or the image is missing."""
        self.deployment.preflight()

    def start(self) -> None:
        """Create (or re-attach to) the session's container and start the toolbox."""
        place = self.deployment
        try:
            image = place.connect()
            if place.config.workspace == "copy":
                self._copy.plan(place, self._say)
            else:
                place.lock_root()  # before the dead runs' checks and this run's walk
                self._bind.prepare()
            place.lock()  # the lock dir is checked to lie outside the project: the bundle's
            # cache is there, loaded (or compiled) while the engine makes the container
            threading.Thread(target=bundle.compiled_toolbox, args=(place.lock_path.parent,),
                             name="toolbox-compile", daemon=True).start()
            self.git.also_made(place.made_ahead)
            self._bind.record()
            adopted = place.adopt(self.blueprint.spec)  # a standby made ahead (warm.py)
            if adopted is not None:
                self.runtime.keep_life(adopted.take_life())
                self._adopted = adopted.origin()
            elif place.existing(self.blueprint.spec) is None:
                self.blueprint.create()
            else:
                self.runtime.reattach_life(gvisor=place.gvisor)
                if self._recovery.clear_left():
                    self.blueprint.create()
            place.start_egress()
            self._copy.start(place)
            self._restarts.start_toolbox(running=True)
            self._info = place.describe(image, tool_user(place.config)).model_copy(
                update={"adopted": self._adopted})
        except BaseException:
            never_made = place.container is None
            self.stop()
            if never_made:  # none, or the engine's failed create removed it: stop() did not
                self._bind.after()  # check now, or the next run settles a stale record
                if self.runtime.has_channel:  # nothing mounts it
                    self.runtime.drop_channel()
            raise

    def standby(self, ttl: int = 0) -> warm.Standby | None:
        """This session's container made now, with no toolbox in it yet (warm.py), its PID 1
        armed (`ttl` 0: it ends with this process; else it waits that long for a later one);
        None when this session can have none (`warm.eligible`)."""
        place = self.deployment
        place.connect()
        with place.root_locked():  # its walk and mounts: no other process's sandbox on the root
            return ahead.make(place, self.runtime, self.blueprint, self._bind, ttl=ttl,
                              stop=self.stop, warn=self._say)

    def stop(self) -> None:
        """Remove the container and release the session lock; safe to call twice."""
        self._copy.abort()
        self.runtime.stop()
        self.deployment.stop_egress()
        if self.deployment.remove():
            self.runtime.drop_life()
            self.runtime.drop_channel()
            self._bind.after()
        self._copy.close()
        self.deployment.unlock()

    def detach(self) -> None:
        """Leave the container running for a later `--resume` (stdin closed, lock released)."""
        self.runtime.stop()
        self.runtime.drop_life()
        self.deployment.stop_egress()  # the proxy ends with this process: a resume starts both
        self.deployment.forget()
        self.deployment.unlock()

    def is_alive(self) -> bool:
        """Whether the container runs and the toolbox answers."""
        return self.runtime.is_alive(self.deployment.is_running)

    @property
    def info(self) -> SandboxInfo:
        """Identity of the running sandbox (a replacement container's, once it is made)."""
        info, container = self._info, self.deployment.container
        if info is None:
            raise SandboxError("the sandbox is not started")
        if container is not None and container.id != info.container_id:
            info = self._info = info.model_copy(update={"container_id": container.id})
        return info

    # -- the work ----------------------------------------------------------------------------

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run `tool` in the toolbox; a dead or stuck toolbox is restarted and reported.

        `on_output(stream, text)` gets a running command's output while it runs. Ctrl-C
        (KeyboardInterrupt) during a call kills what it started and restarts the toolbox
        before it goes on up, so the session stays usable. A reply asking for a new container
        (`remount`) gets it, and the call runs once more there (restarts.py).
        """
        for retry in (False, True):
            if self.runtime.toolbox is None and self.deployment.container is not None:
                self._restarts.restart_toolbox()  # an interrupted call left none
            if self.runtime.toolbox is None:
                raise SandboxError("the sandbox is not started")
            self._copy.wait()
            deadline = timeout or self._recovery.deadline(args)
            try:
                result, signals = self.runtime.call(tool, args, deadline, on_output)
            except ToolboxTimeoutError:
                return self._restarts.recover(f"{tool} did not answer within {deadline:.0f}s")
            except ToolboxError as exc:
                return self._restarts.recover(f"the toolbox died during {tool} ({exc})")
            except KeyboardInterrupt:
                self._recovery.interrupted()
                raise
            if not self._restarts.react(signals, retry):
                return result
        raise AssertionError("unreachable: the second try never asks for another")

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The toolbox's preview of a write: the diff against the file as the container sees it.

        The host never opens project files itself: a symlink there may point into the host.
        """
        return self.call("preview", {"tool": tool, "args": args})

    # -- a copy session's loader (copysession.py, for workspace/sessions.py) ----------------

    def copy_manifest(self) -> object | None:
        """What this start copied in (the base of its changes); None: an existing copy."""
        self._copy.wait()
        return self._copy.manifest()

    def copy_sent(self) -> object | None:
        """What this start copies in, once read: the base can be kept while it arrives."""
        return self._copy.sent()

    @property
    def copy_notes(self) -> list[str]:
        """What the copy left out, and why."""
        return self._copy.notes
