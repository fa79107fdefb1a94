"""The state of one path in a tree: kind, mode, size, content hash, link target.

A manifest maps relative paths to entries. Modes are normalised: a regular file is 0644 or
0755 (only the executable bit travels; set-id never does), a directory 0755, a link 0777. A
new file is written with its normal mode; a file written over an existing one keeps that
one's permission bits (`applied_mode`), so a private 0600 file stays private.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KINDS = ("file", "dir", "symlink")
_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_TARGET = 4096


@dataclass(frozen=True)
class Entry:
    """One path's state; files carry a hash, links a target."""

    kind: str
    mode: int = 0o644
    size: int = 0
    sha256: str | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        # Only the executable bit travels: an entry never carries a set-id or other bit.
        object.__setattr__(self, "mode", normal(self.kind, self.mode))

    @property
    def executable(self) -> bool:
        """A regular file with the executable bit."""
        return self.kind == "file" and bool(self.mode & 0o100)

    def same(self, other: Entry | None) -> bool:
        """Whether `other` is the same state (content, executable bit, link target, kind)."""
        if other is None or other.kind != self.kind:
            return False
        if self.kind == "file":
            return self.sha256 == other.sha256 and self.executable == other.executable
        if self.kind == "symlink":
            return self.target == other.target
        return True

    def row(self) -> list[Any]:
        """The compact JSON form: [kind, mode, size, sha256, target]."""
        return [self.kind, self.mode, self.size, self.sha256, self.target]

    def describe(self) -> dict[str, Any]:
        """A readable JSON form (for --json, the journal and the audit)."""
        found: dict[str, Any] = {"kind": self.kind}
        if self.kind == "file":
            found.update(mode=f"{self.mode:04o}", size=self.size, sha256=self.sha256)
        elif self.kind == "symlink":
            found["target"] = self.target
        return found


Manifest = dict[str, Entry]


def file_mode(mode: int) -> int:
    """0755 when any executable bit is set, else 0644 (never a set-id bit)."""
    return 0o755 if mode & 0o111 else 0o644


def normal(kind: str, mode: int) -> int:
    """The mode a path of this kind is copied and applied with."""
    return {"file": file_mode(mode), "dir": 0o755}.get(kind, 0o777)


def applied_mode(current: int | None, wanted: int) -> int:
    """The permission bits a file is written with: `wanted`'s normal mode for a new one; over
    an existing file with bits `current`, those bits (never wider, never set-id or sticky)
    with the executable bits following `wanted` (added where the file can be read)."""
    if current is None:
        return file_mode(wanted)
    bits = current & 0o777
    if not wanted & 0o111:
        return bits & ~0o111
    if bits & 0o111:
        return bits
    return bits | 0o100 | (bits & 0o044) >> 2


def from_row(row: Any) -> Entry:
    """An entry from its compact form; ValueError for anything malformed."""
    if not isinstance(row, list) or len(row) != 5:
        raise ValueError("an entry is [kind, mode, size, sha256, target]")
    kind, mode, size, digest, target = row
    check(kind, mode, size, digest, target)
    return Entry(kind, mode, size, digest, target)


def check(kind: Any, mode: Any, size: Any, digest: Any, target: Any) -> None:
    """ValueError unless the fields make a valid, normalised entry."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if type(mode) is not int or mode != normal(kind, mode):
        raise ValueError(f"mode {mode!r} is not the normal mode of a {kind}")
    if type(size) is not int or size < 0:
        raise ValueError("size is not a byte count")
    if kind == "file" and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise ValueError("a file needs a sha256")
    if kind == "symlink" and not valid_target(target):
        raise ValueError("a link needs a target")


def valid_target(target: Any) -> bool:
    """A link target we are willing to create: text, no NUL, not too long."""
    return (isinstance(target, str) and 0 < len(target) <= MAX_TARGET and "\0" not in target)


def manifest_rows(manifest: Manifest) -> dict[str, list[Any]]:
    """A manifest in its compact JSON form."""
    return {path: entry.row() for path, entry in manifest.items()}


def manifest_from_rows(rows: Any) -> Manifest:
    """A manifest from its compact JSON form; ValueError for anything malformed."""
    if not isinstance(rows, dict):
        raise ValueError("a manifest is an object")
    return {str(path): from_row(row) for path, row in rows.items()}
