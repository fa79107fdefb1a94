"""`policy explain`: what the policy decides for one call, which rule decided, and how a shell
command was parsed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from executor.policy.decision import Decision, ToolFacts
from executor.policy.layers import Policy
from executor.policy.rules import collapse, shell_of
from executor.shell import ShellAnalysis
from executor.tools.base import RiskLevel


def explain(
    policy: Policy, tool: ToolFacts, args: Mapping[str, Any], *, interactive: bool = True
) -> str:
    """A few lines saying what the policy decides for this call, and which rule decided."""
    decision = policy.decide(tool, args, interactive=interactive)
    approval = "requires approval" if tool.requires_approval else "no approval needed"
    lines = [
        f"tool:      {tool.name} (risk {RiskLevel(tool.risk).value}, {approval})",
        f"arguments: {json.dumps(dict(args), ensure_ascii=False)}",
        f"decision:  {decision.decision}{_decision_note(decision, interactive)}",
        f"rule:      {decision.rule}{_rule_detail(policy, decision)}",
    ]
    lines += _optional_lines(policy, tool, args, decision)
    return "\n".join(lines)


def _decision_note(decision: Decision, interactive: bool) -> str:
    if decision.fail_closed:
        return " (fail closed: approval needed, but the run is non-interactive)"
    if decision.decision == "ask":
        return " (the user is asked at the terminal; --yes or an allow rule approves up front)"
    return ""


def _rule_detail(policy: Policy, decision: Decision) -> str:
    rule = next((r for r in policy.rules if r.label == decision.rule), None)
    if rule is not None:
        return f" — {rule.describe()}"
    if decision.rule.startswith("default:"):
        level = RiskLevel(decision.rule.removeprefix("default:"))
        return f" — from {policy.default_sources[level]}"
    return ""


def _optional_lines(
    policy: Policy, tool: ToolFacts, args: Mapping[str, Any], decision: Decision
) -> list[str]:
    lines = [f"reason:    {decision.reason}"] if decision.reason else []
    if decision.approved_by:
        lines.append(f"approved:  {decision.approved_by}")
    if decision.matched:
        lines.append(f"matched:   {decision.matched}")
    lines += shell_lines(shell_of(tool.name, args))
    lines += [f"note:      {note}" for note in decision.notes]
    lines.append(f"policy:    {policy.source}")
    return lines


def shell_lines(shell: ShellAnalysis | None) -> list[str]:
    """How a shell command was parsed: each simple command's words, and what is unresolved."""
    if shell is None:
        return []
    lines = [f"joined:    {collapse(shell.joined)}  (line continuations joined)"
             ] if shell.joined != shell.source else []
    for number, command in enumerate(shell.commands, 1):
        runtime = [w.text for w in command.words if not w.literal]
        known = f"  (known only at run time: {', '.join(runtime)})" if runtime else ""
        argv = json.dumps(list(command.argv), ensure_ascii=False)
        lines.append(f"command {number}: {command.program or '?'} argv {argv}{known}")
    lines += [f"unresolved: `{u.text}`: {u.why} (fix: {u.fix})" for u in shell.unresolved]
    if not shell.commands and not shell.unresolved:
        lines.append("command:   (none)")
    return lines
