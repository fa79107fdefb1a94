"""The flags `ask`, `orchestrate`, `review` and `improve` share, declared once: `RunFlags`.

A command takes the group as one parameter, `flags: RunFlags`, and says with `run_flags(...)`
which of its flags it offers; typer sees each offered flag as an ordinary option (in this
file's order, after `--root` and the command's own parameters). A flag a command does not
offer keeps its default, which asks for nothing, so one `RunFlags.options()` serves them all.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from executor.cli.common import RootOption
from executor.cli.options import (
    AllowHostOpt,
    AuditPromptsOpt,
    AuditRequiredOpt,
    CopyLimitOpt,
    DenyPrefixOpt,
    DenyToolOpt,
    EnvOpt,
    ExcludeOpt,
    HostOpt,
    ImageOpt,
    MaxRetriesOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    ModelOpt,
    NetworkOpt,
    NoAuditOpt,
    NoInstructionsOpt,
    PolicyOpt,
    ProjectSkillsOpt,
    ProtocolOpt,
    ProviderOpt,
    RuntimeOpt,
    SkillOpt,
    SkillsExcludeOpt,
    SkillsIncludeOpt,
    SkillsOpt,
    StreamOpt,
    SystemPromptFileOpt,
    ThinkOpt,
    TimeoutOpt,
    TraceOpt,
    WorkspaceOpt,
    prompt_options,
    skill_options,
)
from executor.errors import ConfigError


@dataclass(frozen=True)
class RunFlags:
    """What the person asked for on the command line of a run (defaults: nothing asked)."""

    root: RootOption = Path(".")
    provider: ProviderOpt = None
    model: ModelOpt = None
    host: HostOpt = None
    tool_protocol: ProtocolOpt = None
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Mount the project read-only; no write tools.")
    ] = False
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Approve writes and commands up front (policy denials still apply)."
        ),
    ] = False
    auto_edit: Annotated[
        bool,
        typer.Option("--auto-edit", help="Approve file writes and edits up front (they stay in "
                     "the project); shell commands still ask. Audited as --auto-edit."),
    ] = False
    stream: StreamOpt = None
    think: ThinkOpt = None
    trace: TraceOpt = False
    max_turns: MaxTurnsOpt = None
    image: ImageOpt = None
    runtime: RuntimeOpt = None
    timeout: TimeoutOpt = None
    max_retries: MaxRetriesOpt = None
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive", "-i",
            help="A REPL: several requests in one session and one container (line editing, "
            "history, /help for its commands; Ctrl-C cancels a request).",
        ),
    ] = False
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Name the session (or pick the one to --resume).",
                     show_default=False),
    ] = None
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue --session, or this root's most recent session "
                     "(never a delegated child's)."),
    ] = False
    continue_: Annotated[
        bool,
        typer.Option("--continue", "-c", help="Continue this root's most recent session (as "
                     "--resume); with no query at a terminal, in the REPL."),
    ] = False
    max_tokens: MaxTokensOpt = None
    context_summarize: Annotated[
        bool,
        typer.Option("--context-summarize",
                     help="Summarize dropped context instead of dropping it."),
    ] = False
    policy: PolicyOpt = None
    deny_tool: DenyToolOpt = None
    deny_prefix: DenyPrefixOpt = None
    deny_command: Annotated[
        list[str] | None,
        typer.Option(
            "--deny-command", metavar="PROGRAM",
            help="Deny shell commands running this program (and these words), however they are "
            "spelled; commands that cannot be checked are denied too (repeatable).",
            show_default=False,
        ),
    ] = None
    env: EnvOpt = None
    allow_host: AllowHostOpt = None
    network: NetworkOpt = None
    allow_git_writes: Annotated[
        bool,
        typer.Option("--allow-git-writes",
                     help="Mount .git read-write (hooks planted there run on the host later)."),
    ] = False
    disk_budget: Annotated[
        str | None,
        typer.Option(
            "--disk-budget", metavar="SIZE",
            help="How much the project may grow in this session, e.g. 500m or 2g; 0: no "
            "limit. [default: 1g]",
            show_default=False,
        ),
    ] = None
    no_audit: NoAuditOpt = False
    audit_required: AuditRequiredOpt = False
    audit_prompts: AuditPromptsOpt = False
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object with the answer, tool calls, changes "
                     "and usage when the run ends (docs/CLI_JSON.md)."),
    ] = False
    json_stream: Annotated[
        bool,
        typer.Option("--json-stream", help="Print one JSON event a line as the run goes, the "
                     "--json object last."),
    ] = False
    fail_on_denied: Annotated[
        bool, typer.Option("--fail-on-denied", help="Exit 32 when any tool call was denied.")
    ] = False
    system_prompt_file: SystemPromptFileOpt = None
    no_project_instructions: NoInstructionsOpt = False
    skill: SkillOpt = None
    skills: SkillsOpt = None
    skills_include: SkillsIncludeOpt = None
    skills_exclude: SkillsExcludeOpt = None
    project_skills: ProjectSkillsOpt = None
    workspace: WorkspaceOpt = None
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Copy workspace: apply the changes at the end (asks at a terminal; without "
            "one it needs --yes); files changed on the host meanwhile are refused (exit 61).",
        ),
    ] = False
    exclude: ExcludeOpt = None
    copy_limit: CopyLimitOpt = None
    no_confirm_delegation: Annotated[
        bool, typer.Option("--no-confirm-delegation", help="Run delegate calls without asking "
                           "(a policy deny still wins).")
    ] = False
    max_delegations: Annotated[
        int | None,
        typer.Option("--max-delegations", min=0, help="Child sessions one session may start. "
                     "[default: 3]", show_default=False),
    ] = None

    def options(self, *, orchestrator: bool = False) -> dict[str, Any]:
        """The Settings and RunOptions these flags ask for (only those given: the rest comes
        from SANDBOX_AGENT_*, the config file or the defaults)."""
        given = _given(
            provider=self.provider, model=self.model, host=self.host,
            tool_protocol=self.tool_protocol, stream=self.stream, max_turns=self.max_turns,
            image=self.image, runtime=self.runtime, timeout=self.timeout,
            max_retries=self.max_retries, think=self.think, max_tokens=self.max_tokens,
            env_allow=self.env, deny_tools=self.deny_tool, deny_prefixes=self.deny_prefix,
            deny_commands=self.deny_command, policy_file=self.policy, session=self.session,
            disk_budget=self.disk_budget, workspace=self.workspace, copy_exclude=self.exclude,
            copy_limit=self.copy_limit, allow_host_flags=self.allow_host,
            network_flags=self.network, allow_git_writes=self.allow_git_writes or None,
        )
        switches = {"read_only": self.read_only, "yes": self.yes, "auto_edit": self.auto_edit,
                    "resume": self.resume or self.continue_,
                    "context_summarize": self.context_summarize,
                    "audit_required": self.audit_required, "audit_prompts": self.audit_prompts}
        return given | switches \
            | prompt_options(self.root, self.system_prompt_file, self.no_project_instructions) \
            | skill_options(self.skill, self.skills, self.skills_include, self.skills_exclude,
                            self.project_skills) \
            | self._delegation(orchestrator)

    def _delegation(self, orchestrator: bool) -> dict[str, Any]:
        """RunOptions for delegation; its flags are refused on a plain `ask`."""
        if not orchestrator and (self.no_confirm_delegation or self.max_delegations is not None):
            raise ConfigError("--no-confirm-delegation and --max-delegations are for orchestrate",
                              fix="run `sandbox-agent orchestrate ...`, or drop them")
        options: dict[str, Any] = {"orchestrator": orchestrator,
                                   "confirm_delegation": not self.no_confirm_delegation}
        if self.max_delegations is not None:
            options["max_delegations"] = self.max_delegations
        return options


def _given(**values: Any) -> dict[str, Any]:
    """Only the flags that were given: the rest comes from SANDBOX_AGENT_* or the defaults."""
    return {k: v for k, v in values.items() if v is not None and v != []}


# -- which command offers which ------------------------------------------------------------------

MODEL = ("provider", "model", "host", "tool_protocol", "stream", "think", "trace", "max_turns",
         "image", "runtime", "timeout", "max_retries", "max_tokens")
"""The model and sandbox flags every run takes."""
SKILLS = ("no_project_instructions", "skill", "skills", "skills_include", "skills_exclude",
          "project_skills")
DELEGATION = ("no_confirm_delegation", "max_delegations")
"""orchestrate's own: refused on ask (one clear error), so hidden there, not unknown."""
ASK = tuple(f.name for f in dataclasses.fields(RunFlags))
REVIEW = ("root", *MODEL, "policy", "deny_tool", "deny_prefix", "no_audit", "audit_required",
          "system_prompt_file", *SKILLS, "workspace", "exclude")
