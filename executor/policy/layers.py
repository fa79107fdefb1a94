"""The `Policy`: flags, then rules, then defaults per risk, with an untrusted layer that only
tightens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from executor.policy.decision import (
    AUTO_EDIT_TOOLS,
    BUILTIN_DEFAULTS,
    BUILTIN_SOURCE,
    SEVERITY,
    SHELL_TOOL,
    Decision,
    PolicyOverrides,
    ToolFacts,
    Verdict,
    fail_closed,
)
from executor.policy.rules import CommandPattern, Hit, Rule, collapse, shell_of
from executor.shell import ShellAnalysis
from executor.tools.base import RiskLevel


class Policy:
    """Decides allow / ask / deny for tool calls."""

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        defaults: Mapping[RiskLevel, Verdict] | None = None,
        overrides: PolicyOverrides | None = None,
        *,
        source: str = BUILTIN_SOURCE,
        default_sources: Mapping[RiskLevel, str] | None = None,
        tighten: Policy | None = None,
        notices: Sequence[str] = (),
        network: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.network = tuple(network)
        """(rule or `preset:NAME`, source) the person's own policy files allow (docs/NETWORK.md);
        never a project's."""
        self.tighten = tighten
        """An untrusted project policy: only its deny and ask rules count, and only to tighten."""
        self.notices = tuple(notices)
        """One line each about where the policy came from, for the person (e.g. untrusted)."""
        self.rules = tuple(rules)
        self.defaults = {**BUILTIN_DEFAULTS, **(defaults or {})}
        self.overrides = overrides or PolicyOverrides()
        self.source = source
        """The policy file's path, or "built-in defaults"."""
        self.default_sources = {level: "built-in" for level in RiskLevel} | dict(
            default_sources or {}
        )

    def decide(self, tool: ToolFacts, args: Mapping[str, Any], *, interactive: bool) -> Decision:
        """The decision for one call, `ask` turned into `deny` when nobody can be asked."""
        return fail_closed(self.evaluate(tool, args), interactive=interactive)

    def evaluate(self, tool: ToolFacts, args: Mapping[str, Any]) -> Decision:
        """Flags, rules, defaults and `--yes`; an `ask` is left for the caller to resolve."""
        shell = shell_of(tool.name, args)
        notes: list[str] = []
        decision = (
            self._flag_denial(tool, shell)
            or self._rule_decision(tool, shell, notes)
            or self._default(tool)
        )
        if self.tighten is not None:
            decision = _stricter(decision, self.tighten.tightening(tool, shell, notes))
        return self._apply_yes(replace(decision, notes=tuple(notes)))

    def tightening(self, tool: ToolFacts, shell: ShellAnalysis | None,
                   notes: list[str]) -> Decision | None:
        """What this (untrusted) policy says, limited to deny and ask: rules, then defaults."""
        decision = self._rule_decision(tool, shell, notes)
        if decision is None and self.default_sources[RiskLevel(tool.risk)] != "built-in":
            decision = self._default(tool)
        return decision if decision is not None and decision.decision != "allow" else None

    def _flag_denial(self, tool: ToolFacts, shell: ShellAnalysis | None) -> Decision | None:
        flags = self.overrides
        if tool.name in flags.deny_tools:
            return _deny(tool, "flag --deny-tool", f"{tool.name} is denied by --deny-tool")
        prefix = next((p for p in flags.deny_prefixes if tool.name.startswith(p)), None)
        if prefix is not None:
            return _deny(tool, "flag --deny-prefix", f"tools starting with {prefix!r} are denied")
        if flags.read_only and not tool.read_only_safe:
            reason = f"{tool.name} is not available in a read-only run"
            return _deny(tool, "flag --read-only", reason)
        return self._command_denial(tool, shell)

    def _command_denial(self, tool: ToolFacts, shell: ShellAnalysis | None) -> Decision | None:
        if shell is None or not self.overrides.deny_commands:
            return None
        flag = Rule("flag --deny-command", "deny", SHELL_TOOL, self.overrides.deny_commands)
        hit = flag.denies(shell)
        if hit is None:
            return None
        reason = (f"commands starting with {hit.pattern!r} are denied by --deny-command"
                  if hit.certain else hit.uncertain_reason("deny", "--deny-command"))
        return replace(_deny(tool, flag.id, reason), matched=hit.matched)

    def _rule_decision(
        self, tool: ToolFacts, shell: ShellAnalysis | None, notes: list[str]
    ) -> Decision | None:
        """The first rule that applies decides; one that only might apply (the command cannot
        be resolved statically) denies if it is a deny rule, and makes the result at least
        `ask` if it is an ask rule (a deny rule further down still denies)."""
        floor: Decision | None = None
        for rule in self.rules:
            hit = rule.match(tool.name, shell)
            if hit is None:
                notes += _skipped_allow(rule, shell)
                continue
            decision = _from_rule(rule, tool, hit)
            if hit.certain or rule.decision == "deny":
                return _stricter(decision, floor)
            floor = floor or decision
        return _stricter(self._default(tool), floor) if floor else None

    def _default(self, tool: ToolFacts) -> Decision:
        level = RiskLevel(tool.risk)
        verdict, rule = self.defaults[level], f"default:{level.value}"
        if verdict == "allow" and tool.requires_approval:
            return Decision("ask", tool.name, rule, f"{tool.name} requires approval")
        reasons: dict[Verdict, str | None] = {
            "allow": None,
            "ask": f"{tool.name} is a {level.value}-risk tool: approval needed",
            "deny": f"{level.value}-risk tools are denied by default",
        }
        approved = rule if verdict == "allow" else None
        return Decision(verdict, tool.name, rule, reasons[verdict], approved_by=approved)

    def _apply_yes(self, decision: Decision) -> Decision:
        if decision.decision == "ask" and self.overrides.yes:
            return replace(decision, decision="allow", approved_by="--yes")
        if (decision.decision == "ask" and self.overrides.auto_edit
                and decision.tool in AUTO_EDIT_TOOLS
                and decision.rule.startswith("default:")):  # a policy rule's `ask` still asks
            return replace(decision, decision="allow", approved_by="--auto-edit")
        return decision

    def with_overrides(self, overrides: PolicyOverrides) -> Policy:
        """The same files' rules and defaults under another session's flags (a child's, or a
        later phase's of the same run): nothing is read again."""
        return Policy(self.rules, self.defaults, overrides, source=self.source,
                      default_sources=self.default_sources, tighten=self.tighten,
                      notices=self.notices)

    def without_allows(self) -> Policy:
        """A copy that can only tighten: no allow rules, no allow defaults."""
        defaults = {lv: v for lv, v in self.defaults.items()
                    if v != "allow" and self.default_sources[lv] != "built-in"}
        sources = {lv: self.default_sources[lv] for lv in defaults}
        return Policy([r for r in self.rules if r.decision != "allow"], defaults,
                      self.overrides, source=self.source, default_sources=sources)

    def describe(self) -> list[tuple[str, str, str, str]]:
        """The effective rules in evaluation order: (source, matches, decision, reason)."""
        return [*self._flag_rows(), *self._rule_rows(), *self._default_rows()]

    def _flag_rows(self) -> list[tuple[str, str, str, str]]:
        flags = self.overrides
        rows = [("flag --deny-tool", f"tool {name}", "deny", "") for name in flags.deny_tools]
        rows += [("flag --deny-prefix", f"tool {p}*", "deny", "") for p in flags.deny_prefixes]
        if flags.read_only:
            rows.append(("flag --read-only", "tools not read-only safe", "deny", ""))
        rows += [("flag --deny-command", f"command {p!r}", "deny", "") for p in flags.deny_commands]
        return rows

    def _rule_rows(self) -> list[tuple[str, str, str, str]]:
        rows: list[tuple[str, str, str, str]] = [
            (r.label, r.describe(), r.decision, r.reason or "") for r in self.rules]
        if self.tighten is not None:
            rows += [(f"{r.label} (untrusted, tightens only)", r.describe(), r.decision,
                      r.reason or "") for r in self.tighten.rules]
        return rows

    def _default_rows(self) -> list[tuple[str, str, str, str]]:
        yes = (" (--yes: ask → allow)" if self.overrides.yes else
               " (--auto-edit: ask → allow for write_file, edit_file)"
               if self.overrides.auto_edit else "")
        return [
            (f"default:{level.value}", f"{level.value}-risk tools ({self.default_sources[level]})",
             verdict + (yes if verdict == "ask" else ""), "")
            for level, verdict in self.defaults.items()
        ]


