"""The library facade: `Runner.build(...)` wires the layers of DESIGN.md together.

    with Runner.build(root="./proj", provider="ollama", model="qwen2.5-coder:7b") as runner:
        runner.hooks.subscribe(print, "tool_call")
        result = runner.run("What does main.py do?")
        print(result.answer)

`build` does no I/O beyond reading what the run is allowed and told (its `Basis`: the policy,
the skills, AGENTS.md; a child session or a later phase gets its parent's instead); the model
server, the container, the session file and the audit log are started by `start()` (or the
first `run`) and the container is removed by `close()` (or leaving the `with` block).
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from pydantic import BaseModel, Field, ValidationError

from executor import durable
from executor.agent import Agent, Authorization, RunResult
from executor.audit import AuditLog
from executor.basis import Basis, read_basis
from executor.coach import Coach
from executor.config import Settings, derive_settings, load_settings
from executor.context import (
    INTERRUPTED_RESULT,
    CachedSummarizer,
    ContextWindow,
    counter_for,
    pair_tool_results,
    resolve_budget,
    truncate_text,
)
from executor.delegation import (
    DEFAULT_DELEGATION_DEPTH,
    DEFAULT_MAX_DELEGATIONS,
    DELEGATE_TOOL,
    RELAYED,
    BorrowedModel,
    Delegate,
    DelegateArgs,
)
from executor.errors import ConfigError, MaxTurnsExceeded, SandboxAgentError, UserError
from executor.hooks import (
    ChildEvent,
    CompleteEvent,
    ErrorEvent,
    Event,
    HookBus,
    InstructionsEvent,
    NoticeEvent,
    ProgressEvent,
    RunStartEvent,
    SandboxStartEvent,
    SkillsEvent,
    WarningEvent,
)
from executor.instructions import Instructions
from executor.messages import Message, ToolCall, ToolResult, ToolSpec
from executor.models import build_model
from executor.models.toolproto import uses_json
from executor.network.egress import EgressConfig
from executor.network.notes import NotedSandbox, Refusals
from executor.network.session import egress_config, egress_hooks, prompt_note
from executor.policy import Decision, Policy, PolicyOverrides
from executor.protocols import LoadingModel, Model, Sandbox, TokenizingModel
from executor.redact import Redactor
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.environment import sandbox_environment
from executor.sandbox.lazy import LazySandbox
from executor.session import (
    COMPACTED_NOTE,
    CONTEXT_CLEARED,
    CONTEXT_COMPACTED,
    NdjsonSessionStore,
    SessionHeader,
    abandoned_calls,
    child_sessions,
    session_names,
)
from executor.skills import SkillSet
from executor.state import legacy_notice
from executor.tools import Preview, Tool, ToolContext, ToolRegistry, default_registry
from executor.userconfig import check_outside_project
from executor.workspace.apply import pending
from executor.workspace.changes import Changeset, load_changes
from executor.workspace.copyload import ArchiveLoader
from executor.workspace.sessions import CopyWorkspace, JournaledSandbox
from executor.workspace.store import BlobStore

if TYPE_CHECKING:
    from executor.protocols import LoadProgress

SandboxFactory = Callable[[SandboxConfig], Sandbox]
"""Makes a session's sandbox from its configuration (the default: a `DockerSandbox`)."""

SYSTEM_PROMPT = (
    "You are a coding agent working on the project in /workspace; tool paths are relative to "
    "it. Look at files before changing them, make small exact edits, and run commands to check "
    "your work (python3; there is no network unless said below). When you are done, answer "
    "briefly with what you did or found."
)
READ_ONLY_NOTE = " This run is read-only: you can list, read and search files, not change them."


