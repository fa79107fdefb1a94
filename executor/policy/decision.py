"""What the policy decides about one call, and the flags and tool facts it decides from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from executor.tools.base import RiskLevel

Verdict = Literal["allow", "ask", "deny"]
VERDICTS: tuple[Verdict, ...] = ("allow", "ask", "deny")
SHELL_TOOL = "run_shell_command"
POLICY_FILE = Path(".sandbox-agent") / "policy.toml"
"""Where the policy of a root lives, relative to the root."""
BUILTIN_SOURCE = "built-in defaults"
USER_POLICY_HINT = "~/.config/sandbox-agent/policy.toml"
"""How docs and messages name the user policy file."""

BUILTIN_DEFAULTS: Mapping[RiskLevel, Verdict] = {
    RiskLevel.LOW: "allow",
    RiskLevel.MEDIUM: "ask",
    RiskLevel.HIGH: "ask",
    RiskLevel.CRITICAL: "deny",
}
"""Decision per risk level when neither a flag nor a rule decides."""


class ToolFacts(Protocol):
    """What the policy needs to know about a tool (a `Tool` instance qualifies)."""

    @property
    def name(self) -> str: ...

    @property
    def risk(self) -> RiskLevel: ...

    @property
    def requires_approval(self) -> bool: ...

    @property
    def read_only_safe(self) -> bool: ...


@dataclass(frozen=True)
class ToolInfo:
    """Tool facts as plain values, for tools known only by name (e.g. `policy explain`)."""

    name: str
    risk: RiskLevel = RiskLevel.LOW
    requires_approval: bool = False
    read_only_safe: bool = False


AUTO_EDIT_TOOLS = frozenset({"write_file", "edit_file"})
"""The tools --auto-edit approves up front: they write files in the project, nothing else."""


@dataclass(frozen=True)
class PolicyOverrides:
    """Command-line flags layered over the policy file."""

    yes: bool = False
    """--yes: approve every `ask` up front (never a `deny`)."""
    auto_edit: bool = False
    """--auto-edit: approve the default `ask` of a file write or edit up front (a write stays
    in the project); shell commands, a policy rule's `ask` and every other `ask` still ask."""
    deny_tools: tuple[str, ...] = ()
    """--deny-tool: tool names that are always denied."""
    deny_prefixes: tuple[str, ...] = ()
    """--deny-prefix: tools whose name starts with one of these are denied."""
    deny_commands: tuple[str, ...] = ()
    """--deny-command: shell commands starting with one of these are denied."""
    read_only: bool = False
    """--read-only: tools not marked read-only safe are denied."""


@dataclass(frozen=True)
class Decision:
    """What the policy says about one call, and which rule said it."""

    decision: Verdict
    tool: str
    rule: str
    """`policy.toml:12 [[rules]] #2`, `flag --deny-tool`, `default:medium`, ..."""
    reason: str | None = None
    """Why (always set for deny and ask): shown to the user and the model."""
    approved_by: str | None = None
    """When allowed: "user", "--yes", "policy:<rule>" or "default:<risk>"."""
    fail_closed: bool = False
    """An `ask` denied because the run is non-interactive."""
    matched: str | None = None
    """The command (or part of it) a shell pattern matched."""
    notes: tuple[str, ...] = ()
    """Rules that were looked at but skipped, and why."""

    @property
    def allowed(self) -> bool:
        """The call may run."""
        return self.decision == "allow"

    @property
    def needs_approval(self) -> bool:
        """Someone at the terminal must approve the call first."""
        return self.decision == "ask"

    def approve(self, by: str = "user") -> Decision:
        """This `ask` decision, approved (by the user at the terminal)."""
        if self.decision != "ask":
            raise ValueError(f"only an 'ask' decision can be approved, not {self.decision!r}")
        return replace(self, decision="allow", approved_by=by)

    def decline(self, by: str = "user") -> Decision:
        """This `ask` decision, declined at the terminal."""
        return replace(self, decision="deny", reason=f"{self.tool} was declined by the {by}")

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for --json and the audit log)."""
        return asdict(self)


SEVERITY: Mapping[Verdict, int] = {"allow": 0, "ask": 1, "deny": 2}
"""How strict each verdict is: a stricter layer or floor wins."""


def fail_closed(decision: Decision, *, interactive: bool) -> Decision:
    """Turn an `ask` into a `deny` when there is no terminal to ask (non-interactive runs)."""
    if decision.decision != "ask" or interactive:
        return decision
    why = decision.rule
    if not why.startswith("default:") and decision.reason:
        why += f": {decision.reason}"
    reason = (
        f"{decision.tool} needs approval ({why}) but this run is non-interactive, so it was "
        "not run. Approve up front with --yes, or add an allow rule to your policy "
        f"({USER_POLICY_HINT})"
    )
    return replace(decision, decision="deny", reason=reason, fail_closed=True)