def _stricter(decision: Decision, other: Decision | None) -> Decision:
    """The stricter of two decisions (the first on a tie)."""
    if other is None or SEVERITY[other.decision] <= SEVERITY[decision.decision]:
        return decision
    return other


def _deny(tool: ToolFacts, rule: str, reason: str) -> Decision:
    return Decision("deny", tool.name, rule, reason)


def _from_rule(rule: Rule, tool: ToolFacts, hit: Hit) -> Decision:
    reason = rule.reason
    if not hit.certain:
        reason = hit.uncertain_reason(rule.decision, rule.label)
    elif reason is None and rule.decision != "allow":
        reason = ("denied by " if rule.decision == "deny" else "approval required by ") + rule.label
    return Decision(
        rule.decision, tool.name, rule.label, reason,
        approved_by=f"policy:{rule.label}" if rule.decision == "allow" else None,
        matched=hit.matched or None,
    )


def _skipped_allow(rule: Rule, shell: ShellAnalysis | None) -> list[str]:
    """A note when an allow rule would match a part of a command that is not one simple one."""
    if rule.decision != "allow" or not rule.shell_only or shell is None or shell.single:
        return []
    if not any(CommandPattern.of(p).allows(c) for p in rule.prefixes for c in shell.commands) \
            and not any(r.search(collapse(c.text)) for r in rule.regexes for c in shell.commands):
        return []
    why = "allow patterns only match a single simple command"
    if shell.unresolved:
        why += f", and this one cannot be resolved statically ({shell.unresolved[0].why})"
    return [f"skipped {rule.label}: {why}"]
