"""Whether a tool call may run: the policy's decision, and the person's answer when it asks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from executor.agent import Authorization
from executor.delegation import DELEGATE_TOOL
from executor.errors import SandboxAgentError
from executor.messages import ToolCall
from executor.policy import Decision
from executor.runner.options import Approval
from executor.runner.state import RunnerState
from executor.tools import Preview, Tool


def _declined(decision: Decision, answer: Approval) -> Decision:
    """The decision declined at the terminal; the person's reason (if any) goes to the model."""
    declined = decision.decline(answer.by)
    if not answer.reason:
        return declined
    return replace(declined, reason=f"{declined.reason}, who said: {answer.reason}")


class Approvals(RunnerState):
    """The policy's decision on each call, and the approval prompt when it says `ask`."""

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
