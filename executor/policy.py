"""The policy: allow, ask or deny each tool call, from flags, a TOML file and defaults per risk.

Precedence (the first that applies decides):

1. deny flags: `--deny-tool NAME`, `--deny-prefix PREFIX` (tool names), `--read-only` (tools
   not marked read-only safe), `--deny-command PREFIX` (shell commands);
2. the file's `[[rules]]`, first match wins;
3. `[defaults]` per risk level (built in: low allow, medium ask, high ask, critical deny);
   a tool that requires approval is never allowed by a default alone.

Then `--yes` turns `ask` into `allow` (never `deny` into anything), and `fail_closed` turns a
remaining `ask` into `deny` when there is no terminal to ask. `Policy.decide` does all of it;
`Policy.evaluate` stops before the terminal step, so the loop can tell "ask the user" from
"denied because non-interactive".

Shell commands (`run_shell_command`'s `command`) are parsed by `executor.shell.analyze` with a
real bash grammar into every simple command they run, anywhere in the text, each with its
words resolved (quotes and escapes removed), plus the reasons the text cannot be resolved
statically (`eval`, `sh -c`, wrappers like `timeout`, a program name known only at run time).

- deny and ask patterns (`--deny-command`, a rule's `prefix` or `regex`) are matched against
  every simple command. A prefix binds spellings: the program by basename (`/bin/rm`, `\\rm`,
  `'rm'` are `rm`), its further words against the command's normal form (`-rf` ≡ `-r -f`,
  `--recursive` ≡ `-r`, `git -C DIR push` ≡ `git push`); a regex is searched in several
  spellings of each simple command and in the whole text.
- fail closed: when a deny pattern might match but that cannot be told statically (an
  unresolved command, or an argument known only at run time), the call is denied with a
  reason saying why and how to rewrite it; an ask pattern asks.
- allow patterns are conservative: they match only a resolved command that is one simple
  command with nothing else (no operators, assignments, redirections, substitutions), and
  a prefix only word for word, as written.

The shell checks are defence in depth; the container is the boundary. See docs/POLICY.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from executor.errors import ConfigError, PolicyFileError
from executor.policy_file import RuleSpec, load_spec, rule_id
from executor.shell import ShellAnalysis, SimpleCommand, Token, analyze, normal_form, normalise
from executor.state import config_home
from executor.tools.base import RiskLevel
from executor.trust import read_project_file

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


@dataclass(frozen=True)
class Rule:
    """One `[[rules]]` entry of a policy file (or a `--deny-command` flag, as a rule)."""

    id: str
    """Where it comes from: `policy.toml:12 [[rules]] #2`."""
    decision: Verdict
    tool: str = "*"
    """Exact tool name or a glob (`*`, `mcp_*`)."""
    prefixes: tuple[str, ...] = ()
    regexes: tuple[PolicyRegex, ...] = ()
    name: str | None = None
    reason: str | None = None

    @property
    def label(self) -> str:
        """The id plus the rule's name, if it has one."""
        return f"{self.id} ({self.name})" if self.name else self.id

    @property
    def shell_only(self) -> bool:
        """Whether the rule matches shell commands rather than whole tools."""
        return bool(self.prefixes or self.regexes)

    def describe(self) -> str:
        """What the rule matches, in one line."""
        what = [f"tool {self.tool}"]
        what += [f"prefix '{p}'" for p in self.prefixes]
        what += [f"regex '{r.pattern}'" for r in self.regexes]
        return ", ".join(what)

    def match(self, tool: str, shell: ShellAnalysis | None) -> Hit | None:
        """Whether the rule applies to this call (for certain, or perhaps), else None."""
        if not fnmatchcase(tool, self.tool):
            return None
        if not self.shell_only:
            return Hit(_collapse(shell.source) if shell else "")
        if shell is None:
            return None
        if self.decision == "allow":
            return Hit(_collapse(shell.source)) if self.allows(shell) else None
        return self.denies(shell)

    def allows(self, shell: ShellAnalysis) -> bool:
        """Allow semantics: one resolved simple command and nothing else, matched as written."""
        if not shell.single:
            return False
        command = shell.commands[0]
        return any(CommandPattern.of(p).allows(command) for p in self.prefixes) or any(
            r.search(_collapse(shell.joined)) for r in self.regexes
        )

    def denies(self, shell: ShellAnalysis) -> Hit | None:
        """Deny/ask semantics: any simple command hits; perhaps, when that cannot be told."""
        perhaps: Hit | None = None
        for command in shell.commands:
            hit = self._hit(command)
            if hit is not None and hit.certain:
                return hit
            perhaps = perhaps or hit
        whole = (_collapse(shell.source), _collapse(shell.joined))
        for text in whole:  # patterns that span simple commands (`curl .* | sh`)
            pattern = self._textual_hit(text)
            if pattern is not None:
                return Hit(text, pattern)
        if perhaps is None and shell.unresolved:
            first = shell.unresolved[0]
            perhaps = Hit(first.text, certain=False, why=first.why, fix=first.fix)
        return perhaps

    def _hit(self, command: SimpleCommand) -> Hit | None:
        perhaps: Hit | None = None
        for prefix in self.prefixes:
            verdict = CommandPattern.of(prefix).hits(command)
            if verdict == "yes":
                return Hit(_collapse(command.text), prefix)
            if verdict == "maybe" and perhaps is None:
                runtime = next(w.text for w in command.words if not w.literal)
                why = f"`{runtime}` is only known when it runs, and could make it `{prefix}`"
                perhaps = Hit(_collapse(command.text), prefix, False, why,
                              "write the arguments out literally")
        regex = next((r for r in self.regexes for s in spellings(command) if r.search(s)), None)
        return Hit(_collapse(command.text), regex.pattern) if regex else perhaps

    def _textual_hit(self, text: str) -> str | None:
        """The regex, or the prefix that is not one simple command, matching `text` as text."""
        regex = next((r.pattern for r in self.regexes if r.search(text)), None)
        textual = (p for p in self.prefixes if CommandPattern.of(p).command is None)
        return regex or next((p for p in textual if starts_with_command(text, p)), None)


