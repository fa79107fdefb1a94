"""`sandbox-agent policy explain | show`: what the policy decides, and why."""


import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.choices import RiskLevel
from executor.cli.common import RootOption, cli_errors, err_console, existing_root, out_console
from executor.errors import ConfigError
from executor.text import inert, inert_line

if TYPE_CHECKING:  # imported where used: `--help` must not load pydantic, Rich or tree-sitter
    from rich.table import Table

    from executor.policy import Policy, PolicyOverrides, ToolFacts

POLICY_FILE = Path(".sandbox-agent/policy.toml")
"""The project's policy file (executor.policy.POLICY_FILE; checked equal by a test)."""

FORMAT = (
    "Policy file format (TOML; your own: ~/.config/sandbox-agent/policy.toml): "
    '[defaults] low = "allow", medium = "ask", high = "ask", critical = "deny" (the decision per '
    "risk level when no rule matches) · [[rules]], tried top to bottom, the first match "
    'decides: tool = "write_file" (or "*"), or prefix = "git push" / regex = "rm\\s+-r" for '
    'shell commands; decision = "allow" | "ask" | "deny"; optional name and reason.'
)

app = typer.Typer(
    name="policy", help="Explain and show the tool-call policy.", no_args_is_help=True,
    epilog=FORMAT,
)

PolicyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--policy", help="Policy TOML file, kept outside the project, to use instead of the "
        "project's (your own policy, ~/.config/sandbox-agent/policy.toml, always applies).",
        dir_okay=False,
    ),
]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Approve every 'ask' up front (never a 'deny').")
]
DenyToolOption = Annotated[
    list[str] | None, typer.Option("--deny-tool", metavar="TOOL",
                                   help="Deny this tool (repeatable).")
]
DenyPrefixOption = Annotated[
    list[str] | None,
    typer.Option("--deny-prefix", metavar="PREFIX",
                 help="Deny tools whose name starts with this (repeatable)."),
]
DenyCommandOption = Annotated[
    list[str] | None,
    typer.Option("--deny-command", metavar="PROGRAM",
                 help="Deny shell commands starting with this, anywhere in a command line; "
                      "unresolvable command lines are denied too (repeatable)."),
]
ReadOnlyOption = Annotated[
    bool, typer.Option("--read-only", help="Deny tools that are not read-only safe.")
]


