"""What a run is allowed and told, read once at its start (DESIGN.md invariant 9).

The policy (the person's own, a `--policy` file they named, or the project's as far as they
trusted it), the prompt skills and the project instructions are read when a run is built and
kept as a `Basis`. A later phase of the same run (improve's fix after its review) and every
child session (orchestrate's `delegate`) are built from these values, never from the files
again: by then the sandbox may have written them. The settings (flags, environment, user
config) travel the same way, as the run's `Settings` (`config.derive_settings`).

A file the person names for a run (`--policy`, `--skill`, `--system-prompt-file`) must lie
outside the project: as written, through every link on the way, and at its real target
(`state.reaches_into`). Inside, the repository ships it and the sandbox can rewrite it, so it
would not be the person's word. This holds for read-only runs too: a `review` of a pull
request would otherwise obey a policy the pull request ships, where a committed
`.sandbox-agent/policy.toml` only tightens until the person trusts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from executor.config import Settings
from executor.instructions import Instructions, read_project_instructions
from executor.policy import POLICY_FILE, Policy, load_policy
from executor.skills import SkillLibrary, read_skills
from executor.state import check_outside, real_root

FIXES = {
    "--policy": f"move it outside the project, or commit it as {POLICY_FILE} and trust its "
                "content with `sandbox-agent policy trust`",
    "--system-prompt-file": "move it outside the project (the repository's text for the model "
                            "belongs in AGENTS.md)",
}
"""What to do about a file named with the flag that lies in the project."""


@dataclass(frozen=True)
class Basis:
    """What a run read at its start, handed on as values to its later phases and children."""

    policy: Policy
    """The files' rules and defaults; each session puts its own flags over them
    (`Policy.with_overrides`)."""
    skills: SkillLibrary
    """Every skill the run may use; each session chooses for its command."""
    instructions: Instructions | None
    """The root's AGENTS.md as it was at the start (None: none, or not wanted)."""


def read_basis(root: Path, settings: Settings, *, policy_file: Path | None,
               instructions: bool = True) -> Basis:
    """The basis of a run on `root`: ConfigError for a named file that lies in the project,
    PolicyFileError / ConfigError for one that cannot be used."""
    if policy_file is not None:
        check_named_file(root, policy_file, "--policy")
    return Basis(
        policy=load_policy(root, policy_file),
        skills=read_skills(root, enabled=settings.skills_enabled, paths=settings.skill_paths,
                           project=settings.external_skills_enabled),
        instructions=read_project_instructions(root) if instructions else None,
    )


def check_named_file(root: Path, path: Path, flag: str) -> None:
    """ConfigError when the file named with `flag` lies in the project `root` or reaches into
    it (the sandbox and the repository could write it)."""
    check_outside(real_root(root), path, f"the {flag} file", fix=FIXES[flag])