class PolicyRegex:
    """A rule's regular expression, searched with a time limit.

    A pattern from a policy file meets a command the model chose: `^(a|aa)+$` against a long
    enough command would backtrack for minutes. A search that runs out of time counts as a
    match for deny and ask rules (fail closed) and as no match for allow rules.
    """

    TIMEOUT = 0.05
    """Seconds one search may take."""

    def __init__(self, pattern: str, *, on_timeout: bool) -> None:
        import regex  # a backtracking engine with a timeout; imported only when rules have one

        self.pattern = pattern
        self.on_timeout = on_timeout
        self._compiled = regex.compile(pattern, regex.VERSION0)

    def search(self, text: str) -> bool:
        """Whether the pattern is found in `text` (or the search ran out of time, see above)."""
        try:
            return self._compiled.search(text, timeout=self.TIMEOUT) is not None
        except TimeoutError:
            return self.on_timeout


@dataclass(frozen=True)
class Hit:
    """A shell rule applying to a call: for certain, or perhaps (cannot tell statically)."""

    matched: str
    """The command, or the part of it, that matched."""
    pattern: str | None = None
    """The prefix or regex that matched."""
    certain: bool = True
    why: str | None = None
    """When not certain: what cannot be told statically."""
    fix: str | None = None
    """When not certain: how to write the command so it can be checked."""

    def uncertain_reason(self, decision: Verdict, rule: str) -> str:
        """Why a rule that might apply decided: says what is unknown and how to rewrite it."""
        outcome = "it was denied" if decision == "deny" else "it needs approval"
        kind = "deny" if decision == "deny" else "ask"
        fix = (self.fix or "run the program directly").rstrip(".")
        return (f"cannot tell statically what `{self.matched}` runs ({self.why}); shell "
                f"{kind} rules are set ({rule}), so {outcome}. {fix[0].upper()}{fix[1:]}.")