@app.command("explain")
@cli_errors
def explain_command(
    tool: Annotated[str, typer.Option("--tool", "-t", help="Tool name.")],
    args: Annotated[str, typer.Option("--args", "-a", help="Arguments as a JSON object.")] = "{}",
    root: RootOption = Path("."),
    policy_file: PolicyFileOption = None,
    yes: YesOption = False,
    deny_tool: DenyToolOption = None,
    deny_prefix: DenyPrefixOption = None,
    deny_command: DenyCommandOption = None,
    read_only: ReadOnlyOption = False,
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Decide as a run without a terminal.")
    ] = False,
    risk: Annotated[
        RiskLevel | None, typer.Option("--risk", help="Risk level of a tool that is not built in.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Print the decision for one call, the rule that made it and, for a shell command, how
    it was parsed: each simple command's words and what cannot be resolved statically."""
    from executor.policy import explain, shell_of

    overrides = _overrides(yes, deny_tool, deny_prefix, deny_command, read_only)
    policy = _load(root, policy_file, overrides)
    facts, arguments = tool_facts(tool, risk), parse_args(args)
    if as_json:
        decision = policy.decide(facts, arguments, interactive=not non_interactive)
        shell = shell_of(facts.name, arguments)
        parse = {"shell": shell.as_dict()} if shell else {}
        print(json.dumps({**decision.as_dict(), "policy": policy.source, **parse}, indent=2))
        return
    # The arguments and a policy file's rules and reasons are shown, never interpreted.
    text = explain(policy, facts, arguments, interactive=not non_interactive)
    out_console.print(inert(text), markup=False)


@app.command("show")
@cli_errors
def show_command(
    root: RootOption = Path("."),
    policy_file: PolicyFileOption = None,
    yes: YesOption = False,
    deny_tool: DenyToolOption = None,
    deny_prefix: DenyPrefixOption = None,
    deny_command: DenyCommandOption = None,
    read_only: ReadOnlyOption = False,
) -> None:
    """Print the effective rules in the order they are applied."""
    overrides = _overrides(yes, deny_tool, deny_prefix, deny_command, read_only)
    policy = _load(root, policy_file, overrides)
    out_console.print(f"policy: {inert_line(policy.source)}", markup=False)
    for notice in policy.notices:
        err_console.print(f"note: {inert(notice)}", markup=False)
    out_console.print(rules_table(policy))


@app.command("trust")
@cli_errors
def trust_command(
    root: RootOption = Path("."),
    show: Annotated[bool, typer.Option("--show/--no-show", help="Print the file first.")] = True,
) -> None:
    """Trust the project's policy file (.sandbox-agent/policy.toml) and its prompt skills
    (.sandbox-agent/skills/*.md) as they are now.

    Their SHA-256 hashes are recorded in your state dir, outside the project; any later change
    makes a file untrusted again (then only the policy's deny and ask rules apply, and the
    skill is left out).
    """
    from executor.policy import parse_policy
    from executor.skills import SkillFormatError, parse_skill, project_skill_files
    from executor.trust import read_project_file, trust

    existing_root(root)
    policy = read_project_file(root, POLICY_FILE.as_posix())
    skills = [f for f in (read_project_file(root, rel) for rel in project_skill_files(root)) if f]
    if policy is None and not skills:
        raise ConfigError(f"{root / POLICY_FILE} does not exist, nor any skill in "
                          f"{root / '.sandbox-agent/skills'}", fix="nothing to trust")
    if policy is not None:  # refuse a bad file
        parse_policy(policy.data.decode("utf-8", "replace"), path=str(policy.path))
    for skill in skills:
        try:
            parse_skill(skill.data, source="project", path=skill.rel)
        except SkillFormatError as exc:
            raise ConfigError(f"the skill {skill.path} is not usable: {exc}",
                              fix="fix or remove it (docs/SKILLS.md)") from None
    for file in [*([policy] if policy else []), *skills]:
        if show:
            err_console.print(f"── {inert_line(file.rel)}", markup=False)
            out_console.print(inert(file.data.decode("utf-8", "replace")), markup=False)
        trust(root, file)
        err_console.print(f"trusted {inert_line(str(file.path))} (sha256 {file.sha256[:16]}…)",
                          markup=False)


@app.command("untrust")
@cli_errors
def untrust_command(root: RootOption = Path(".")) -> None:
    """Stop trusting the project's policy file (only its deny and ask rules apply again) and
    its prompt skills (left out again)."""
    from executor.skills import project_skill_files
    from executor.trust import untrust

    existing_root(root)
    for rel in [POLICY_FILE.as_posix(), *project_skill_files(root)]:
        found = untrust(root, rel)
        what = "no longer trusted" if found else "was not trusted"
        if found or rel == POLICY_FILE.as_posix():
            err_console.print(f"{inert_line(str(root / rel))} {what}", markup=False)


def rules_table(policy: "Policy") -> "Table":
    """The effective rules as a table (their text is never read as markup, and shown inert)."""
    from rich.table import Table
    from rich.text import Text

    table = Table("#", "source", "matches", "decision", "reason")
    for number, row in enumerate(policy.describe(), 1):
        table.add_row(str(number), *(Text(inert_line(cell)) for cell in row))
    return table


def tool_facts(name: str, risk: RiskLevel | None) -> "ToolFacts":
    """A built-in tool by name, or a custom one described by `--risk`."""
    from executor.policy import ToolInfo
    from executor.tools.builtin import BUILTIN_TOOLS

    builtin = next((tool() for tool in BUILTIN_TOOLS if tool.name == name), None)
    if builtin is not None and risk is not None:
        raise ConfigError(
            f"{name} is built in with risk {builtin.risk.value}", fix="drop --risk"
        )
    if builtin is not None:
        return builtin
    if risk is None:
        known = ", ".join(tool.name for tool in BUILTIN_TOOLS)
        raise ConfigError(
            f"unknown tool {name!r} (built in: {known})",
            fix="for a custom tool, pass its --risk (low, medium, high, critical)",
        )
    return ToolInfo(name, risk, requires_approval=risk in (RiskLevel.HIGH, RiskLevel.CRITICAL))


def parse_args(text: str) -> dict[str, Any]:
    """The --args JSON object."""
    example = """e.g. --args '{"command": "ls"}'"""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--args is not valid JSON: {exc}", fix=example) from None
    if not isinstance(value, dict):
        raise ConfigError("--args must be a JSON object", fix=example)
    return value


def _load(root: Path, policy_file: Path | None, overrides: "PolicyOverrides") -> "Policy":
    """The policy a run with these flags would use: a --policy file in the project is refused
    as a run refuses it."""
    from executor.basis import check_named_file
    from executor.policy import load_policy

    existing_root(root)
    if policy_file is not None:
        check_named_file(root, policy_file, "--policy")
    return load_policy(root, policy_file, overrides)


def _overrides(
    yes: bool,
    deny_tool: list[str] | None,
    deny_prefix: list[str] | None,
    deny_command: list[str] | None,
    read_only: bool,
) -> "PolicyOverrides":
    from executor.policy import PolicyOverrides

    return PolicyOverrides(
        yes=yes,
        deny_tools=tuple(deny_tool or ()),
        deny_prefixes=tuple(deny_prefix or ()),
        deny_commands=tuple(deny_command or ()),
        read_only=read_only,
    )
