"""A policy file's rules, and how their shell patterns match the commands a call runs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from typing import Any, Literal

from executor.policy.decision import SHELL_TOOL, Verdict
from executor.shell import ShellAnalysis, SimpleCommand, Token, analyze, normal_form, normalise


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
            return Hit(collapse(shell.source) if shell else "")
        if shell is None:
            return None
        if self.decision == "allow":
            return Hit(collapse(shell.source)) if self.allows(shell) else None
        return self.denies(shell)

    def allows(self, shell: ShellAnalysis) -> bool:
        """Allow semantics: one resolved simple command and nothing else, matched as written."""
        if not shell.single:
            return False
        command = shell.commands[0]
        return any(CommandPattern.of(p).allows(command) for p in self.prefixes) or any(
            r.search(collapse(shell.joined)) for r in self.regexes
        )

    def denies(self, shell: ShellAnalysis) -> Hit | None:
        """Deny/ask semantics: any simple command hits; perhaps, when that cannot be told."""
        perhaps: Hit | None = None
        for command in shell.commands:
            hit = self._hit(command)
            if hit is not None and hit.certain:
                return hit
            perhaps = perhaps or hit
        whole = (collapse(shell.source), collapse(shell.joined))
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
                return Hit(collapse(command.text), prefix)
            if verdict == "maybe" and perhaps is None:
                runtime = next(w.text for w in command.words if not w.literal)
                why = f"`{runtime}` is only known when it runs, and could make it `{prefix}`"
                perhaps = Hit(collapse(command.text), prefix, False, why,
                              "write the arguments out literally")
        regex = next((r for r in self.regexes for s in spellings(command) if r.search(s)), None)
        return Hit(collapse(command.text), regex.pattern) if regex else perhaps

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
        return CommandPattern(collapse(text), shell.commands[0] if ok else None)

    def hits(self, command: SimpleCommand) -> PrefixMatch:
        """Deny/ask: the same program (by basename), then the further words in normal form:
        the pattern's operands lead the command's, its options are among the command's."""
        if self.command is None:
            return "yes" if starts_with_command(collapse(command.text), self.text) else "no"
        if not _same_program(self.command, command):
            return "no"
        want, have = normalise(self.command), normalise(command)
        return min(_operands_match(want, have), _options_match(want, have), key=_ORDER.__getitem__)

    def allows(self, command: SimpleCommand) -> bool:
        """Allow: the pattern's words are the command's first words, exactly as written."""
        if self.command is None:
            return starts_with_command(collapse(command.text), self.text)
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
        [collapse(command.text), " ".join(command.argv), normal, clustered]))


def starts_with_command(text: str, prefix: str) -> bool:
    """`text` starts with `prefix`, ending at a word boundary when the prefix ends in a word."""
    prefix = collapse(prefix)
    if not prefix or not text.startswith(prefix):
        return False
    rest = text[len(prefix) :]
    return not rest or not re.match(r"\w", prefix[-1]) or rest[0] == " "


def collapse(text: str) -> str:
    return " ".join(text.split())


def shell_of(tool: str, args: Mapping[str, Any]) -> ShellAnalysis | None:
    """The analysed command of a shell call (None for other tools)."""
    if tool != SHELL_TOOL:
        return None
    command = args.get("command")
    return analyze(command if isinstance(command, str) else "")
