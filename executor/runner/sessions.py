"""The session file of a run: opened or resumed, its end recorded, an empty one removed, and
the conversation kept valid (settle, clear, compact, switch_model)."""

from __future__ import annotations

from executor.context import INTERRUPTED_RESULT, pair_tool_results
from executor.errors import SandboxAgentError, UserError
from executor.hooks import WarningEvent
from executor.messages import Message
from executor.models import build_model
from executor.runner.state import RunnerState
from executor.session import (
    COMPACTED_NOTE,
    CONTEXT_CLEARED,
    CONTEXT_COMPACTED,
    NdjsonSessionStore,
    abandoned_calls,
    session_names,
)


class SessionKeeping(RunnerState):
    """Opening, resuming and keeping the session and its conversation."""

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

    def _drop_empty_session(self) -> None:
        if self.store is None or self.options.resume or self._replies:
            return
        try:
            self.store.remove()
        except SandboxAgentError as exc:
            self._warn(f"could not remove the empty session {self.store.name}: {exc.message}")
        self.store = None

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

    def _record_end(self, status: str, turns: int | None, error: BaseException | None) -> None:
        """A `run_end` event in the session, so listings tell failed runs from good ones."""
        if self.store is None:
            return
        reason = error.message if isinstance(error, SandboxAgentError) else None
        try:
            self.store.record_event("run_end", status=status, turns=turns, error=reason)
        except SandboxAgentError as exc:  # the run's own outcome matters more than this note
            self._warn(f"could not record the end of the run: {exc.message}")

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
