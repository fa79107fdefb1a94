"""What the model is started with and told, and what the run announces: the model's loading,
skills, AGENTS.md, the system prompt, the context window, the audit log and `run_start`."""

from __future__ import annotations

import getpass
import socket
from typing import TYPE_CHECKING

from executor.audit import AuditLog
from executor.coach import Coach
from executor.context import CachedSummarizer, ContextWindow, counter_for, resolve_budget
from executor.hooks import (
    InstructionsEvent,
    NoticeEvent,
    ProgressEvent,
    RunStartEvent,
    SkillsEvent,
)
from executor.messages import ToolSpec
from executor.models.toolproto import uses_json
from executor.network.session import prompt_note
from executor.protocols import LoadingModel, TokenizingModel
from executor.redact import Redactor
from executor.runner.options import READ_ONLY_NOTE, SYSTEM_PROMPT
from executor.runner.state import RunnerState
from executor.session import NdjsonSessionStore
from executor.tools.builtin import read_page

if TYPE_CHECKING:
    from executor.protocols import LoadProgress


class ModelWiring(RunnerState):
    """The model, its prompt and window, the audit log and the run's announcement."""

    def _start_model(self) -> None:
        if isinstance(self.model, LoadingModel):  # the embedded one, with progress on the bus
            self.model.start(self._loading)

    def _loading(self, progress: LoadProgress) -> None:
        self.hooks.emit(ProgressEvent(message=progress.describe(), fraction=progress.fraction,
                                      phase=progress.phase))

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

    def _system_prompt(self) -> str:
        prompt = self.options.system_prompt or SYSTEM_PROMPT
        prompt += READ_ONLY_NOTE if self.options.read_only else ""
        prompt += prompt_note(self.egress)
        blocks = [prompt, self.skills.prompt(), self.instructions.prompt() if self.instructions
                  else ""]
        return "\n\n".join(block for block in blocks if block)

    def _read_page(self) -> int | None:
        """The json protocols' models (weak ones, small windows) read a file a page at a time:
        a 784-line module read whole filled the window and was cut in the middle, where the
        lines the model had searched for were."""
        if not uses_json(self.model.tool_protocol):
            return None
        return read_page(resolve_budget(self.settings.max_tokens, self.model.context_length()))

    def _coach(self) -> Coach | None:
        """Weak models, which the json protocols are for, get a coach; capable ones need none."""
        return Coach() if uses_json(self.model.tool_protocol) else None

    def _window(self, specs: list[ToolSpec]) -> ContextWindow:
        budget = resolve_budget(self.settings.max_tokens, self.model.context_length())
        summarizer = CachedSummarizer(self._summarize) if self.options.context_summarize else None
        tokenizer = self.model.count_tokens if isinstance(self.model, TokenizingModel) else None
        return ContextWindow(budget=budget, tools=specs, summarizer=summarizer,
                             counter=counter_for(tokenizer),
                             protocol=self.model.tool_protocol)

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
            sandbox_adopted=info.adopted if info else None,
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
