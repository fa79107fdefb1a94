"""Options that several commands share (ask, review, doctor, models), declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from executor.choices import Provider, ThinkLevel, ToolProtocol, WorkspaceMode

ProviderOpt = Annotated[
    Provider | None,
    typer.Option(
        "--provider",
        "-p",
        help="Model provider: ollama (default), openai or embedded.",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="Model name (provider default when omitted).", show_default=False
    ),
]
HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="Model server URL, e.g. http://HOST:11434 or HOST:PORT (Ollama: else "
             "$OLLAMA_HOST, else http://localhost:11434).",
        show_default=False,
    ),
]
ProtocolOpt = Annotated[
    ToolProtocol | None,
    typer.Option(
        "--tool-protocol",
        help="How tools are offered: native, json or constrained.",
        show_default=False,
    ),
]
StreamOpt = Annotated[
    bool | None,
    typer.Option("--stream/--no-stream", help="Stream model tokens to stderr.", show_default=False),
]
ThinkOpt = Annotated[
    ThinkLevel | None,
    typer.Option(
        "--think",
        help="Thinking mode: on, off, or an effort (low, medium, high). Ollama's `think`; "
        "`reasoning_effort` for OpenAI-compatible servers (low/medium/high). The reasoning "
        "streams dimmed on stderr, never into the answer.",
        show_default=False,
    ),
]
TraceOpt = Annotated[
    bool, typer.Option("--trace", help="Print every model reply and tool call in full on stderr.")
]
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-turns", min=1, help="Model turns before giving up. [default: 20]", show_default=False
    ),
]
ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image", help="Sandbox image (any image with python3 >= 3.9).", show_default=False
    ),
]
RuntimeOpt = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="OCI runtime the engine runs the sandbox with, e.g. runsc (gVisor: a user-space "
        "kernel). [default: the engine's]",
        show_default=False,
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=1,
        help="Seconds one model response may take, from the request to its last byte "
             "(each read too). [default: 300; embedded: 300 a read, 1324 a whole reply]",
        show_default=False,
    ),
]
MaxRetriesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-retries",
        min=0,
        max=20,
        help="Retries of a model request that timed out or got 429/5xx; 0: one attempt, no "
        "retry. [default: 2]",
        show_default=False,
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=256,
        help="Context budget in tokens (default: the model's, else 8192).",
        show_default=False,
    ),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        help="Your policy TOML, kept outside the project (default: the project's "
        "<root>/.sandbox-agent/policy.toml, in full only once you trusted it).",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
]
DenyToolOpt = Annotated[
    list[str] | None,
    typer.Option("--deny-tool", metavar="TOOL", help="Remove this tool (repeatable).",
                 show_default=False),
]
DenyPrefixOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--deny-prefix",
        metavar="PREFIX",
        help="Remove tools whose name starts with this (repeatable).",
        show_default=False,
    ),
]
NoAuditOpt = Annotated[bool, typer.Option("--no-audit", help="Write no audit log for this run.")]
AuditRequiredOpt = Annotated[
    bool,
    typer.Option(
        "--audit-required", help="Stop before a tool call whose audit record cannot be written."
    ),
]
AuditPromptsOpt = Annotated[
    bool, typer.Option("--audit-prompts", help="Record whole prompts in the audit log.")
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        metavar="NAME",
        help="Pass this host environment variable into the sandbox (repeatable).",
        show_default=False,
    ),
]
AllowHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        metavar="HOST[:PORT]",
        help="Let the sandbox reach this host through the audited egress proxy (repeatable; "
        "*.example.org, an address or a range such as 127.0.0.1/32:8080; without a port: 80 "
        "and 443). Default: no network at all (docs/NETWORK.md).",
        show_default=False,
    ),
]
NetworkOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--network",
        metavar="PRESET",
        help="Allow a preset's hosts (repeatable): pypi and npm (the index and registry your "
        "own pip and npm are configured with), github.",
        show_default=False,
    ),
]
SystemPromptFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--system-prompt-file",
        help="Use this file's text (kept outside the project) as the system prompt instead "
        "of the built-in one.",
        exists=True, dir_okay=False, show_default=False,
    ),
]
NoInstructionsOpt = Annotated[
    bool,
    typer.Option(
        "--no-project-instructions",
        help="Do not add the root's AGENTS.md to the system prompt (it is the repository's "
        "text for the model, never a permission).",
    ),
]


SkillOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--skill",
        metavar="PATH",
        help="Add this skill file, or a directory of *.md skills, kept outside the project, "
        "to the prompt (repeatable; docs/SKILLS.md).",
        show_default=False,
    ),
]
SkillsOpt = Annotated[
    bool | None,
    typer.Option(
        "--skills/--no-skills",
        help="Add prompt skills (bundled, yours, the project's you trusted) to the system "
        "prompt. [default: on]",
        show_default=False,
    ),
]
SkillsIncludeOpt = Annotated[
    str | None,
    typer.Option("--skills-include", metavar="ID,...", help="Only these skills.",
                 show_default=False),
]
SkillsExcludeOpt = Annotated[
    str | None,
    typer.Option("--skills-exclude", metavar="ID,...", help="Leave these skills out.",
                 show_default=False),
]
ProjectSkillsOpt = Annotated[
    bool | None,
    typer.Option(
        "--project-skills/--no-project-skills",
        help="Use the project's skills (.sandbox-agent/skills/*.md), each only once you "
        "trusted it with `sandbox-agent policy trust`. [default: on]",
        show_default=False,
    ),
]


def skill_options(paths: list[Path] | None, enabled: bool | None, include: str | None,
                  exclude: str | None, project: bool | None) -> dict[str, object]:
    """The Settings the skill flags give (only those given: the rest comes from the
    environment, the config file or the defaults)."""
    given = {"skill_paths": paths or None, "skills_enabled": enabled, "skills_include": include,
             "skills_exclude": exclude, "external_skills_enabled": project}
    return {k: v for k, v in given.items() if v is not None}


def prompt_options(root: Path, system_prompt_file: Path | None, no_instructions: bool
                   ) -> dict[str, object]:
    """The RunOptions for --system-prompt-file (read once, here; refused in the project `root`)
    and --no-project-instructions."""
    from executor.basis import check_named_file
    from executor.instructions import read_system_prompt_file

    options: dict[str, object] = {"project_instructions": not no_instructions}
    if system_prompt_file is not None:
        check_named_file(root, system_prompt_file, "--system-prompt-file")
        options["system_prompt"] = read_system_prompt_file(system_prompt_file)
    return options
WorkspaceOpt = Annotated[
    WorkspaceMode | None,
    typer.Option(
        "--workspace",
        help="bind: the sandbox writes into the project as it goes; copy: it works on a copy "
        "and its changes wait for `sandbox-agent diff` / `apply` (docs/WORKSPACES.md). "
        "[default: bind]",
        show_default=False,
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        metavar="PATTERN",
        help="Leave paths matching this gitignore-style pattern out of a copy (repeatable).",
        show_default=False,
    ),
]
CopyLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--copy-limit",
        metavar="SIZE",
        help="Refuse to copy a project bigger than this, e.g. 2g. [default: 1g]",
        show_default=False,
    ),
]
UntrackedOpt = Annotated[
    bool,
    typer.Option("--untracked/--no-untracked", help="With --diff-base: also review files "
                 "git does not track yet."),
]