# ---------------------------------------------------------------------------- shell patterns

PrefixMatch = Literal["yes", "maybe", "no"]
_ORDER: dict[PrefixMatch, int] = {"no": 0, "maybe": 1, "yes": 2}


@dataclass(frozen=True)
class CommandPattern:
    """A shell-command prefix (`--deny-command`, a rule's `prefix`), as the words it means."""

    text: str
    """The prefix, whitespace runs collapsed."""
    command: SimpleCommand | None
    """Its words; None when it is not one literal simple command (then matched as text)."""

    @staticmethod
    @cache
    def of(text: str) -> CommandPattern:
        """The pattern of a prefix (parsed once)."""
        shell = analyze(text)
        ok = shell.single and shell.commands[0].literal
        return CommandPattern(_collapse(text), shell.commands[0] if ok else None)

    def hits(self, command: SimpleCommand) -> PrefixMatch:
        """Deny/ask: the same program (by basename), then the further words in normal form:
        the pattern's operands lead the command's, its options are among the command's."""
        if self.command is None:
            return "yes" if starts_with_command(_collapse(command.text), self.text) else "no"
        if not _same_program(self.command, command):
            return "no"
        want, have = normalise(self.command), normalise(command)
        return min(_operands_match(want, have), _options_match(want, have), key=_ORDER.__getitem__)

    def allows(self, command: SimpleCommand) -> bool:
        """Allow: the pattern's words are the command's first words, exactly as written."""
        if self.command is None:
            return starts_with_command(_collapse(command.text), self.text)
        want, have = self.command.argv, command.words
        if len(have) < len(want) or not all(w.literal for w in have[: len(want)]):
            return False
        *same, last = want
        return all(a == b.text for a, b in zip(same, have, strict=False)) and _word_prefix(
            have[len(want) - 1].text, last
        )


def _same_program(pattern: SimpleCommand, command: SimpleCommand) -> bool:
    first = pattern.argv[0]
    if first.endswith("/"):  # a directory: any program under it
        return command.words[0].literal and command.words[0].text.startswith(first)
    return pattern.program == command.program


def _operands_match(want: Sequence[Token], have: Sequence[Token]) -> PrefixMatch:
    """The pattern's operands (`push` of `git push`) are the command's first ones."""
    needed = [t.text for t in want if t.kind == "operand"]
    found = 0
    for token in have:
        if found == len(needed):
            break
        if token.kind == "runtime":
            return "maybe"
        if token.kind == "operand":
            if not _word_prefix(token.text, needed[found]):
                return "no"
            found += 1
    return "yes" if found == len(needed) else "no"


def _options_match(want: Sequence[Token], have: Sequence[Token]) -> PrefixMatch:
    """The pattern's options (`-r`, `-f` of `rm -rf`) are all among the command's."""
    needed = {t.text for t in want if t.kind == "option"}
    if needed <= {t.text for t in have if t.kind == "option"}:
        return "yes"
    return "maybe" if any(t.kind == "runtime" and t.may_be_option for t in have) else "no"


def _word_prefix(word: str, pattern: str) -> bool:
    """Equal, or `pattern` ends in a non-word character (`./scripts/`) and starts `word`."""
    return word == pattern or (bool(re.search(r"\W$", pattern)) and word.startswith(pattern))


def spellings(command: SimpleCommand) -> tuple[str, ...]:
    """What a regex is searched in: the source text, the resolved words, the normal form,
    and the normal form with runs of short options clustered again (`rm -rf x`)."""
    normal = normal_form(command)
    clustered = re.sub(r"(?<= )-(\w)((?: -\w)+)(?= |$)",
                       lambda m: "-" + m.group(1) + m.group(2).replace(" -", ""), normal)
    return tuple(dict.fromkeys(
        [_collapse(command.text), " ".join(command.argv), normal, clustered]))