IMPROVE = ("root", *MODEL, "policy", "no_audit", "audit_required", *SKILLS, "exclude",
           "copy_limit")

_Command = Callable[..., None]


def run_flags(offered: Collection[str], *, hidden: Collection[str] = ()
              ) -> Callable[[_Command], _Command]:
    """Give a command whose last parameter is `flags: RunFlags` the `offered` flags as
    options (`hidden` ones parse but do not show in --help)."""
    fields = typing.get_type_hints(RunFlags, include_extras=True)
    defaults = {f.name: f.default for f in dataclasses.fields(RunFlags)}

    def decorate(command: _Command) -> _Command:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)  # typer passes names, not places
               for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.name != "flags"]
        mine = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name],
                                  annotation=_hide(fields[name]) if name in hidden
                                  else fields[name])
                for name in sorted(offered, key=list(defaults).index)]

        @functools.wraps(command)
        def parsed(**values: Any) -> None:
            flags = RunFlags(**{name: values.pop(name) for name in offered})
            command(**values, flags=flags)

        parameters = [*mine[:1], *own, *mine[1:]] if mine[:1] and mine[0].name == "root" \
            else [*own, *mine]
        parsed.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        parsed.__annotations__ = {p.name: p.annotation for p in parameters}
        return parsed

    return decorate


def _hide(annotation: Any) -> Any:
    """`Annotated[T, typer.Option(...)]` with the option hidden from --help."""
    base, info = typing.get_args(annotation)
    hidden = copy.copy(info)
    hidden.hidden = True
    return Annotated[base, hidden]
