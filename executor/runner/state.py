"""What a runner holds (its layers, the session's sandbox, store and audit), shared by the
parts of `Runner` (executor/runner/)."""

from __future__ import annotations

from executor.agent import Agent
from executor.audit import AuditLog
from executor.basis import Basis
from executor.config import Settings
from executor.context import ContextWindow, truncate_text
from executor.hooks import Event, HookBus, WarningEvent
from executor.instructions import Instructions
from executor.messages import Message
from executor.network.egress import EgressConfig
from executor.network.notes import Refusals
from executor.network.session import egress_config
from executor.policy import Policy
from executor.protocols import Model, Sandbox
from executor.runner.options import SUMMARY_PROMPT, Approver, RunOptions, SandboxFactory
from executor.sandbox.config import SandboxConfig
from executor.sandbox.lazy import LazySandbox
from executor.session import NdjsonSessionStore
from executor.skills import SkillSet
from executor.tools import ToolRegistry
from executor.workspace.changes import Changeset


class RunnerState:
    """A runner's state and the few helpers every part of it uses."""

    def __init__(
        self,
        settings: Settings,
        options: RunOptions,
        *,
        model: Model,
        tools: ToolRegistry,
        policy: Policy,
        basis: Basis,
        hooks: HookBus,
        approver: Approver | None = None,
        sandbox: Sandbox | SandboxFactory | None = None,
    ) -> None:
        self.settings, self.options = settings, options
        self.model, self.tools, self.policy, self.hooks = model, tools, policy, hooks
        self.basis = basis
        """What the run read at its start: children and later phases are built from it."""
        self.approver = approver
        self.backend = sandbox
        """A sandbox to use as is, or a factory of one per session (None: Docker)."""
        self.sandbox: Sandbox | None = None
        self._lazy: LazySandbox | None = None
        self._abandoned: list[dict[str, str]] | None = None
        """A resumed session's last run died without its end: the calls it left unanswered."""
        self._sandbox_id = ""
        self._workspace_mode = "bind"
        self._ahead: tuple[SandboxConfig, str, bool] | None = None
        """A standby to make once this session's sandbox is up (runner/sandboxes.py)."""
        self._warm_keys: list[str] = []
        """The standbys this session made for its children (their pool's keys)."""
        self._leave: SandboxConfig | None = None
        """This run's sandbox, when it leaves a standby for the next run (`warm`)."""
        self.changes: Changeset | None = None
        """A copy session's changes, collected when it closed."""
        self.store: NdjsonSessionStore | None = None
        self.audit: AuditLog | None = None
        self.agent: Agent | None = None
        self._replies = 0
        self.instructions: Instructions | None = None
        """The project instructions in the system prompt (AGENTS.md), once started."""
        self.skills = SkillSet()
        """The prompt skills in the system prompt, once started."""
        self.children: list[str] = []
        """Sessions delegated to from this one."""
        self.egress: EgressConfig | None = egress_config(
            settings, options.allow_host_flags, options.network_flags, options.root,
            from_config=not options.read_only,  # read-only runs and review: only when asked
            policy=policy.network)
        """The hosts the sandbox may reach, decided once (None: no network)."""
        self._refusals = Refusals()
        """What the proxy refused: each call's result names what it refused meanwhile."""
        hooks.subscribe(self._count_reply, "model_request")

    def _count_reply(self, event: Event) -> None:
        self._replies += 1

    def _warn(self, message: str) -> None:
        self.hooks.emit(WarningEvent(message=message))

    def _mount_mode(self) -> str:
        return "ro" if self.options.read_only else "rw"

    def _summarize(self, segment: list[Message]) -> str:
        transcript = "\n".join(f"{m.role}: {m.content}"[:2000] for m in segment)
        window = self.agent.fitter if self.agent is not None else None
        if isinstance(window, ContextWindow):  # the summary request must fit the window too
            transcript = truncate_text(transcript, window.room() // 2, window.counter)
        reply = self.model.chat([Message.system(SUMMARY_PROMPT), Message.user(transcript)], [])
        return reply.message.content

    @property
    def session_name(self) -> str | None:
        """Name of the running session."""
        return self.store.name if self.store else None

    @property
    def sandbox_id(self) -> str:
        """The session's sandbox id (its container is `sandbox-agent-<id>`)."""
        return self._sandbox_id

    @property
    def workspace_mode(self) -> str:
        """bind or copy."""
        return self._workspace_mode

    @property
    def sandbox_started(self) -> bool:
        """Whether the container is up (with `sandbox_warm_up`, it may not be yet)."""
        return self.sandbox is not None and (self._lazy is None or self._lazy.started)
