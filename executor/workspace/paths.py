"""Which relative paths a changeset may hold, and the gitignore-style excludes of a copy.

A path that comes back from the sandbox is hostile until checked: it must be relative, have
no empty, `.` or `..` component, no NUL, no component named `.git` (in any case) or starting
with `.git.quarantined-`, and not start with the legacy in-tree state dir. `problem` says why
one is refused; None means it is fine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from executor.state import LEGACY_DIR

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
QUARANTINE = ".git.quarantined-"
"""What the toolbox renames a `.git` made in the sandbox to."""


def is_git_name(name: str) -> bool:
    """`.git` in any case (a case-insensitive host takes `.GIT` for it), or a quarantined one."""
    return name.lower() == ".git" or name.startswith(QUARANTINE)


def problem(path: object) -> str | None:
    """Why `path` may not be in a changeset, or None when it may."""
    if not isinstance(path, str) or not path:
        return "not a path"
    if "\0" in path:
        return "contains a NUL byte"
    if path.startswith("/"):
        return "absolute path"
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        return "path too long"
    parts = path.split("/")
    flags = [_part_flags(part) for part in parts]
    if any(plain for plain, _, _ in flags):
        return "not a plain relative path ('', '.' or '..' component)"
    if any(long for _, long, _ in flags):
        return "name too long"
    if any(git for _, _, git in flags):
        return "inside a git repository (.git is never applied)"
    if parts[0] == LEGACY_DIR:
        return f"{LEGACY_DIR} is reserved"
    return None


@functools.lru_cache(maxsize=1 << 16)
def _part_flags(part: str) -> tuple[bool, bool, bool]:
    """(not plain, too long, git) for one component: a big tree repeats its folders' names."""
    return (part in ("", ".", ".."), len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES,
            is_git_name(part))


def parent_of(path: str) -> str:
    """The parent of a relative path ('' for a top-level one)."""
    return path.rpartition("/")[0]


def sort_key(path: str) -> tuple[str, ...]:
    """Parents before their children (pre-order), siblings by name."""
    return tuple(path.split("/"))


# ---------------------------------------------------------------------------- excludes


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


class Excludes:
    """gitignore-style patterns: `*`, `?`, `[...]`, `**`, a leading `/` anchors, a trailing `/`
    matches directories only, `!` re-includes, `#` starts a comment; the last match wins."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self.patterns = [p for p in patterns if p.strip() and not p.lstrip().startswith("#")]
        self._rules = [_rule(p) for p in self.patterns]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excluded(self, path: str, is_dir: bool) -> bool:
        """Whether `path` (relative, '/'-separated) is left out."""
        verdict = False
        for rule in self._rules:
            if (not rule.dir_only or is_dir) and rule.regex.fullmatch(path):
                verdict = not rule.negate
        return verdict


def _rule(pattern: str) -> _Rule:
    text = pattern.rstrip()
    if text.endswith("\\") and pattern != text:  # "foo\ " keeps its escaped trailing space
        text += " "
    negate = text.startswith("!")
    text = text[1:] if negate or text.startswith("\\") else text
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    anchored = "/" in text
    body = _glob(text.lstrip("/"))
    regex = body if anchored else f"(?:.*/)?{body}"
    return _Rule(re.compile(regex, re.DOTALL), negate, dir_only)


def _glob(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif text.startswith("/**", i) and i + 3 == len(text):
            out.append("/.*")
            i += 3
        elif text.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            piece, i = _glob_char(text, i)
            out.append(piece)
    return "".join(out)


def _glob_char(text: str, i: int) -> tuple[str, int]:
    char = text[i]
    if char == "*":
        return "[^/]*", i + 1
    if char == "?":
        return "[^/]", i + 1
    if char == "\\" and i + 1 < len(text):
        return re.escape(text[i + 1]), i + 2
    if char == "[":
        end = text.find("]", i + 2)
        if end != -1:
            inner = text[i + 1:end]
            inner = "^" + inner[1:] if inner.startswith("!") else inner
            return f"[{inner.replace(chr(92), chr(92) * 2)}]", end + 1
    return re.escape(char), i + 1
