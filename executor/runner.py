"""The library facade: `Runner.build(...)` wires the layers of DESIGN.md together.

    with Runner.build(root="./proj", provider="ollama", model="qwen2.5-coder:7b") as runner:
        runner.hooks.subscribe(print, "tool_call")
        result = runner.run("What does main.py do?")
        print(result.answer)

`build` does no I/O beyond reading the policy file; the model server, the container, the
session file and the audit log are started by `start()` (or the first `run`) and the
container is removed by `close()` (or leaving the `with` block).
"""

from __future__ import annotations

import getpass
import secrets
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from pydantic import BaseModel, Field, ValidationError

from executor.agent import Agent, Authorization, RunResult
from executor.audit import AuditLog
from executor.coach import Coach
from executor.config import Settings
from executor.context import CachedSummarizer, ContextWindow, pair_tool_results, resolve_budget
from executor.errors import ConfigError, MaxTurnsExceeded, SandboxAgentError, UserError
from executor.hooks import HookBus
from executor.messages import Message, ToolCall, ToolSpec
from executor.models import build_model
from executor.models.toolproto import uses_json
from executor.policy import Decision, Policy, PolicyOverrides, load_policy
from executor.protocols import Model
from executor.redact import Redactor
from executor.sandbox.docker import DockerSandbox, SandboxConfig, container_name
from executor.sandbox.environment import sandbox_environment
from executor.session import NdjsonSessionStore, session_names
from executor.state import legacy_notice
from executor.tools import Preview, Tool, ToolContext, ToolRegistry, default_registry

