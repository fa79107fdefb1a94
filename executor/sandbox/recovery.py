"""What a session's sandbox does when a call goes wrong or its reply signals something.

`Recovery` is given the session's Deployment and Runtime and decides; `Restarts` (restarts.py)
acts on what it returns (a `Recreate`, or nothing), and nothing calls a tool again from there.
The rules, each from a red-team round, kept here in one place:

- a kill that failed (or was cut short, round 18) or a toolbox start that failed half way
  leaves `survivors`: no toolbox starts beside them (a process of the tools' uid could pause
  the new one before it makes itself non-dumpable, read its key from its stdin and answer in
  its place, round 17; what a dead run left, round 13). That costs a bind session its
  container; a copy session cannot go on without its container: it ends. Every toolbox
  start goes through `start_toolbox`, so the rule has one door.
- a process the command left that the toolbox could not stop costs a bind session its
  container; in a copy session it is a warning (its changes show in the copy's diff).
- a protected mount a command moved and that could not be put back ends the session.
- a `.git` made on the host during the session gets a new container (mounts are fixed at
  creation) and the call runs once more there, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.errors import SandboxError
from executor.messages import ToolResult
from executor.sandbox.config import tool_user
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.procs import others_than_init
from executor.sandbox.runtime import Runtime
from executor.sandbox.signals import Signals

_TMP_LOST = "restarting the sandbox (files in /tmp are lost)"
_CALL_MARGIN = 15.0  # seconds the host waits beyond a tool's own timeout


@dataclass(frozen=True, slots=True)
class Recreate:
    """A new container for the session (same mounts, decided afresh); the old one goes."""

    why: str
    """What the person is told."""
    retry: bool = False
    """The call runs once more in the new container (a remount)."""


class Recovery:
    """Kills what a call left, remembers when that failed, and says what a signal costs."""

    def __init__(self, deployment: Deployment, runtime: Runtime, warn: Warn) -> None:
        self._deployment, self._runtime, self._warn = deployment, runtime, warn
        self.survivors = False
        """A kill failed: what the command left may still run in the container."""

    @property
    def _copying(self) -> bool:
        return self._deployment.config.workspace == "copy"

    @property
    def _name(self) -> str:
        return self._deployment.name

    def deadline(self, args: dict[str, Any]) -> float:
        """How long a call may take before its toolbox counts as stuck (`recover`)."""
        tool_timeout = self._deployment.config.tool_timeout
        requested = args.get("timeout_seconds")
        base = requested if isinstance(requested, int | float) else tool_timeout
        return float(max(base, tool_timeout)) + _CALL_MARGIN

    def react(self, signals: Signals, retried: bool) -> Recreate | None:
        """What a reply's signals ask for; raises when the session must end."""
        if signals.unrestored:  # it stays where git on the host may find a look-alike
            first = signals.unrestored[0]
            raise SandboxError(
                f"{first.path} is protected (git on the host runs it); a command moved it and "
                f"it could not be put back ({first.error}); the session ends so that the "
                "project can be checked")
        if signals.remount and not retried:  # the toolbox's guard refused the command
            found = ", ".join(signals.remount[:3])
            return Recreate(f"a git repository appeared in the project during the session "
                            f"({found}); restarting the sandbox with it read-only (files in "
                            "/tmp are lost); it is renamed when the session ends", retry=True)
        if signals.unstoppable:
            return self._unstoppable()
        return None

    def _unstoppable(self) -> Recreate | None:
        """A process the toolbox could not stop (under gVisor, one that clones and exits
        faster than kill(-1) reaches it): only a new container ends it for sure."""
        if self._copying:  # a new container would lose the copy: what it holds shows in its diff
            self._warn("a process the command started could not be stopped; it may still change "
                       "the copy workspace: review its diff before applying it")
            return None
        return Recreate(f"a process the command started could not be stopped; {_TMP_LOST}")

    def interrupted(self) -> None:
        """The toolbox is still running a call (Ctrl-C): kill it, its next line is not ours."""
        self.kill_toolbox()

    def recover(self, what: str) -> ToolResult:
        """Kill a dead or stuck toolbox; the result the model gets once a new one runs."""
        self._warn(f"{what}; restarting the toolbox")
        self.kill_toolbox()
        return ToolResult.error(f"{what}. The toolbox was restarted; the call had no result, "
                                "and what it changed has no write records.",
                                toolbox_restarted=True)

    def restart(self) -> Recreate | None:
        """Before a new toolbox starts: None, start it here; else a new container first."""
        if not self.survivors:
            return None
        if self._copying:
            raise SandboxError(
                f"processes a command started in container {self._name} could not be stopped; "
                "the copy session cannot go on safely",
                fix="start a new session (the copy's pending changes are in the container "
                    f"{self._name} until it is removed)")
        self.survivors = False
        return Recreate(f"processes the command started could not be stopped; {_TMP_LOST}")

    def clear_left(self) -> bool:
        """Kill what a run that died mid-command left in a re-attached container; True: that
        failed and the container went (a bind session's), the caller makes a new one."""
        if self.kill_in_container(0) and self._alone():
            return False
        if self._copying:
            raise SandboxError(
                f"processes the last run left in container {self._name} could not be stopped; "
                "the session cannot be resumed safely",
                fix=f"remove the container (`docker rm -f {self._name}`; its pending copy is "
                    "lost) and start a new session")
        self._warn("processes the last run left in the container could not be stopped; "
                   "starting a new container (files in /tmp are lost)")
        self._deployment.remove()
        self._runtime.drop_life()
        self._runtime.new_container()
        return True

    def start_toolbox(self, argv: list[str], *, running: bool) -> dict[str, Any]:
        """Start the toolbox (`Runtime.start`); its ready line. `running`: the container was
        just started (no need to ask). A start that fails half way may leave its process
        running: `survivors`, as after a failed kill."""
        place = self._deployment
        if not running:
            place.ensure_running()
        try:
            return self._runtime.start(place.client.api, place.container.id,
                                       tool_user(place.config), argv, place.take_attached(),
                                       gvisor=place.gvisor)
        except BaseException:  # a half-started toolbox may still run: none starts beside it
            self.survivors = True
            raise

    def kill_toolbox(self) -> bool:
        """Kill the toolbox and what it left (`Runtime.kill`); False: some may still run.

        `survivors` is set first and cleared only by a kill that ended well: a Ctrl-C or an
        error during its wait (which a command can make last) leaves them assumed alive."""
        place = self._deployment
        self.survivors = True
        if place.container is None:
            self._runtime.stop()
            killed = True
        else:
            killed = self._runtime.kill(place.client.api, place.container.id,
                                        tool_user(place.config), place.ensure_running,
                                        alone=self._alone)
        self.survivors = not killed
        return killed

    def _alone(self) -> bool:
        """Whether the host's kernel sees PID 1 alone in the container now: the kill script's
        exit code is the word of a process a survivor can reach (red-team round 19 ptraced it
        into exit 0). Unseen from here (a remote engine, gVisor's own processes): its word."""
        place = self._deployment
        if place.gvisor or place.container is None:
            return True
        others = others_than_init(place.client.api, place.container.id)
        if others:
            self._warn(f"the kill script said done, but {others} process(es) besides PID 1 "
                       "still run in the container")
        return not others

    def kill_in_container(self, pid: int) -> bool:
        """Kill `pid` (0: none) and all the tools' uid runs (`Runtime.kill_in_container`)."""
        place = self._deployment
        return self._runtime.kill_in_container(place.client.api, place.container.id,
                                               tool_user(place.config), pid)