class RunOptions(BaseModel):
    """Per-run choices that are not environment settings (flags of `ask` / `review`)."""

    root: Path
    """Project root (must exist)."""
    read_only: bool = False
    """Mount the root read-only and offer no write tools."""
    yes: bool = False
    """Approve every `ask` decision up front (never overrides `deny`)."""
    auto_edit: bool = False
    """Approve an `ask` for write_file / edit_file up front; commands still ask."""
    deny_tools: list[str] = Field(default_factory=list)
    """Tools removed before the model sees them (and denied if called)."""
    deny_prefixes: list[str] = Field(default_factory=list)
    """Tools whose name starts with one of these are removed and denied."""
    deny_commands: list[str] = Field(default_factory=list)
    """Shell commands starting with one of these are denied."""
    policy_file: Path | None = None
    """A policy TOML the person names, outside the project (default: the project's, as far as
    they trusted it)."""
    session: str | None = None
    """Session name (generated when None)."""
    resume: bool = False
    """Continue `session`, or the most recent session of the root."""
    interactive: bool = False
    """A person answers approval prompts (otherwise `ask` fails closed)."""
    audit_required: bool = False
    """Stop the run when an audit record cannot be written."""
    audit_prompts: bool = False
    """Record whole prompts in the audit log."""
    context_summarize: bool = False
    """Summarize dropped context instead of only dropping it."""
    argv: list[str] = Field(default_factory=list)
    """Command line, for the audit record (secrets are redacted there)."""
    system_prompt: str | None = None
    """Replaces the default system prompt."""
    sandbox_warm_up: float | None = None
    """None: the container starts in `start()`. Seconds: it starts at the first tool call, or
    in the background that long into a run (0: as soon as the runner starts), whichever comes
    first, so a run whose model calls no tool never waits for a container."""
    project_instructions: bool = True
    """Add the root's AGENTS.md to the system prompt (as the repository's text, no permission)."""
    skills_for: str = "ask"
    """The command running (ask or review): picks the skills meant for it (docs/SKILLS.md)."""
    orchestrator: bool = False
    """Offer the `delegate` tool: sub-tasks go to child sessions (docs/DELEGATION.md)."""
    confirm_delegation: bool = True
    """A `delegate` call needs approval like any high-risk call (False: waived by the person)."""
    max_delegations: int = Field(DEFAULT_MAX_DELEGATIONS, ge=0)
    """Child sessions this session may start."""
    delegation_depth: int = Field(DEFAULT_DELEGATION_DEPTH, ge=1)
    """How deep delegation goes (1: children do not delegate)."""
    depth: int = 0
    """This session's depth: 0 for a session a person started, 1 for its children ..."""
    parent_session: str | None = None
    """The session that delegated to this one."""
    allow_host_flags: list[str] = Field(default_factory=list)
    """Hosts the sandbox may reach (--allow-host), besides the user config's `allow_hosts`."""
    network_flags: list[str] = Field(default_factory=list)
    """Network presets (--network pypi|npm|github), besides the user config's `network`."""


@dataclass(frozen=True)
class Approval:
    """A person's answer to an approval prompt."""

    approved: bool
    by: str = "user"
    """Who approved, for the audit: `user`, or `user:session` for a grant given earlier in the
    session ("always allow")."""
    reason: str = ""
    """Why not, in the person's words: the model is told, as the call's result."""


class Approver(Protocol):
    """Asks a person whether a call may run, showing them `preview` (what it will really do).

    It answers True/False, or an `Approval` that also says who approved or why not.
    """

    def __call__(
        self, tool: Tool, args: BaseModel, decision: Decision, preview: Preview
    ) -> bool | Approval:
        ...


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    settings = {k: v for k, v in options.items() if k in Settings.model_fields}
    run = {k: v for k, v in options.items() if k in RunOptions.model_fields}
    unknown = set(options) - set(settings) - set(run)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return settings, run


