"""`Runner`: one session, built from its parts (executor/runner/), started, run and closed;
it delegates sub-tasks to child runners."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from executor import durable
from executor.agent import Agent, RunResult
from executor.basis import Basis, read_basis
from executor.config import Settings
from executor.delegation import RELAYED, BorrowedModel, Delegate, DelegateArgs
from executor.errors import ConfigError, MaxTurnsExceeded, SandboxAgentError
from executor.hooks import ChildEvent, CompleteEvent, ErrorEvent, Event, HookBus, NoticeEvent
from executor.lifecycle import StartStop
from executor.messages import Message, ToolResult
from executor.models import build_model
from executor.network.notes import NotedSandbox
from executor.protocols import Model, Sandbox
from executor.runner.approvals import Approvals
from executor.runner.options import (
    Approver,
    RunOptions,
    SandboxFactory,
    first_error,
    is_sandbox,
    overrides_for,
    registry_for,
    settings_over,
    split_options,
)
from executor.runner.sandboxes import SandboxWiring
from executor.runner.sessions import SessionKeeping
from executor.runner.wiring import ModelWiring
from executor.sandbox.lazy import LazySandbox
from executor.session import NdjsonSessionStore, child_sessions
from executor.state import legacy_notice
from executor.tools import Tool, ToolContext
from executor.userconfig import check_outside_project


def _status(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, MaxTurnsExceeded):
        return "max_turns"
    return "error"


class Runner(StartStop, SandboxWiring, SessionKeeping, ModelWiring, Approvals):
    """One session: a model, a sandbox, tools, policy, audit and the conversation."""

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
        setting_values, run_values = split_options(options)
        merged = settings_over(settings, setting_values)
        try:
            run = RunOptions(root=Path(root).expanduser().resolve(), **run_values)
        except ValidationError as exc:
            raise ConfigError(first_error(exc)) from None
        if not run.root.is_dir():
            raise ConfigError(f"project root {run.root} is not a directory",
                              fix="pass an existing --root (the project's directory)")
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
            tools=registry_for([*tools, *([delegate] if delegate else [])], run),
            policy=basis.policy.with_overrides(overrides_for(run)), basis=basis,
            hooks=hooks, approver=approver, sandbox=sandbox,
        )
        if delegate is not None:
            delegate.spawn = runner.delegate
        return runner

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
            self._close_standbys()
            self.model.close()
            self._drop_empty_session()
            if self.audit is not None:
                self.audit.close()
            if self.store is not None:
                self.store.close()
            for error in durable.SYNCER.flush():
                self._warn(f"a session or audit line may not be on disk yet: fsync: {error}")

    stop = close  # the name a `with` block ends by (lifecycle.StartStop)

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
        status = ("incomplete" if result.unfinished
                  else "truncated" if result.truncated else "ok")
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

    def _agent(self, store: NdjsonSessionStore, history: list[Message]) -> Agent:
        assert self.sandbox is not None
        used: Sandbox = self._lazy or self.sandbox
        if self.egress is not None:
            used = NotedSandbox(used, self._refusals)
        context = ToolContext(sandbox=used, root=self.options.root,
                              read_only=self.options.read_only, session_id=store.name,
                              read_page=self._read_page())
        agent = Agent(
            model=self.model, tools=self.tools, context=context, authorize=self._authorize,
            system_prompt=self._system_prompt(), hooks=self.hooks, sink=store,
            max_turns=self.settings.max_turns, messages=history, coach=self._coach(),
        )
        agent.fitter = self._window(agent.specs)
        return agent

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
            sandbox=None if is_sandbox(self.backend) else self.backend,  # a factory: its own
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