def starts_with_command(text: str, prefix: str) -> bool:
    """`text` starts with `prefix`, ending at a word boundary when the prefix ends in a word."""
    prefix = _collapse(prefix)
    if not prefix or not text.startswith(prefix):
        return False
    rest = text[len(prefix) :]
    return not rest or not re.match(r"\w", prefix[-1]) or rest[0] == " "


def _collapse(text: str) -> str:
    return " ".join(text.split())


def shell_of(tool: str, args: Mapping[str, Any]) -> ShellAnalysis | None:
    """The analysed command of a shell call (None for other tools)."""
    if tool != SHELL_TOOL:
        return None
    command = args.get("command")
    return analyze(command if isinstance(command, str) else "")



# ---------------------------------------------------------------------------- the policy


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
                return _at_least(decision, floor)
            floor = floor or decision
        return _at_least(self._default(tool), floor) if floor else None

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


_SEVERITY: Mapping[Verdict, int] = {"allow": 0, "ask": 1, "deny": 2}


def _stricter(decision: Decision, other: Decision | None) -> Decision:
    """The stricter of two decisions (the first on a tie)."""
    if other is None or _SEVERITY[other.decision] <= _SEVERITY[decision.decision]:
        return decision
    return other


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


_STRICTNESS: dict[Verdict, int] = {"allow": 0, "ask": 1, "deny": 2}


def _at_least(decision: Decision, floor: Decision | None) -> Decision:
    """`decision`, or `floor` when that is stricter."""
    if floor is not None and _STRICTNESS[floor.decision] > _STRICTNESS[decision.decision]:
        return floor
    return decision


def _skipped_allow(rule: Rule, shell: ShellAnalysis | None) -> list[str]:
    """A note when an allow rule would match a part of a command that is not one simple one."""
    if rule.decision != "allow" or not rule.shell_only or shell is None or shell.single:
        return []
    if not any(CommandPattern.of(p).allows(c) for p in rule.prefixes for c in shell.commands) \
            and not any(r.search(_collapse(c.text)) for r in rule.regexes for c in shell.commands):
        return []
    why = "allow patterns only match a single simple command"
    if shell.unresolved:
        why += f", and this one cannot be resolved statically ({shell.unresolved[0].why})"
    return [f"skipped {rule.label}: {why}"]


# ---------------------------------------------------------------------------- loading



def default_policy_path(root: Path) -> Path:
    """`<root>/.sandbox-agent/policy.toml`: a project policy, used as trusted only when trusted."""
    return root / POLICY_FILE


def user_policy_path() -> Path:
    """The person's own policy, always trusted: `~/.config/sandbox-agent/policy.toml`."""
    return config_home() / "policy.toml"


def load_policy(
    root: Path | None = None,
    path: Path | None = None,
    overrides: PolicyOverrides | None = None,
) -> Policy:
    """The policy for a run: the person's own policy plus `path` (named by them) or the project's.

    The user policy's rules come first (the person's word wins) and its defaults override. A
    project policy (`<root>/.sandbox-agent/policy.toml`) is the repository's word: used in full
    only when the person trusted its exact content (`sandbox-agent policy trust`), otherwise
    only its deny and ask rules apply, and only where they are stricter.
    """
    layers, notices = _user_layer(root)
    tighten = None
    if path is not None:
        named = _parse_file(path, "--policy")
        if named.network and root is not None and _inside(path, root):  # the tree's words
            notices.append(f"the [network] table of {path} is not used: it lies inside the "
                           "project, and nothing there allows a host")
            named.network = ()
        layers.append(named)
    elif root is not None:
        project, tighten, more = _project_policy(root)
        notices += more
        layers += [project] if project else []
    return _combine(layers, overrides, tighten, notices)


def _user_layer(root: Path | None) -> tuple[list[Policy], list[str]]:
    """The person's own policy, unless it lies inside the project (dotfiles kept in a repo, or
    a config dir linked into it): there the sandbox could rewrite it."""
    path = user_policy_path()
    if not path.is_file():
        return [], []
    if root is not None:
        real = Path(os.path.realpath(path))
        top = Path(os.path.realpath(root))
        if real == top or top in real.parents:
            return [], [f"your policy {path} is not used in this run: it lies inside the project "
                        f"{top}, where the sandbox can write"]
    return [_parse_file(path, "user")], []


