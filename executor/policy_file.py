"""The policy file's format as pydantic models, and its errors mapped back to TOML lines.

tomllib keeps no positions, so `_Source` finds the line an error is about from the text: the
`[[rules]]` header of the rule, the `key =` line inside it, or the `[defaults]` table. Every
error is one line: `<path>:<line>: <what is wrong>`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from executor.errors import PolicyFileError

Verdict = Literal["allow", "ask", "deny"]
SHELL_TOOL = "run_shell_command"
_TOML_POSITION = re.compile(r"\(at (?:line (\d+), column \d+|end of document)\)")


class RuleSpec(BaseModel):
    """One `[[rules]]` table."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Verdict
    """allow, ask or deny."""
    tool: str | None = None
    """Exact tool name or a glob; prefix/regex rules are about run_shell_command."""
    prefix: list[str] | None = None
    """Shell command prefixes (a string is one)."""
    regex: list[str] | None = None
    """Regular expressions searched in shell commands (a string is one)."""
    name: str | None = None
    """Shown with the rule's id."""
    reason: str | None = None
    """Shown to the person and the model when the rule denies or asks."""

    @field_validator("prefix", "regex", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("prefix", "regex")
    @classmethod
    def _not_blank(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not all(v.strip() for v in value)):
            raise ValueError("blank")
        return value


class DefaultsSpec(BaseModel):
    """The `[defaults]` table: a decision per risk level."""

    model_config = ConfigDict(extra="forbid", strict=True)

    low: Verdict | None = None
    medium: Verdict | None = None
    high: Verdict | None = None
    critical: Verdict | None = None


class NetworkSpec(BaseModel):
    """The `[network]` table: hosts the sandbox may reach (docs/NETWORK.md). Only the person's
    own policy files count: the user policy, or a --policy file outside the project."""

    model_config = ConfigDict(extra="forbid", strict=True)

    allow: list[str] = Field(default_factory=list)
    """Rules as for --allow-host."""
    presets: list[str] = Field(default_factory=list)
    """Presets as for --network."""


class PolicySpec(BaseModel):
    """A whole policy file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    defaults: DefaultsSpec = Field(default_factory=DefaultsSpec)
    rules: list[RuleSpec] = Field(default_factory=list)
    network: NetworkSpec = Field(default_factory=NetworkSpec)


def load_spec(text: str, path: str) -> tuple[PolicySpec, _Source]:
    """Parse and validate policy TOML; a PolicyFileError names the file, line and reason."""
    src = _Source(text, path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise src.error(f"invalid TOML: {_TOML_POSITION.sub('', str(exc)).strip()}",
                        _toml_line(exc, src)) from None
    try:
        spec = PolicySpec.model_validate(data)
    except ValidationError as exc:
        # A misspelt key explains a missing one better than the other way round.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        raise _first_problem(src, data, errors[0]) from None
    for index, rule in enumerate(spec.rules, 1):
        _check_rule(src, index, rule, data["rules"][index - 1])
    return spec, src


def rule_id(src: _Source, index: int) -> str:
    """`policy.toml:12 [[rules]] #2`: where a rule comes from, as decisions name it."""
    start = src.rule_line(index)
    return f"{src.name}:{start} [[rules]] #{index}" if start else f"{src.name} rules[{index}]"


def _check_rule(src: _Source, index: int, rule: RuleSpec, raw: dict[str, Any]) -> None:
    """What a schema cannot say: prefix xor regex, their tool, valid regexes."""
    where, start = f"rule #{index}", src.rule_line(index)
    if rule.prefix is not None and rule.regex is not None:
        raise src.error(f"{where}: use either prefix or regex (one rule each)", start)
    shell = rule.prefix is not None or rule.regex is not None
    if rule.tool is None and not shell:
        raise src.error(f"{where}: needs a tool (a name or a glob like \"*\")", start)
    if rule.tool is not None and not rule.tool:
        raise src.error(f"{where}: tool must be a non-empty string (a name or a glob like \"*\")",
                        src.key(start, "tool"))
    if shell and rule.tool not in (None, SHELL_TOOL):
        raise src.error(f"{where}: prefix and regex match shell commands, so tool must be "
                        f"{SHELL_TOOL}", src.key(start, "tool"))
    import regex  # the engine rules are searched with (executor.policy.PolicyRegex)

    for pattern in rule.regex or ():
        try:
            regex.compile(pattern, regex.VERSION0)
        except regex.error as exc:
            raise src.error(f"{where}: invalid regex {pattern!r}: {exc}",
                            src.key(start, "regex")) from None


def _first_problem(src: _Source, data: dict[str, Any], error: ErrorDetails) -> PolicyFileError:
    """One error line for pydantic's first complaint, at the line it is about."""
    loc = error["loc"]
    kind = error["type"]
    if loc and loc[0] == "rules" and len(loc) >= 2 and isinstance(loc[1], int):
        return _rule_problem(src, loc[1] + 1, loc[2:], kind, error.get("input"))
    if loc and loc[0] == "defaults":
        return _defaults_problem(src, loc[1:], kind, error.get("input"))
    key = str(loc[0]) if loc else ""
    if kind == "extra_forbidden":
        return src.error(f"unknown key {key!r} (expected [defaults], [[rules]] and [network])",
                         src.top(key))
    if key == "rules":
        return src.error("rules must be an array of tables ([[rules]])", src.top("rules"))
    if key == "network":
        return src.error("[network] takes allow and presets, each a list of strings",
                         src.top("network"))
    return src.error("[defaults] must be a table", src.top("defaults"))


def _rule_problem(src: _Source, index: int, rest: tuple[int | str, ...], kind: str,
                  value: Any) -> PolicyFileError:
    where, start = f"rule #{index}", src.rule_line(index)
    key = str(rest[0]) if rest else ""
    line = src.key(start, key) if key else start or src.top("rules")
    if not rest:
        return src.error(f"{where} must be a table", line)
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted(RuleSpec.model_fields))
        return src.error(f"{where}: unknown key {key!r} (allowed: {allowed})", line)
    if key == "decision":
        if kind == "missing":
            return src.error(f"{where}: missing decision (allow, ask or deny)", start)
        return src.error(f"{where}: decision must be one of allow, ask, deny (got {value!r})",
                         line)
    if key in ("prefix", "regex"):
        return src.error(f"{where}: {key} must be a non-empty string or a list of them", line)
    if key == "tool":
        return src.error(f"{where}: tool must be a non-empty string (a name or a glob like "
                         "\"*\")", line)
    return src.error(f"{where}: {key} must be a string", line)