class Runner:
    """One session: a model, a sandbox, tools, policy, audit and the conversation."""

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

    @classmethod
    def build(
        cls,
        root: str | Path,
        *,
        tools: Iterable[Tool] = (),
        settings: Settings | None = None,
        hooks: HookBus | None = None,
        model: Model | str | None = None,
        approver: Approver | None = None,
        sandbox: Sandbox | SandboxFactory | None = None,
        basis: Basis | None = None,
        **options: Any,
    ) -> Runner:
        """A runner for `root`; `options` are Settings fields and RunOptions fields by name.

        `model` is a Model to use as is, or a model name (the Settings field of that name).
        `sandbox` is a Sandbox to use as is, or a factory called with the session's
        `SandboxConfig` (default: a `DockerSandbox`). `settings` and `basis` are what an
        earlier phase of the run (or the parent session) read at its start, used as they are:
        without them the environment, the user config, the policy, the skills and AGENTS.md
        are read now.
        """
        if isinstance(model, str):
            options, model = {**options, "model": model}, None
        setting_values, run_values = _split_options(options)
        merged = _settings(settings, setting_values)
        try:
            run = RunOptions(root=Path(root).expanduser().resolve(), **run_values)
        except ValidationError as exc:
            raise ConfigError(_first_error(exc)) from None
        if not run.root.is_dir():
            raise ConfigError(f"project root {run.root} is not a directory")
        if settings is None:
            check_outside_project(run.root,
                                  writable=not run.read_only and merged.workspace == "bind")
        if basis is not None and run.policy_file is not None:
            raise ConfigError("policy_file goes without a basis: the basis holds the policy")
        basis = basis or read_basis(run.root, merged, policy_file=run.policy_file,
                                    instructions=run.project_instructions)
        hooks = hooks or HookBus()
        delegate = Delegate() if run.orchestrator and run.depth < run.delegation_depth else None
        runner = cls(
            merged, run, model=model or build_model(merged, hooks=hooks),
            tools=_registry([*tools, *([delegate] if delegate else [])], run),
            policy=basis.policy.with_overrides(_overrides(run)), basis=basis,
            hooks=hooks, approver=approver, sandbox=sandbox,
        )
        if delegate is not None:
            delegate.spawn = runner.delegate
        return runner

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
        self.close()

    def start(self) -> None:
        """Start the model, the session, the container and the audit log."""
        if self.agent is not None:
            return
        durable.SYNCER.policy = self.settings.fsync
        try:
            self._load_skills()
            self._start_model()
            self._read_instructions()
            store, history = self._open_session()
            self.store = store
            if self.options.resume and self.options.orchestrator:  # the limit spans resumes
                self.children = child_sessions(self.options.root, store.name)
            if self.options.sandbox_warm_up is None or not self._may_start_later():
                self.sandbox = self._start_sandbox(store)
            else:
                self.sandbox = self._new_sandbox(store)
                self._lazy = LazySandbox(self.sandbox, lambda took: self._sandbox_started(took))
            self.audit = self._open_audit(store)
            self._announce(store)
            self._report_abandoned(store)
            for notice in [legacy_notice(self.options.root), *self.policy.notices]:
                if notice:
                    self.hooks.emit(NoticeEvent(message=notice))
            self.agent = self._agent(store, history)
            if self._lazy is not None and self.options.sandbox_warm_up == 0:
                self._lazy.warm_up(0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove the container and stop the model; the session and audit stay on disk.

        A session this runner created in which the model never replied (a wrong --host, an
        engine that failed) is removed: it holds nothing to resume, and `--resume` would pick it.
        """
        self.agent = None
        try:
            if self.sandbox is not None and self._collect_changes():
                (self._lazy or self.sandbox).stop()
        finally:
            self.sandbox, self._lazy = None, None
            self.model.close()
            self._drop_empty_session()
            if self.audit is not None:
                self.audit.close()
            if self.store is not None:
                self.store.close()
            for error in durable.SYNCER.flush():
                self._warn(f"a session or audit line may not be on disk yet: fsync: {error}")

    def _may_start_later(self) -> bool:
        """A bind mount on the default engine can start on first use; a copy, or an engine named
        by DOCKER_HOST, starts now, so a project too big to copy or a disk the engine cannot see
        is said before the model is asked."""
        return self.settings.workspace == "bind" and not os.environ.get("DOCKER_HOST")

    def _collect_changes(self) -> bool:
        """Keep a copy session's changes; whether the sandbox may go (it stays when they could
        not be collected, for a later --resume)."""
        if not isinstance(self.sandbox, CopyWorkspace) or self.options.read_only:
            return True
        if self._lazy is not None and not self._lazy.started:
            return True  # never started: nothing was copied, nothing changed
        try:
            self.changes = self.sandbox.finish()
        except SandboxAgentError as exc:
            self._warn(f"the changes of the copy could not be collected ({exc}); its container "
                       "is kept: resume the session to try again, or `sandbox-agent gc` "
                       "discards it")
            self.sandbox.detach()
            return False
        return True

    def _drop_empty_session(self) -> None:
        if self.store is None or self.options.resume or self._replies:
            return
        try:
            self.store.remove()
        except SandboxAgentError as exc:
            self._warn(f"could not remove the empty session {self.store.name}: {exc.message}")
        self.store = None

    def _count_reply(self, event: Event) -> None:
        self._replies += 1

    # -- running -----------------------------------------------------------------------------

    def run(self, query: str) -> RunResult:
        """Answer `query` in this session (starting it when needed)."""
        self.start()
        assert self.agent is not None
        if self._lazy is not None and self.options.sandbox_warm_up:
            self._lazy.warm_up(self.options.sandbox_warm_up)
        started = time.monotonic()
        try:
            result = self.agent.run(query)
        except BaseException as exc:
            self._finished(_status(exc), started, error=exc)
            raise
        status = "incomplete" if result.unfinished else "ok"
        self._finished(status, started, answer=result.answer, turns=result.turns)
        return result

    def _finished(self, status: str, started: float, *, error: BaseException | None = None,
                  answer: str | None = None, turns: int | None = None) -> None:
        if isinstance(error, SandboxAgentError):
            self.hooks.emit(ErrorEvent(message=str(error), error_type=type(error).__name__,
                                       exit_code=error.exit_code))
        self._record_end(status, turns, error)
        self.hooks.emit(CompleteEvent(status=status, answer=answer, turns=turns,
                                      duration_ms=round((time.monotonic() - started) * 1000)))

    def _report_abandoned(self, store: NdjsonSessionStore) -> None:
        """The last run of a resumed session died without its cleanup (SIGKILL, a crash, the
        machine): say so, in the audit too, with the calls it left without a result."""
        if self._abandoned is None:
            return
        calls = self._abandoned
        if self.audit is not None:
            self.audit.record("run_abandoned", calls_without_result=calls)
        what = (f"; {len(calls)} tool call(s) had no result ("
                f"{', '.join(c['tool'] for c in calls)})") if calls else ""
        self.hooks.emit(WarningEvent(message=f"the last run of session {store.name} ended "
                                             f"without its controller (killed or crashed){what}"))

    def settle(self) -> None:
        """After an interrupted run: each tool call left without a result gets one saying so,
        so the conversation stays valid for the next request (and in the session file)."""
        if self.agent is None:
            return
        messages = self.agent.messages
        answered = {m.tool_call_id for m in messages if m.role == "tool"}
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        for call in last.tool_calls if last is not None else []:
            if call.id not in answered:
                self.agent.add(Message.tool(call, INTERRUPTED_RESULT))

    def switch_model(self, name: str) -> None:
        """Go on with model `name` of the same provider (the conversation is kept)."""
        settings = self.settings.model_copy(update={"model": name})
        model = build_model(settings, hooks=self.hooks)
        old, self.model, self.settings = self.model, model, settings
        if self.agent is not None:
            self.agent.model = model
        old.close()
        if self.store is not None:
            self.store.record_event("model_switched", model=name)

    def _record_end(self, status: str, turns: int | None, error: BaseException | None) -> None:
        """A `run_end` event in the session, so listings tell failed runs from good ones."""
        if self.store is None:
            return
        reason = error.message if isinstance(error, SandboxAgentError) else None
        try:
            self.store.record_event("run_end", status=status, turns=turns, error=reason)
        except SandboxAgentError as exc:  # the run's own outcome matters more than this note
            self._warn(f"could not record the end of the run: {exc.message}")

    @property
    def session_name(self) -> str | None:
        """Name of the running session."""
        return self.store.name if self.store else None

    # -- wiring ------------------------------------------------------------------------------

    def _start_model(self) -> None:
        if isinstance(self.model, LoadingModel):  # the embedded one, with progress on the bus
            self.model.start(self._loading)

    def _loading(self, progress: LoadProgress) -> None:
        self.hooks.emit(ProgressEvent(message=progress.describe(), fraction=progress.fraction,
                                      phase=progress.phase))

    def _open_session(self) -> tuple[NdjsonSessionStore, list[Message]]:
        root, name = self.options.root, self.options.session
        if self.options.resume:
            store = NdjsonSessionStore.latest(root) if name is None else NdjsonSessionStore.open(
                root, name)
            contents = store.read()
            self._abandoned = abandoned_calls(contents)
            history = pair_tool_results(contents.messages)
            for warning in store.warnings:
                self.hooks.emit(WarningEvent(message=warning))
            store.record_event("resumed", model=self.model.name)
            return store, history
        if name is not None and name in session_names(root):
            raise UserError(f"session {name!r} already exists",
                            fix=f"continue it with --session {name} --resume, or pick a new name")
        store = NdjsonSessionStore.create(
            root, name=name, model=self.model.name, provider=self.settings.provider,
            image=self.settings.image, mount_mode=self._mount_mode(),
        )
        if self.options.parent_session:
            store.update_header(parent_session=self.options.parent_session)
        return store, []

    @property
    def sandbox_id(self) -> str:
        """The session's sandbox id (its container is `sandbox-agent-<id>`)."""
        return self._sandbox_id

    @property
    def workspace_mode(self) -> str:
        """bind or copy."""
        return self._workspace_mode

    def clear(self) -> None:
        """Forget the conversation (the REPL's /clear): same session and container; a resume
        starts after it too."""
        if self.agent is not None and self.store is not None:
            self.agent.messages.clear()
            self.store.record_event(CONTEXT_CLEARED)

    def compact(self) -> str | None:
        """Replace the conversation by the model's summary of it (the REPL's /compact); the
        summary, or None when there was nothing to compact."""
        if self.agent is None or self.store is None or not self.agent.messages:
            return None
        summary = self._summarize(self.agent.messages)
        self.agent.messages[:] = [Message.system(COMPACTED_NOTE + summary)]
        self.store.record_event(CONTEXT_COMPACTED, summary=summary)
        return summary

    def attach_mentions(self, query: str) -> str:
        """`query` with the files it mentions as `@path` attached, read through the sandbox
        (executor/attach.py); ConfigError when one cannot be read."""
        from executor.attach import with_attachments

        sandbox = self._lazy or self.sandbox
        if sandbox is None or "@" not in query:
            return query
        attached, paths = with_attachments(
            query, lambda path: sandbox.call("read_file", {"path": path}))
        for path in paths:
            self.hooks.emit(NoticeEvent(message=f"attached {path}"))
        return attached

    @property
    def sandbox_started(self) -> bool:
        """Whether the container is up (with `sandbox_warm_up`, it may not be yet)."""
        return self.sandbox is not None and (self._lazy is None or self._lazy.started)

    def _new_sandbox(self, store: NdjsonSessionStore) -> Sandbox:
        """The session's sandbox, not started: the backend, wrapped for its workspace.

        A Docker backend checks the engine and the image now (one ping, one lookup), so a
        missing one is said before the model is asked even when the container starts later.
        """
        header = store.header
        self._sandbox_id = header.sandbox_id or secrets.token_hex(6)  # the store names it
        self._workspace_mode = workspace = self._workspace(header)
        put_back = self._put_back(store.name) if workspace == "copy" else {}
        config = self._sandbox_config(self._sandbox_id, header.image_digest, workspace, put_back)
        backend = self._backend_for(config)
        if isinstance(backend, DockerSandbox):
            backend.preflight()
        return self._wrap(backend, store.name, workspace, set(put_back))

    def _start_sandbox(self, store: NdjsonSessionStore) -> Sandbox:
        sandbox = self.sandbox = self._new_sandbox(store)
        sandbox.start()
        self._record_sandbox(sandbox, store)
        return sandbox

    def _record_sandbox(self, sandbox: Sandbox, store: NdjsonSessionStore) -> None:
        info = sandbox.info
        if self.options.resume:
            how = "re-attached to" if getattr(sandbox, "reattached", False) else "started a new"
            self.hooks.emit(NoticeEvent(message=f"resumed session {store.name}: {how} container "
                                            f"{info.container_name}"))
        store.update_header(container=info.container_name, sandbox_id=self._sandbox_id,
                            image_digest=info.image_digest, mount_mode=info.mount_mode,
                            workspace=self._workspace_mode)

    def _workspace(self, header: SessionHeader) -> str:
        """The configured workspace; a resumed session keeps the one it started with."""
        recorded = header.workspace if self.options.resume else ""
        if recorded and recorded != self.settings.workspace:
            self.hooks.emit(NoticeEvent(message=f"session {header.name} runs in its "
                                            f"{recorded} workspace"))
        return recorded or self.settings.workspace

    def _put_back(self, session: str) -> dict[str, list[Any] | None]:
        """A resumed copy session's pending changes, to put back into a new copy."""
        changeset = load_changes(self.options.root, session) if self.options.resume else None
        if changeset is None:
            return {}
        return {c.path: c.after.row() if c.after else None
                for c in pending(self.options.root, changeset)}

    def _backend_for(self, config: SandboxConfig) -> Sandbox:
        """The sandbox given, one from the factory given, or a DockerSandbox."""
        if self.backend is None:
            prompt = getattr(self.approver, "host", None) if self.options.interactive else None
            hooks = (egress_hooks(self.hooks, prompt, self._refusals)
                     if config.egress is not None else None)
            loader = ArchiveLoader() if config.workspace == "copy" else None
            return DockerSandbox(config, warn=self._warn, egress_hooks=hooks, copy_loader=loader)
        if _is_sandbox(self.backend):
            return self.backend  # type: ignore[return-value]
        return self.backend(config)  # type: ignore[operator]

    def _wrap(self, backend: Sandbox, session: str, workspace: str, put_back: set[str]
              ) -> Sandbox:
        """Copy sessions keep a base and collect changes; bind sessions journal writes."""
        root = self.options.root
        if self.options.read_only:
            return backend  # nothing to journal, nothing comes back
        if workspace == "copy":
            if not callable(getattr(backend, "copy_manifest", None)):
                raise ConfigError("this sandbox backend cannot run a copy workspace",
                                  fix="use --workspace bind")
            return CopyWorkspace(backend, root=root, session=session,  # type: ignore[arg-type]
                                 put_back=put_back)
        return JournaledSandbox(backend, root=root, session=session)

    def _sandbox_started(self, took: float) -> None:
        """A lazily started sandbox is up: the session header and a `sandbox_start` event."""
        assert self.sandbox is not None and self.store is not None
        self._record_sandbox(self.sandbox, self.store)
        info = self.sandbox.info
        self.hooks.emit(SandboxStartEvent(
            container_id=info.container_id, container_name=info.container_name, image=info.image,
            image_digest=info.image_digest, mount_mode=info.mount_mode, network=info.network,
            user=info.user, workspace=info.workspace, runtime=info.runtime, engine=info.engine,
            reattached=getattr(self.sandbox, "reattached", False), duration_ms=round(took * 1000)))

    def _sandbox_config(self, session_id: str, digest: str, workspace: str = "bind",
                        put_back: dict[str, list[Any] | None] | None = None) -> SandboxConfig:
        """On resume, the very image the session started with, falling back to the configured."""
        s = self.settings
        env = sandbox_environment(s.env_allow, secret_names=[s.api_key_env])
        resumed = self.options.resume and digest
        return SandboxConfig(
            root=self.options.root, session_id=session_id, image=digest if resumed else s.image,
            fallback_image=s.image if resumed else None,
            read_only=self.options.read_only, memory=s.memory, pids_limit=s.pids_limit,
            cpus=s.cpus, tmp_size=s.tmp_size, tool_timeout=s.tool_timeout, env=env,
            allow_git_writes=s.allow_git_writes, disk_budget=s.disk_budget, runtime=s.runtime,
            workspace=workspace, copy_limit=s.copy_limit, copy_max_files=s.copy_max_files,
            copy_exclude=s.copy_exclude, copy_storage=s.copy_storage,
            copy_overlay=put_back or {},
            blob_dir=BlobStore.for_root(self.options.root).directory if put_back else None,
            egress=self.egress,
        )

    def _open_audit(self, store: NdjsonSessionStore) -> AuditLog | None:
        if not self.settings.audit:
            return None
        audit = AuditLog.for_root(
            self.options.root, session=store.name, audit_dir=self.settings.audit_dir,
            required=self.options.audit_required,
            max_result_bytes=self.settings.audit_max_result_bytes,
            audit_prompts=self.options.audit_prompts,
            redactor=Redactor.from_environ(extra_names=[self.settings.api_key_env]),
            on_warning=self._warn,
        )
        audit.attach(self.hooks)
        return audit

    def _announce(self, store: NdjsonSessionStore) -> None:
        """`run_start`; the container's identity is in it, or in `sandbox_start` once it runs."""
        assert self.sandbox is not None
        info = self.sandbox.info if self._lazy is None else None
        self.hooks.emit(RunStartEvent(
            root=str(self.options.root), provider=self.settings.provider,
            model=self.model.name, image=info.image if info else self.settings.image,
            image_digest=info.image_digest if info else None,
            container_id=info.container_id if info else None, mount_mode=self._mount_mode(),
            runtime=info.runtime if info else self.settings.runtime,
            engine=info.engine if info else None,
            workspace=self._workspace_mode, policy_source=self.policy.source,
            argv=self.options.argv,
            instructions=({"source": self.instructions.source, "sha256": self.instructions.sha256}
                          if self.instructions else None),
            skills=[skill.record() for skill in self.skills.skills],
            parent_session=self.options.parent_session or None,
            user=getpass.getuser(), host=socket.gethostname(), session=store.name,
            tools=self.tools.names(),
        ))

    def _agent(self, store: NdjsonSessionStore, history: list[Message]) -> Agent:
        assert self.sandbox is not None
        used: Sandbox = self._lazy or self.sandbox
        if self.egress is not None:
            used = NotedSandbox(used, self._refusals)
        context = ToolContext(sandbox=used, root=self.options.root,
                              read_only=self.options.read_only, session_id=store.name)
        agent = Agent(
            model=self.model, tools=self.tools, context=context, authorize=self._authorize,
            system_prompt=self._system_prompt(), hooks=self.hooks, sink=store,
            max_turns=self.settings.max_turns, messages=history, coach=self._coach(),
        )
        agent.fitter = self._window(agent.specs)
        return agent

    def _coach(self) -> Coach | None:
        """Weak models, which the json protocols are for, get a coach; capable ones need none."""
        return Coach() if uses_json(self.model.tool_protocol) else None

    def _system_prompt(self) -> str:
        prompt = self.options.system_prompt or SYSTEM_PROMPT
        prompt += READ_ONLY_NOTE if self.options.read_only else ""
        prompt += prompt_note(self.egress)
        blocks = [prompt, self.skills.prompt(), self.instructions.prompt() if self.instructions
                  else ""]
        return "\n\n".join(block for block in blocks if block)

    def _load_skills(self) -> None:
        """The prompt skills, chosen from those read at the start (a bad --skills-include
        fails before anything starts); announced with their hashes, and a notice for each
        project skill left out."""
        s = self.settings
        self.skills = self.basis.skills.choose(self.options.skills_for, s.skills_include,
                                               s.skills_exclude)
        for notice in self.skills.notices:
            self.hooks.emit(NoticeEvent(message=notice))
        if self.skills.skills:
            self.hooks.emit(SkillsEvent(skills=[
                {**skill.record(), "description": skill.description,
                 "text": skill.text if skill.source == "project" else None}
                for skill in self.skills.skills]))

    def _read_instructions(self) -> None:
        """AGENTS.md as read at the start, announced (with its text, for --trace) when there
        is one."""
        if not self.options.project_instructions:
            return
        self.instructions = self.basis.instructions
        if self.instructions is not None:
            i = self.instructions
            self.hooks.emit(InstructionsEvent(source=i.source, bytes=i.bytes,
                                              truncated=i.truncated, sha256=i.sha256, text=i.text))

    def _window(self, specs: list[ToolSpec]) -> ContextWindow:
        budget = resolve_budget(self.settings.max_tokens, self.model.context_length())
        summarizer = CachedSummarizer(self._summarize) if self.options.context_summarize else None
        tokenizer = self.model.count_tokens if isinstance(self.model, TokenizingModel) else None
        return ContextWindow(budget=budget, tools=specs, summarizer=summarizer,
                             counter=counter_for(tokenizer),
                             protocol=self.model.tool_protocol)

    def _summarize(self, segment: list[Message]) -> str:
        transcript = "\n".join(f"{m.role}: {m.content}"[:2000] for m in segment)
        window = self.agent.fitter if self.agent is not None else None
        if isinstance(window, ContextWindow):  # the summary request must fit the window too
            transcript = truncate_text(transcript, window.room() // 2, window.counter)
        reply = self.model.chat([Message.system(SUMMARY_PROMPT), Message.user(transcript)], [])
        return reply.message.content

    def _warn(self, message: str) -> None:
        self.hooks.emit(WarningEvent(message=message))

    def _mount_mode(self) -> str:
        return "ro" if self.options.read_only else "rw"

    # -- approvals ---------------------------------------------------------------------------

    def _authorize(self, tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
        waived = tool.name == DELEGATE_TOOL and not self.options.confirm_delegation
        decision = self.policy.decide(tool, args.model_dump(exclude_none=True),
                                      interactive=self.options.interactive or waived)
        if waived and decision.needs_approval:  # the person said so; a policy deny still wins
            decision = decision.approve("--no-confirm-delegation")
        guard: Mapping[str, Any] = {}
        if decision.needs_approval:
            answer, guard = self._ask(tool, args, decision)
            decision = decision.approve(answer.by) if answer.approved else _declined(
                decision, answer)
        return Authorization(decision.allowed, decision.rule, decision.approved_by,
                             decision.reason or "", host_args=guard if decision.allowed else {})

    def _ask(
        self, tool: Tool, args: BaseModel, decision: Decision
    ) -> tuple[Approval, Mapping[str, Any]]:
        """The person's answer, and the guard of the preview they answered (the write they saw)."""
        if self.approver is None:
            return Approval(False), {}
        preview = self._preview(tool, args)
        answer = self.approver(tool, args, decision, preview)
        return (answer if isinstance(answer, Approval) else Approval(bool(answer))), \
            preview.host_args

    def _preview(self, tool: Tool, args: BaseModel) -> Preview:
        """What the person is shown; a custom tool's broken `preview` falls back to its name."""
        assert self.agent is not None
        try:
            return tool.preview(args, self.agent.context)
        except SandboxAgentError:
            raise  # the sandbox failed: the run cannot go on
        except Exception as exc:
            self._warn(f"tool {tool.name} could not preview its call: {exc!r}")
            return Preview(Tool.describe(tool, args), error=f"no preview: {exc}")


    # -- delegation --------------------------------------------------------------------------

    def delegate(self, args: DelegateArgs) -> ToolResult:
        """Run `args.task` in a child session and return its answer (the `delegate` tool)."""
        if len(self.children) >= self.options.max_delegations:
            return ToolResult.error(f"Delegation refused: this session may start at most "
                                    f"{self.options.max_delegations} child sessions.")
        read_only = (self.options.read_only or not args.write
                     or self._workspace_mode == "copy")  # a child's copy is not the parent's
        child = self._child(read_only)
        try:
            with child:
                self.children.append(child.session_name or "?")
                self.hooks.emit(NoticeEvent(
                    message=f"delegated to session {child.session_name} "
                            f"({'read-only' if read_only else 'read-write'})"))
                result = child.run(args.task)
        except SandboxAgentError as exc:
            return ToolResult.error(f"The child session failed: {exc.message}",
                                    child_session=child.session_name)
        return ToolResult(ok=True, output=result.answer or "(the child gave no answer)",
                          meta={"child_session": child.session_name, "read_only": read_only,
                                "turns": result.turns})

    def _child(self, read_only: bool) -> Runner:
        """A child runner: this session's settings, basis (policy, skills, instructions, as read
        at the start: nothing is read again), model, approvals and limits, one level down."""
        o = self.options
        child = Runner.build(
            o.root, settings=self.settings, basis=self.basis, model=BorrowedModel(self.model),
            approver=self.approver, hooks=HookBus(), read_only=read_only,
            sandbox=None if _is_sandbox(self.backend) else self.backend,  # a factory: its own
            yes=o.yes, auto_edit=o.auto_edit, interactive=o.interactive, deny_tools=o.deny_tools,
            deny_prefixes=o.deny_prefixes, deny_commands=o.deny_commands,
            system_prompt=o.system_prompt, skills_for=o.skills_for,
            audit_required=o.audit_required,
            audit_prompts=o.audit_prompts, argv=o.argv, project_instructions=o.project_instructions,
            orchestrator=o.orchestrator, confirm_delegation=o.confirm_delegation,
            max_delegations=o.max_delegations, delegation_depth=o.delegation_depth,
            depth=o.depth + 1, parent_session=self.session_name,
            allow_host_flags=o.allow_host_flags, network_flags=o.network_flags,
        )

        def relay(event: Event) -> None:
            self.hooks.emit(ChildEvent(session=child.session_name or "child", event=event.kind,
                                       payload=event.data))

        child.hooks.subscribe(relay, *RELAYED)
        return child


SUMMARY_PROMPT = (
    "Summarize this earlier part of a coding session in a few sentences: what was asked, which "
    "files were read or changed, what was found, and what remains to do."
)


def _declined(decision: Decision, answer: Approval) -> Decision:
    """The decision declined at the terminal; the person's reason (if any) goes to the model."""
    declined = decision.decline(answer.by)
    if not answer.reason:
        return declined
    return replace(declined, reason=f"{declined.reason}, who said: {answer.reason}")

def _settings(base: Settings | None, values: dict[str, Any]) -> Settings:
    """`values` over `base` (nothing is read again); without a base, over the environment,
    the user config and the defaults."""
    if base is None:
        return load_settings(values)
    try:
        return derive_settings(base, values)
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


def _registry(extra: Iterable[Tool], run: RunOptions) -> ToolRegistry:
    registry = default_registry()
    for tool in extra:
        registry.register(tool)
    return registry.filtered(read_only=run.read_only, deny=run.deny_tools,
                             deny_prefixes=run.deny_prefixes)


def _overrides(run: RunOptions) -> PolicyOverrides:
    return PolicyOverrides(
        yes=run.yes, deny_tools=tuple(run.deny_tools), deny_prefixes=tuple(run.deny_prefixes),
        deny_commands=tuple(run.deny_commands), read_only=run.read_only,
        auto_edit=run.auto_edit,
    )


def _is_sandbox(value: object) -> bool:
    """A Sandbox rather than a factory (checked on the class: `info` may not be ready yet)."""
    return all(callable(getattr(type(value), name, None)) for name in ("start", "stop", "call"))


def _status(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, MaxTurnsExceeded):
        return "max_turns"
    return "error"


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"invalid value for {where}: {err['msg']}"