def _inside(path: Path, root: Path) -> bool:
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents


def _parse_file(path: Path, label: str) -> Policy:
    return parse_policy(_read(path), path=str(path), label=label)


def _project_policy(root: Path) -> tuple[Policy | None, Policy | None, list[str]]:
    """(trusted layer, untrusted tightening layer, notices) of the root's policy file."""
    try:
        file = read_project_file(root, POLICY_FILE.as_posix())
    except ConfigError as exc:
        return None, None, [exc.message]
    if file is None:
        return None, None, []
    text = _decode(file.data, file.path)
    if file.trusted:
        trusted = parse_policy(text, path=str(file.path), label="project, trusted")
        trusted.network = ()  # trusted for its rules; a host is the person's to allow
        return trusted, None, []
    untrusted = parse_policy(text, path=str(file.path), label="project, untrusted: deny/ask only")
    why = "changed since you trusted it" if file.changed else "not trusted"
    notice = (f"project policy {file.path} is {why}: only its deny and ask rules apply; "
              f"review it and trust it with `sandbox-agent policy trust --root {root}`")
    return None, untrusted.without_allows(), [notice]


def _combine(layers: list[Policy], overrides: PolicyOverrides | None, tighten: Policy | None,
             notices: list[str]) -> Policy:
    """One policy: the layers' rules in order, later layers' defaults under earlier ones."""
    rules = [rule for layer in layers for rule in layer.rules]
    defaults: dict[RiskLevel, Verdict] = {}
    sources: dict[RiskLevel, str] = {}
    for layer in reversed(layers):
        for level, source in layer.default_sources.items():
            if source != "built-in":
                defaults[level], sources[level] = layer.defaults[level], source
    names = [layer.source for layer in layers] + ([tighten.source] if tighten else [])
    network = [entry for layer in layers for entry in layer.network]
    return Policy(rules, defaults, overrides, source=" + ".join(names) or BUILTIN_SOURCE,
                  default_sources=sources, tighten=tighten, notices=notices, network=network)


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"policy file {path} cannot be read: {exc}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyFileError(
            f"policy file {path} not found", fix="check the --policy path"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"policy file {path} cannot be read: {exc}") from None


def parse_policy(text: str, *, path: str, overrides: PolicyOverrides | None = None,
                 label: str | None = None) -> Policy:
    """Parse and validate policy TOML; errors name the file, the line and the reason.

    The format is `executor.policy_file.PolicySpec`; `label` (e.g. "user",
    "project, untrusted") is added to the policy's source.
    """
    spec, src = load_spec(text, path)
    levels = {level.value: level for level in RiskLevel}
    defaults = {levels[k]: cast(Verdict, v)
                for k, v in spec.defaults.model_dump(exclude_none=True).items()}
    rules = [_rule(rule_id(src, index), rule) for index, rule in enumerate(spec.rules, 1)]
    sources = {level: f"{src.name} [defaults]" for level in defaults}
    source = f"{path} ({label})" if label else path
    network = [(text, f"policy {src.name}") for text in spec.network.allow]
    network += [(f"preset:{name}", f"policy {src.name}") for name in spec.network.presets]
    return Policy(rules, defaults, overrides, source=source, default_sources=sources,
                  network=network)


def _rule(id: str, spec: RuleSpec) -> Rule:
    shell = spec.prefix is not None or spec.regex is not None
    return Rule(
        id=id, decision=spec.decision, tool=spec.tool or (SHELL_TOOL if shell else "*"),
        prefixes=tuple(spec.prefix or ()),
        regexes=tuple(PolicyRegex(r, on_timeout=spec.decision != "allow")
                      for r in spec.regex or ()),
        name=spec.name, reason=spec.reason,
    )


# ---------------------------------------------------------------------------- explain


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
    lines = [f"joined:    {_collapse(shell.joined)}  (line continuations joined)"
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