SYSTEM_PROMPT = (
    "You are a coding agent working on the project in /workspace; tool paths are relative to "
    "it. Look at files before changing them, make small exact edits, and run commands to check "
    "your work (python3; there is no network). When you are done, answer briefly with what you "
    "did or found."
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
    deny_tools: list[str] = Field(default_factory=list)
    """Tools removed before the model sees them (and denied if called)."""
    deny_prefixes: list[str] = Field(default_factory=list)
    """Tools whose name starts with one of these are removed and denied."""
    deny_commands: list[str] = Field(default_factory=list)
    """Shell commands starting with one of these are denied."""
    policy_file: Path | None = None
    """A policy TOML the person names (default: the project's, if they trusted it)."""
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


class Approver(Protocol):
    """Asks a person whether a call may run, showing them `preview` (what it will really do)."""

    def __call__(self, tool: Tool, args: BaseModel, decision: Decision, preview: Preview) -> bool:
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
        hooks: HookBus,
        approver: Approver | None = None,
    ) -> None:
        self.settings, self.options = settings, options
        self.model, self.tools, self.policy, self.hooks = model, tools, policy, hooks
        self.approver = approver
        self.sandbox: DockerSandbox | None = None
        self.store: NdjsonSessionStore | None = None
        self.audit: AuditLog | None = None
        self.agent: Agent | None = None

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
        **options: Any,
    ) -> Runner:
        """A runner for `root`; `options` are Settings fields and RunOptions fields by name.

        `model` is a Model to use as is, or a model name (the Settings field of that name).
        """
        if isinstance(model, str):
            options, model = {**options, "model": model}, None
        setting_values, run_values = _split_options(options)
        try:
            base = (settings or Settings()).model_dump()
            merged = Settings.model_validate({**base, **setting_values})
            run = RunOptions(root=Path(root).expanduser().resolve(), **run_values)
        except ValidationError as exc:
            raise ConfigError(_first_error(exc)) from None
        if not run.root.is_dir():
            raise ConfigError(f"project root {run.root} is not a directory")
        hooks = hooks or HookBus()
        return cls(
            merged, run, model=model or build_model(merged, hooks=hooks),
            tools=_registry(tools, run), policy=load_policy(run.root, run.policy_file,
                                                            _overrides(run)),
            hooks=hooks, approver=approver,
        )

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
        try:
            self._start_model()
            store, history = self._open_session()
            self.store = store
            self.sandbox = self._start_sandbox(store)
            self.audit = self._open_audit(store)
            self._announce(store)
            for notice in [legacy_notice(self.options.root), *self.policy.notices]:
                if notice:
                    self.hooks.emit("notice", message=notice)
            self.agent = self._agent(store, history)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove the container and stop the model; the session and audit stay on disk."""
        self.agent = None
        try:
            if self.sandbox is not None:
                self.sandbox.stop()
        finally:
            self.sandbox = None
            self.model.close()

    # -- running -----------------------------------------------------------------------------

    def run(self, query: str) -> RunResult:
        """Answer `query` in this session (starting it when needed)."""
        self.start()
        assert self.agent is not None
        started = time.monotonic()
        try:
            result = self.agent.run(query)
        except BaseException as exc:
            self._finished(_status(exc), started, error=exc)
            raise
        self._finished("ok", started, answer=result.answer, turns=result.turns)
        return result

    def _finished(self, status: str, started: float, *, error: BaseException | None = None,
                  answer: str | None = None, turns: int | None = None) -> None:
        if isinstance(error, SandboxAgentError):
            self.hooks.emit("error", message=str(error), error_type=type(error).__name__,
                            exit_code=error.exit_code)
        self.hooks.emit("complete", status=status, answer=answer, turns=turns,
                        duration_ms=round((time.monotonic() - started) * 1000))

    @property
    def session_name(self) -> str | None:
        """Name of the running session."""
        return self.store.name if self.store else None

    # -- wiring ------------------------------------------------------------------------------

    def _start_model(self) -> None:
        start = getattr(self.model, "start", None)
        if callable(start):  # the embedded model loads here, with progress on the bus
            start(lambda p: self.hooks.emit("progress", message=p.describe(),
                                            fraction=p.fraction, phase=p.phase))

    def _open_session(self) -> tuple[NdjsonSessionStore, list[Message]]:
        root, name = self.options.root, self.options.session
        if self.options.resume:
            store = NdjsonSessionStore.latest(root) if name is None else NdjsonSessionStore.open(
                root, name)
            history = pair_tool_results(store.load())
            for warning in store.warnings:
                self.hooks.emit("warning", message=warning)
            store.record_event("resumed", model=self.model.name)
            return store, history
        if name is not None and name in session_names(root):
            raise UserError(f"session {name!r} already exists",
                            fix=f"continue it with --session {name} --resume, or pick a new name")
        store = NdjsonSessionStore.create(
            root, name=name, model=self.model.name, provider=self.settings.provider,
            image=self.settings.image, mount_mode=self._mount_mode(),
        )
        return store, []

    def _start_sandbox(self, store: NdjsonSessionStore) -> DockerSandbox:
        header = store.header
        session_id = _sandbox_id(header.sandbox_id, header.container)
        sandbox = DockerSandbox(self._sandbox_config(session_id, header.image_digest),
                                warn=self._warn)
        self.sandbox = sandbox
        sandbox.start()
        if self.options.resume:
            how = "re-attached to" if sandbox.reattached else "started a new"
            self.hooks.emit("notice", message=f"resumed session {store.name}: {how} container "
                                              f"{sandbox.name}")
        store.update_header(container=sandbox.name, sandbox_id=session_id,
                            image_digest=sandbox.info.image_digest,
                            mount_mode=sandbox.info.mount_mode)
        return sandbox

    def _sandbox_config(self, session_id: str, digest: str) -> SandboxConfig:
        """On resume, the very image the session started with, falling back to the configured."""
        s = self.settings
        env = sandbox_environment(s.env_allow, secret_names=[s.api_key_env])
        resumed = self.options.resume and digest
        return SandboxConfig(
            root=self.options.root, session_id=session_id, image=digest if resumed else s.image,
            fallback_image=s.image if resumed else None,
            read_only=self.options.read_only, memory=s.memory, pids_limit=s.pids_limit,
            cpus=s.cpus, tmp_size=s.tmp_size, tool_timeout=s.tool_timeout, env=env,
            allow_git_writes=s.allow_git_writes, disk_budget=s.disk_budget,
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
        assert self.sandbox is not None
        info = self.sandbox.info
        self.hooks.emit(
            "run_start", root=str(self.options.root), provider=self.settings.provider,
            model=self.model.name, image=info.image, image_digest=info.image_digest,
            container_id=info.container_id, mount_mode=info.mount_mode,
            policy_source=self.policy.source, argv=self.options.argv,
            user=getpass.getuser(), host=socket.gethostname(), session=store.name,
            tools=self.tools.names(),
        )

    def _agent(self, store: NdjsonSessionStore, history: list[Message]) -> Agent:
        assert self.sandbox is not None
        context = ToolContext(sandbox=self.sandbox, root=self.options.root,
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
        return Coach() if uses_json(getattr(self.model, "tool_protocol", "native")) else None

    def _system_prompt(self) -> str:
        prompt = self.options.system_prompt or SYSTEM_PROMPT
        return prompt + (READ_ONLY_NOTE if self.options.read_only else "")

    def _window(self, specs: list[ToolSpec]) -> ContextWindow:
        budget = resolve_budget(self.settings.max_tokens, self.model.context_length())
        summarizer = CachedSummarizer(self._summarize) if self.options.context_summarize else None
        return ContextWindow(budget=budget, tools=specs, summarizer=summarizer)

    def _summarize(self, segment: list[Message]) -> str:
        transcript = "\n".join(f"{m.role}: {m.content}"[:2000] for m in segment)
        reply = self.model.chat([Message.system(SUMMARY_PROMPT), Message.user(transcript)], [])
        return reply.message.content

    def _warn(self, message: str) -> None:
        self.hooks.emit("warning", message=message)

    def _mount_mode(self) -> str:
        return "ro" if self.options.read_only else "rw"

    # -- approvals ---------------------------------------------------------------------------

    def _authorize(self, tool: Tool, args: BaseModel, call: ToolCall) -> Authorization:
        decision = self.policy.decide(tool, args.model_dump(exclude_none=True),
                                      interactive=self.options.interactive)
        guard: Mapping[str, Any] = {}
        if decision.needs_approval:
            approved, guard = self._ask(tool, args, decision)
            decision = decision.approve("user") if approved else decision.decline("user")
        return Authorization(decision.allowed, decision.rule, decision.approved_by,
                             decision.reason or "", host_args=guard if decision.allowed else {})

    def _ask(
        self, tool: Tool, args: BaseModel, decision: Decision
    ) -> tuple[bool, Mapping[str, Any]]:
        """The person's answer, and the guard of the preview they answered (the write they saw)."""
        if self.approver is None:
            return False, {}
        preview = self._preview(tool, args)
        return self.approver(tool, args, decision, preview), preview.host_args

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


SUMMARY_PROMPT = (
    "Summarize this earlier part of a coding session in a few sentences: what was asked, which "
    "files were read or changed, what was found, and what remains to do."
)


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
    )


def _sandbox_id(recorded: str, container: str) -> str:
    """The session's sandbox id as recorded (validated on load), else a new one."""
    prefix = container_name("")
    if recorded:
        return recorded
    if container.startswith(prefix):  # sessions from before sandbox_id was recorded
        return container[len(prefix):]
    return secrets.token_hex(6)


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