def _defaults_problem(src: _Source, rest: tuple[int | str, ...], kind: str,
                      value: Any) -> PolicyFileError:
    start = src.header(r"^\[\s*defaults\s*\]")
    if not rest:
        return src.error("[defaults] must be a table", src.top("defaults"))
    key = str(rest[0])
    if kind == "extra_forbidden":
        levels = ", ".join(DefaultsSpec.model_fields)
        return src.error(f"[defaults] has unknown risk level {key!r} (use {levels})",
                         src.key(start, key))
    return src.error(f"[defaults] {key}: decision must be one of allow, ask, deny "
                     f"(got {value!r})", src.key(start, key))


def _toml_line(exc: tomllib.TOMLDecodeError, src: _Source) -> int | None:
    match = _TOML_POSITION.search(str(exc))
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else len(src.lines) or None


POLICY_FORMAT_FIX = "see the format in `sandbox-agent policy --help` (or docs/POLICY.md)"
"""A fix that works for a pip-installed user too (no docs/ there)."""


class _Source:
    """The policy text, for finding the line an error is about (tomllib keeps no positions)."""

    def __init__(self, text: str, path: str) -> None:
        self.lines = text.splitlines()
        self.path = path
        self.name = Path(path).name

    def error(self, message: str, line: int | None) -> PolicyFileError:
        where = f"{self.path}:{line}" if line else self.path
        return PolicyFileError(f"{where}: {message}", fix=POLICY_FORMAT_FIX)

    def rule_line(self, index: int) -> int | None:
        """Line of the `index`-th `[[rules]]` header (1-based)."""
        return self.header(r"^\[\[\s*rules\s*\]\]", index)

    def header(self, pattern: str, index: int = 1) -> int | None:
        """Line of the `index`-th header matching `pattern` (e.g. `[[rules]]`)."""
        found = [n for n, line in enumerate(self.lines, 1) if re.match(pattern, line.strip())]
        return found[index - 1] if len(found) >= index else None

    def key(self, start: int | None, key: str) -> int | None:
        """Line of `key = ...` in the table starting at line `start`, else the table's line."""
        if start is None:  # inline tables: the first line assigning the key is our best guess
            return self.find(rf"(^|[{{,\s])[\"']?{re.escape(key)}[\"']?\s*=")
        for number in range(start + 1, len(self.lines) + 1):
            text = self.lines[number - 1].strip()
            if text.startswith("["):
                break
            if re.match(rf"[\"']?{re.escape(key)}[\"']?\s*=", text):
                return number
        return start

    def top(self, key: str) -> int | None:
        """Line of a top-level key or table named `key`."""
        return self.find(rf"^\[*\s*[\"']?{re.escape(key)}[\"']?\s*(\]|=|\.)")

    def find(self, pattern: str) -> int | None:
        """The first line where `pattern` is found."""
        return next((n for n, line in enumerate(self.lines, 1) if re.search(pattern, line)), None)
