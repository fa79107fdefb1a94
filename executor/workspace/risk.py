"""Which changes deserve a second look: paths people later run, or that steer their tools.

A change is flagged when it touches what runs on the host without anyone reading it first:
git and CI configuration, hook directories, build and task files, shell scripts, a
`package.json` whose `scripts` changed, a file that gains the executable bit, and links
(a new link, or one that leads out of the project: judged by following the links on the way,
not by the target's text). The flags are words for a person, not a verdict: `diff` and
`apply` show them above the change.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable

from executor.workspace.manifest import Entry

RUNS = "runs on the host"
TOOLING = "steers tooling"

_NAMES = {
    # build and task runners: a target runs whatever the file says
    "makefile": RUNS, "gnumakefile": RUNS, "justfile": RUNS, "rakefile": RUNS,
    "taskfile.yml": RUNS, "taskfile.yaml": RUNS, "jenkinsfile": RUNS, "dockerfile": RUNS,
    "build.rs": RUNS, "setup.py": RUNS, "conftest.py": RUNS, "noxfile.py": RUNS,
    "tasks.py": RUNS, "gulpfile.js": RUNS, "gruntfile.js": RUNS, "build.gradle": RUNS,
    "build.gradle.kts": RUNS, "pom.xml": RUNS, "cmakelists.txt": RUNS, "meson.build": RUNS,
    "sconstruct": RUNS, "configure": RUNS, "docker-compose.yml": RUNS,
    "docker-compose.yaml": RUNS, "compose.yml": RUNS, "compose.yaml": RUNS,
    ".envrc": RUNS, "tox.ini": RUNS, "pyproject.toml": TOOLING, "setup.cfg": TOOLING,
    "cargo.toml": TOOLING, ".pre-commit-config.yaml": RUNS, "lefthook.yml": RUNS,
    ".lefthook.yml": RUNS, ".gitlab-ci.yml": RUNS, ".travis.yml": RUNS,
    "azure-pipelines.yml": RUNS, "bitbucket-pipelines.yml": RUNS, ".drone.yml": RUNS,
    ".npmrc": TOOLING, ".yarnrc": TOOLING, ".yarnrc.yml": TOOLING, ".bashrc": RUNS,
    ".profile": RUNS, ".zshrc": RUNS,
    "head": "a git repository's part", "commondir": "a git repository's part",
}
_SUFFIXES = {".sh": RUNS, ".bash": RUNS, ".zsh": RUNS, ".fish": RUNS, ".ps1": RUNS,
             ".bat": RUNS, ".cmd": RUNS, ".mk": RUNS, ".command": RUNS}
_DIRS = {  # a path inside one of these (at any depth)
    ".github": "CI / GitHub configuration", ".circleci": "CI configuration",
    ".buildkite": "CI configuration", ".gitlab": "CI configuration",
    ".husky": "git hooks", ".githooks": "git hooks", ".git-hooks": "git hooks",
    ".vscode": "editor tasks", ".idea": "editor configuration", ".devcontainer": RUNS,
}
_TOP_DIRS = {"hooks": "hooks directory", "scripts": "scripts directory", "bin": RUNS}
"""Only at the top of the project (src/hooks/ of a web app is code, not a hook)."""


def flags(path: str, before: Entry | None, after: Entry | None,
          content: Callable[[str], bytes | None], *,
          leaves: Callable[[str, str], bool] | None = None) -> list[str]:
    """Why this change deserves a second look (empty: nothing special).

    `content(sha256)` returns a blob's bytes, or None when it is not kept. `leaves(path,
    target)` says whether a link leads out of the project once the changes are applied
    (resolve.leaves_root, which follows the links on the way); without it only the target's
    text is judged.
    """
    found = _by_path(path)
    if after is not None and after.kind == "file" and after.executable and not (
            before is not None and before.executable):
        found.append("gains the executable bit")
    if after is not None and after.kind == "symlink":
        found.append(_link_flag(path, before, after, leaves or leaves_root))
    if posixpath.basename(path) == "package.json" and after is not None:
        found += _package_scripts(before, after, content)
    return list(dict.fromkeys(found))


def _by_path(path: str) -> list[str]:
    parts = path.lower().split("/")
    name, found = parts[-1], []
    if name in _NAMES:
        found.append(f"{_NAMES[name]} ({posixpath.basename(path)})")
    suffix = posixpath.splitext(name)[1]
    if suffix in _SUFFIXES:
        found.append(f"{_SUFFIXES[suffix]} (*{suffix})")
    if name.startswith(".git") and name != ".git":
        found.append(f"git configuration ({posixpath.basename(path)})")
    for part in parts[:-1]:
        if part in _DIRS:
            found.append(f"{_DIRS[part]} ({part}/)")
    if len(parts) > 1 and parts[0] in _TOP_DIRS:
        found.append(f"{_TOP_DIRS[parts[0]]} ({parts[0]}/)")
    return found


def _link_flag(path: str, before: Entry | None, after: Entry,
               leaves: Callable[[str, str], bool]) -> str:
    target = after.target or ""
    if leaves_root(path, target) or leaves(path, target):
        return f"link leaving the project (-> {target})"
    if before is None or before.kind != "symlink":
        return f"new link (-> {target})"
    return f"link retargeted (-> {target})"


def leaves_root(path: str, target: str) -> bool:
    """Whether the text of `target` alone (a link at `path`) leads outside the project."""
    if target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return resolved == ".." or resolved.startswith("../")


def _package_scripts(before: Entry | None, after: Entry,
                     content: Callable[[str], bytes | None]) -> list[str]:
    old = _scripts(before, content) if before is not None else {}
    new = _scripts(after, content)
    if new is None or old is None:
        return ["package.json that could not be read (scripts unknown)"]
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if not changed:
        return []
    return [f"package.json scripts changed ({', '.join(changed[:5])})"]


def _scripts(entry: Entry, content: Callable[[str], bytes | None]) -> dict[str, object] | None:
    if entry.kind != "file" or entry.sha256 is None:
        return {}
    data = content(entry.sha256)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return {}
    scripts = value.get("scripts")
    found = dict(scripts) if isinstance(scripts, dict) else {}
    for key in ("bin", "main", "preinstall", "install", "postinstall", "prepare"):
        if key in value:  # also run on install, outside "scripts"
            found[f"({key})"] = value[key]
    return found
