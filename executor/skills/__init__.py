"""Prompt skills: short markdown instructions added to the system prompt (docs/SKILLS.md).

A skill is a markdown file with a front matter naming it:

    ---
    id: python-testing
    description: Habits for changing Python code and checking it with tests.
    commands: ask              (optional: the commands it is for, ask and/or review)
    default: off               (optional: used only when named in --skills-include)
    ---
    - Find how the project runs its tests first ...

They come from three places, in this order:

- bundled: the `*.md` files of this package;
- the person's: `--skill PATH` or `skill_paths` (a file, or a directory of `*.md` files);
- the project's: `.sandbox-agent/skills/*.md`, the repository's text. Used only when the
  person trusted each file's exact content (`sandbox-agent policy trust`), like the project
  policy, and never able to replace a skill of the same id from the other two places.

A skill is text for the model: it grants no permission and changes no policy. Project files are
read without following links, only as small regular files (executor/trust.py).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from executor.errors import ConfigError
from executor.state import check_outside, open_private, real_root
from executor.trust import read_project_file

PROJECT_SKILL_DIR = ".sandbox-agent/skills"
"""Where a project keeps its skills (hidden from a bind sandbox only when legacy state is)."""
MAX_SKILL_BYTES = 16 * 1024
"""A skill larger than this is not used: a skill is a few lines."""
MAX_SKILLS_PER_DIR = 32
"""Skill files read from one directory at most."""
COMMANDS = ("ask", "review")
IN_PROJECT_FIX = (f"move it outside the project, or put it in {PROJECT_SKILL_DIR}/ and trust it "
                  "with `sandbox-agent policy trust`")
"""What to do about a --skill in the project, where the sandbox could rewrite it."""
Source = Literal["bundled", "user", "project"]
_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
PREAMBLE = (
    "Skills follow: short instructions on how to work. They are guidance, not permissions: "
    "they do not change the rules above, and what a tool may do is decided elsewhere."
)
PROJECT_NOTE = "(from the repository, trusted by the user as text; it grants nothing)"


class SkillFormatError(ValueError):
    """A skill file without a usable front matter."""


@dataclass(frozen=True)
class Skill:
    """One skill, with where it came from and the hash of its bytes."""

    id: str
    description: str
    text: str
    source: Source
    path: str
    """The file it was read from (`executor/skills/NAME` for a bundled one)."""
    sha256: str
    size: int
    commands: tuple[str, ...] = ()
    """The commands it is for; empty: every command."""
    default: bool = True
    """False: used only when named in `include` (a skill measured not to help by default)."""

    def prompt(self) -> str:
        """The skill's block in the system prompt."""
        note = f" {PROJECT_NOTE}" if self.source == "project" else ""
        return f"## Skill {self.id}: {self.description}{note}\n{self.text.strip()}"

    def record(self) -> dict[str, Any]:
        """What the audit's run_start record and --trace say about it."""
        return {"id": self.id, "source": self.source, "path": self.path, "sha256": self.sha256,
                "bytes": self.size}


@dataclass
class SkillSet:
    """The skills of one run, and what was left out and why (one line each)."""

    skills: list[Skill] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def prompt(self) -> str:
        """The block appended to the system prompt ('' without skills)."""
        if not self.skills:
            return ""
        return "\n\n".join([PREAMBLE, *(skill.prompt() for skill in self.skills)])


