"""A session's restarts: what `Recovery` decided, done — a new toolbox, or a new container.

`DockerSandbox.call` hands each reply's signals and each failed call here and gets back a
value (run the call once more, or the result the model sees); nothing here calls a tool, so
reacting to a signal never recurses. The steps, in the order the rules in recovery.py need:

- a toolbox that died or was killed skipped the checks it makes after each command: the host
  makes them (`BindSession.check_now`) before a new one starts, while nothing runs in the
  container — or, when what the kill left may still run, in a new container;
- a new container (a remount, a process nobody could stop, survivors): the old one goes, the
  tree is walked again (`BindSession.renew`), the Blueprint makes the new one, its toolbox
  starts. Should that fail, the checks after the session run here: `stop` finds no container.
"""

from __future__ import annotations

from executor.errors import SandboxError, ToolboxError
from executor.messages import ToolResult
from executor.sandbox.bindguard import BindSession
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.copysession import CopySession
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.recovery import Recovery
from executor.sandbox.runtime import Runtime
from executor.sandbox.signals import Signals


class Restarts:
    """Starts a session's toolboxes and, when `Recovery` says so, its replacement containers."""

    def __init__(self, deployment: Deployment, runtime: Runtime, *, blueprint: Blueprint,
                 recovery: Recovery, bind: BindSession, copy: CopySession, warn: Warn) -> None:
        self._deployment, self._runtime, self._plan = deployment, runtime, blueprint
        self._recovery, self._bind, self._copy, self._warn = recovery, bind, copy, warn

    def start_toolbox(self, *, running: bool = False) -> None:
        """Start the toolbox (`Recovery.start_toolbox`), then check what it sees."""
        self._plan.check_root(self._recovery.start_toolbox(self._plan.toolbox_argv(),
                                                           running=running))
        self._bind.git.note_mountpoints()

    def react(self, signals: Signals, retried: bool) -> bool:
        """Do what a reply signals; True: run the call once more (in a new container)."""
        self._bind.note(signals)
        step = self._recovery.react(signals, retried)
        if step is not None:
            self.recreate(step.why)
        return step is not None and step.retry

    def recover(self, what: str) -> ToolResult:
        """A dead or stuck toolbox killed and a new one started; the result the model gets."""
        result = self._recovery.recover(what)
        try:
            self.restart_toolbox()
        except SandboxError as exc:
            raise ToolboxError(f"{what}, and it could not be restarted: {exc}") from exc
        return result

    def restart_toolbox(self) -> None:
        """After a toolbox died or was killed: the checks it skipped, then a new one (in a new
        container when what the kill left may still run: Recovery)."""
        step = self._recovery.restart()
        if step is None:
            self._bind.check_now()  # the kill left PID 1 alone: nothing races the host
            self._bind.in_place()
            self.start_toolbox()
        else:
            self.recreate(step.why, check=True)

    def recreate(self, why: str, *, check: bool = False) -> None:
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
        self.start_toolbox()
