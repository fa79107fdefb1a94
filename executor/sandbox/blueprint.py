"""What this run's container is: its options, the toolbox's command line, its spec; made, and
checked once its toolbox says what it sees.

Everything here is decided from the Deployment's facts (engine, image, config), the Runtime's
channel directory and the git surface the `GitGuard` decided; the one place that decides them,
so that the spec that labels a container is the spec of the options it was made with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executor.gitsafety.guard import GitGuard
from executor.sandbox import bundle
from executor.sandbox.config import SandboxConfig
from executor.sandbox.deployment import Deployment
from executor.sandbox.runtime import Runtime, check_root
from executor.sandbox.spec import SandboxSpec


class Blueprint:
    """The container this run makes (each method asks again: a remount decides afresh)."""

    def __init__(self, deployment: Deployment, runtime: Runtime, git: GitGuard) -> None:
        self._deployment, self._runtime, self._git = deployment, runtime, git
        self._root_checked = False

    @property
    def config(self) -> SandboxConfig:
        """The config as decided so far (an image fallback, the copy's storage)."""
        return self._deployment.config

    def spec(self, options: dict[str, Any] | None = None) -> SandboxSpec:
        """This run's sandbox as one value: what `create` would make now (the copy's size
        left out: it is the data's, not a decision); `options`: those just decided, when no
        copy's size is in them (`create`: decided once, not twice)."""
        if options is None or self.config.copy_bytes:
            options = self.options(self.config.model_copy(update={"copy_bytes": 0}))
        egress = self.config.egress.spec() if self.config.egress else None
        return SandboxSpec.of(options, self.toolbox_argv(), self._deployment.image_id,
                              network=egress, git=self._git.surface.spec())

    def options(self, config: SandboxConfig | None = None) -> dict[str, Any]:
        """What the container is created with (`Deployment.options`)."""
        return self._deployment.options(config or self.config, self._git.protected,
                                        toolbox=self.toolbox_argv, channel=self.channel_dir())

    def toolbox_argv(self) -> list[str]:
        """The toolbox's command line (see its docstring)."""
        return bundle.toolbox_argv(self.config, self._git.surface.toolbox_argv(),
                                   fifo=self.channel_dir() is not None)

    def channel_dir(self) -> Path | None:
        """The host side of the container's FIFO channel (None: this engine gets none)."""
        return self._runtime.channel_dir(gvisor=self._deployment.gvisor)

    def create(self) -> None:
        """Make and start the container, labelled with its spec."""
        options = self.options()
        options["labels"].update(self.spec(options).labels())
        self._runtime.before_create(gvisor=self._deployment.gvisor)  # its PID 1 opens it first
        self._deployment.create(options)
        self._git.check_mounted()  # the engine followed no link swapped in since the walk

    def check_root(self, ready: dict[str, Any]) -> None:
        """A bind session's first toolbox says which root the engine mounted: it must be ours."""
        if self.config.workspace != "copy" and not self._root_checked:
            self._root_checked = True
            check_root(self.config.root, ready.get("root"))