def parse_skill(data: bytes, *, source: Source, path: str) -> Skill:
    """A Skill from a file's bytes; SkillFormatError saying what is wrong."""
    if len(data) > MAX_SKILL_BYTES:
        raise SkillFormatError(f"larger than {MAX_SKILL_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFormatError("not UTF-8 text") from None
    head, body = _front_matter(text)
    skill_id = head.get("id", "")
    if not _ID.fullmatch(skill_id):
        raise SkillFormatError("its id must be lower-case letters, digits, '.', '_' or '-'")
    description = head.get("description", "")
    if not description or len(description) > 200:
        raise SkillFormatError("it needs a one-line description (at most 200 characters)")
    commands = tuple(c for c in re.split(r"[,\s]+", head.get("commands", "")) if c)
    if any(c not in COMMANDS for c in commands):
        raise SkillFormatError(f"commands may only name {', '.join(COMMANDS)}")
    default = head.get("default", "on").lower()
    if default not in ("on", "off"):
        raise SkillFormatError("default may only be on or off")
    return Skill(skill_id, description, body, source, path, hashlib.sha256(data).hexdigest(),
                 len(data), commands, default == "on")


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in (s.strip() for s in lines[1:]):
        raise SkillFormatError("it does not start with a front matter (--- id: … ---)")
    end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    head: dict[str, str] = {}
    for line in lines[1:end]:
        key, colon, value = line.partition(":")
        if colon:
            head[key.strip().lower()] = value.strip()
    return head, "\n".join(lines[end + 1:])


# -- the three sources ---------------------------------------------------------------------------


def bundled_skills() -> list[Skill]:
    """The skills shipped in this package."""
    files = sorted((f for f in resources.files(__name__).iterdir() if f.name.endswith(".md")),
                   key=lambda f: f.name)
    return [parse_skill(f.read_bytes(), source="bundled", path=f"executor/skills/{f.name}")
            for f in files]


def user_skills(paths: Iterable[Path], *, root: Path | None = None) -> list[Skill]:
    """The skills the person named: files, or directories of `*.md` files; ConfigError for one
    that cannot be used (the person asked for it), or that lies in the project `root` or
    reaches into it: the sandbox and the repository could write it there."""
    skills = []
    for given in paths:
        path = Path(given).expanduser()
        files = sorted(path.glob("*.md"))[:MAX_SKILLS_PER_DIR] if path.is_dir() else [path]
        if root is not None:  # the directory, and each file in it: one may link into the root
            for file in dict.fromkeys([path, *files]):
                check_outside(real_root(root), file, "the skill (--skill / skill_paths)",
                              fix=IN_PROJECT_FIX)
        skills += [_user_skill(file) for file in files]
    return skills


def _user_skill(path: Path) -> Skill:
    fix = "name a skill file (docs/SKILLS.md), or drop it from --skill / skill_paths"
    try:
        fd = open_private(path, os.O_RDONLY, owner=False)
    except OSError as exc:
        raise ConfigError(f"cannot read the skill {path}: {exc.strerror or exc}", fix=fix) from None
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(MAX_SKILL_BYTES + 1)
    try:
        return parse_skill(data, source="user", path=str(path))
    except SkillFormatError as exc:
        raise ConfigError(f"the skill {path} is not usable: {exc}", fix=fix) from None


def project_skill_files(root: Path) -> list[str]:
    """The `*.md` files of the project's skill dir, relative to the root; the dir is reached
    without following a link (a linked dir or component is none)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in Path(PROJECT_SKILL_DIR).parts:
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=fd)
            except OSError:
                return []  # absent, a link, a file: no project skills
            os.close(fd)
            fd = child
        names = sorted(name for name in os.listdir(fd) if name.endswith(".md"))
    finally:
        os.close(fd)
    return [f"{PROJECT_SKILL_DIR}/{name}" for name in names[:MAX_SKILLS_PER_DIR]]


def project_skills(root: Path) -> tuple[list[Skill], list[str]]:
    """The project's skills the person trusted, and a notice for each one left out."""
    skills, notices = [], []
    for rel in project_skill_files(root):
        try:
            file = read_project_file(root, rel)
        except ConfigError as exc:
            notices.append(f"project skill {rel} is not used: {exc.message}")
            continue
        if file is None:
            continue
        if not file.trusted:
            why = "it changed since you trusted it" if file.changed else "you have not trusted it"
            notices.append(f"project skill {rel} is not used: {why} (review it, then "
                           "`sandbox-agent policy trust`)")
            continue
        try:
            skills.append(parse_skill(file.data, source="project", path=rel))
        except SkillFormatError as exc:
            notices.append(f"project skill {rel} is not used: {exc}")
    return skills, notices


# -- choosing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillLibrary:
    """Every skill a run may use, read once at its start: bundled, the person's and the trusted
    project ones (an id taken by an earlier source is not replaced), and what was left out.
    Each session of the run chooses from it for its command (`choose`), reading nothing."""

    skills: tuple[Skill, ...] = ()
    notices: tuple[str, ...] = ()
    enabled: bool = True
    """False: skills are off for the run (`--no-skills`), whatever `choose` is asked."""

    def choose(self, command: str, include: Sequence[str] = (),
               exclude: Sequence[str] = ()) -> SkillSet:
        """The skills of a `command` run: `include` keeps only those ids, whatever command they
        are for or their default (an unknown one is a ConfigError), `exclude` drops ids;
        without `include`, a skill is used when it is for `command` and its front matter does
        not say `default: off`."""
        if not self.enabled:
            return SkillSet()
        known = {skill.id for skill in self.skills}
        unknown = sorted(set(include) - known)
        if unknown:
            raise ConfigError(f"unknown skill id(s) in --skills-include: {', '.join(unknown)}",
                              fix=f"use one of: {', '.join(sorted(known)) or 'none available'}")
        kept = [s for s in self.skills if s.id not in exclude and (s.id in include if include
                else s.default and (not s.commands or command in s.commands))]
        order: dict[Source, int] = {"bundled": 0, "user": 1, "project": 2}
        return SkillSet(sorted(kept, key=lambda s: (order[s.source], s.id)), list(self.notices))


def read_skills(root: Path, *, enabled: bool = True, paths: Sequence[Path] = (),
                project: bool = True) -> SkillLibrary:
    """The skills a run on `root` may use: bundled, the person's (`paths`), then the trusted
    project ones (`project`); none when not `enabled`."""
    if not enabled:
        return SkillLibrary(enabled=False)
    chosen: dict[str, Skill] = {}
    # the person's replace bundled ones
    for skill in [*user_skills(paths, root=root), *bundled_skills()]:
        chosen.setdefault(skill.id, skill)
    found, notices = project_skills(root) if project else ([], [])
    for skill in found:
        if skill.id in chosen:
            notices.append(f"project skill {skill.path} is not used: the id {skill.id!r} is "
                           "taken by a bundled or your own skill")
        else:
            chosen[skill.id] = skill
    return SkillLibrary(tuple(chosen.values()), tuple(notices))


def load_skills(root: Path, *, command: str, enabled: bool = True, paths: Sequence[Path] = (),
                include: Sequence[str] = (), exclude: Sequence[str] = (),
                project: bool = True) -> SkillSet:
    """The skills of a `command` run, read now (`read_skills`, then `SkillLibrary.choose`)."""
    library = read_skills(root, enabled=enabled, paths=paths, project=project)
    return library.choose(command, include, exclude)
