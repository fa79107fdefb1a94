"""What a run is given: its options, the approver's answer, the default prompts, and the
helpers that turn `Runner.build`'s keywords into settings, tools and policy overrides."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError

from executor.config import Settings, derive_settings, load_settings
from executor.delegation import DEFAULT_DELEGATION_DEPTH, DEFAULT_MAX_DELEGATIONS
from executor.errors import ConfigError
from executor.policy import Decision, PolicyOverrides
from executor.protocols import Sandbox
from executor.sandbox.docker import SandboxConfig
from executor.tools import Preview, Tool, ToolRegistry, default_registry

SandboxFactory = Callable[[SandboxConfig], Sandbox]
"""Makes a session's sandbox from its configuration (the default: a `DockerSandbox`)."""


SYSTEM_PROMPT = (
    "You are a coding agent working on the project in /workspace; tool paths are relative to "
    "it. Look at files before changing them, make small exact edits, and run commands to check "
    "your work (python3; there is no network unless said below). When you are done, answer "
    "briefly with what you did or found."
)


READ_ONLY_NOTE = " This run is read-only: you can list, read and search files, not change them."


SUMMARY_PROMPT = (
    "Summarize this earlier part of a coding session in a few sentences: what was asked, which "
    "files were read or changed, what was found, and what remains to do."
)


class RunOptions(BaseModel):
    """Per-run choices that are not environment settings (flags of `ask` / `review`)."""

    root: Path
    """Project root (must exist)."""
    read_only: bool = False
    """Mount the root read-only and offer no write tools."""
    yes: bool = False
    """Approve every `ask` decision up front (never overrides `deny`)."""
    auto_edit: bool = False
    """Approve an `ask` for write_file / edit_file up front; commands still ask."""
    deny_tools: list[str] = Field(default_factory=list)
    """Tools removed before the model sees them (and denied if called)."""
    deny_prefixes: list[str] = Field(default_factory=list)
    """Tools whose name starts with one of these are removed and denied."""
    deny_commands: list[str] = Field(default_factory=list)
    """Shell commands starting with one of these are denied."""
    policy_file: Path | None = None
    """A policy TOML the person names, outside the project (default: the project's, as far as
    they trusted it)."""
    session: str | None = None
    """Session name (generated when None)."""
    resume: bool = False
    """Continue `session`, or the most recent session of the root."""
    interactive: bool = False
    """A person answers approval prompts (otherwise `ask` fails closed)."""
    audit_required: bool = False
    """Stop the run when an audit record cannot be written."""
    audit_prompts: bool = False
    """Record whole prompts in the audit log."""
    context_summarize: bool = False
    """Summarize dropped context instead of only dropping it."""
    argv: list[str] = Field(default_factory=list)
    """Command line, for the audit record (secrets are redacted there)."""
    system_prompt: str | None = None
    """Replaces the default system prompt."""
    sandbox_warm_up: float | None = None
    """None: the container starts in `start()`. Seconds: it starts at the first tool call, or
    in the background that long into a run (0: as soon as the runner starts), whichever comes
    first, so a run whose model calls no tool never waits for a container."""
    project_instructions: bool = True
    """Add the root's AGENTS.md to the system prompt (as the repository's text, no permission)."""
    skills_for: str = "ask"
    """The command running (ask or review): picks the skills meant for it (docs/SKILLS.md)."""
    orchestrator: bool = False
    """Offer the `delegate` tool: sub-tasks go to child sessions (docs/DELEGATION.md)."""
    confirm_delegation: bool = True
    """A `delegate` call needs approval like any high-risk call (False: waived by the person)."""
    max_delegations: int = Field(DEFAULT_MAX_DELEGATIONS, ge=0)
    """Child sessions this session may start."""
    delegation_depth: int = Field(DEFAULT_DELEGATION_DEPTH, ge=1)
    """How deep delegation goes (1: children do not delegate)."""
    depth: int = 0
    """This session's depth: 0 for a session a person started, 1 for its children ..."""
    parent_session: str | None = None
    """The session that delegated to this one."""
    allow_host_flags: list[str] = Field(default_factory=list)
    """Hosts the sandbox may reach (--allow-host), besides the user config's `allow_hosts`."""
    network_flags: list[str] = Field(default_factory=list)
    """Network presets (--network pypi|npm|github), besides the user config's `network`."""


@dataclass(frozen=True)
class Approval:
    """A person's answer to an approval prompt."""

    approved: bool
    by: str = "user"
    """Who approved, for the audit: `user`, or `user:session` for a grant given earlier in the
    session ("always allow")."""
    reason: str = ""
    """Why not, in the person's words: the model is told, as the call's result."""


class Approver(Protocol):
    """Asks a person whether a call may run, showing them `preview` (what it will really do).

    It answers True/False, or an `Approval` that also says who approved or why not.
    """

    def __call__(
        self, tool: Tool, args: BaseModel, decision: Decision, preview: Preview
    ) -> bool | Approval:
        ...


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    settings = {k: v for k, v in options.items() if k in Settings.model_fields}
    run = {k: v for k, v in options.items() if k in RunOptions.model_fields}
    unknown = set(options) - set(settings) - set(run)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    return settings, run


def settings_over(base: Settings | None, values: dict[str, Any]) -> Settings:
    """`values` over `base` (nothing is read again); without a base, over the environment,
    the user config and the defaults."""
    if base is None:
        return load_settings(values)
    try:
        return derive_settings(base, values)
    except ValidationError as exc:
        raise ConfigError(first_error(exc)) from None


def registry_for(extra: Iterable[Tool], run: RunOptions) -> ToolRegistry:
    registry = default_registry()
    for tool in extra:
        registry.register(tool)
    return registry.filtered(read_only=run.read_only, deny=run.deny_tools,
                             deny_prefixes=run.deny_prefixes)


def overrides_for(run: RunOptions) -> PolicyOverrides:
    return PolicyOverrides(
        yes=run.yes, deny_tools=tuple(run.deny_tools), deny_prefixes=tuple(run.deny_prefixes),
        deny_commands=tuple(run.deny_commands), read_only=run.read_only,
        auto_edit=run.auto_edit,
    )


def is_sandbox(value: object) -> bool:
    """A Sandbox rather than a factory (checked on the class: `info` may not be ready yet)."""
    return all(callable(getattr(type(value), name, None)) for name in ("start", "stop", "call"))


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"invalid value for {where}: {err['msg']}"
