"""The diff a review is sent: git's diff plus untracked files as new ones, capped for the
prompt (`collect_diff`), or cut into parts that each fit the window (`split_diff`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from executor.context import TokenCounter
from executor.review.report import MAX_UNTRACKED_BYTES, DiffScope, ReviewRequest
from executor.review.shadow import Shadow, git_diff
from executor.state import open_private


def _names(output: str) -> list[str]:
    return [name for name in output.split("\0") if name]


def _untracked(shadow: Shadow) -> list[str]:
    return _names(shadow.run("ls-files", "--others", "--exclude-standard", "-z"))


def _new_file_diff(root: Path, name: str) -> str:
    """A unified diff creating `name` (read without following links; binaries not inlined)."""
    header = f"diff --git a/{name} b/{name}\nnew file (untracked)\n--- /dev/null\n+++ b/{name}\n"
    try:
        fd = open_private(root / name, os.O_RDONLY, owner=False)
    except OSError as exc:
        return header + f"(not read: {exc.strerror or exc})\n"
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(MAX_UNTRACKED_BYTES + 1)
    if len(data) > MAX_UNTRACKED_BYTES or b"\0" in data:
        return header + "(binary or large file: not shown)\n"
    lines = data.decode("utf-8", "replace").splitlines()
    return header + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)


def _per_file(diff: str) -> Iterator[tuple[str, str]]:
    """(file, its part of the diff) for each `diff --git` section."""
    for part in re.split(r"(?m)^(?=diff --git )", diff):
        if part.strip():
            match = re.match(r"diff --git a/(.*?) b/(.*)", part)
            yield (match.group(2) if match else "?"), part


def collect_diff(request: ReviewRequest) -> tuple[str, DiffScope]:
    """The diff text for the prompt (capped) and what it covers."""
    assert request.diff_base is not None
    root, base = request.root, request.diff_base
    with Shadow(root) as shadow:
        diff = git_diff(root, base, shadow)
        untracked = _untracked(shadow) if request.untracked else []
    diff += "".join(_new_file_diff(root, name) for name in untracked)
    scope = DiffScope(base=base, untracked=untracked, total_chars=len(diff))
    kept: list[str] = []
    for name, part in _per_file(diff):
        scope.files.append(name)
        room = request.max_diff_chars - scope.included_chars
        if len(part) <= room:
            kept.append(part)
            scope.included.append(name)
        elif room > 200 and not scope.partial:
            kept.append(part[:room] + f"\n[... the rest of {name}'s diff was cut ...]\n")
            scope.partial.append(name)
        else:
            scope.omitted.append(name)
            continue
        scope.included_chars += min(len(part), room)
    return "".join(kept), scope


PART_NOTE = ("This is part {part} of {parts} of the diff: review only what it shows (the "
             "other parts are reviewed apart) and call submit_review with this part's findings.")
MIN_PART_TOKENS = 256
"""A window so small that a part would be smaller still is not split further."""


def split_diff(diff: str, limit: int, counter: TokenCounter) -> list[str]:
    """`diff` in parts of at most `limit` tokens: whole files packed in order, a file too big
    by its hunks (each piece repeating the file's header), a hunk too big by lines."""
    pieces = [piece for _, part in _per_file(diff) for piece in _file_pieces(part, limit,
                                                                             counter)]
    parts: list[str] = []
    size = 0
    for piece in pieces:
        cost = counter.count_text(piece)
        if parts and size + cost <= limit:
            parts[-1] += piece
            size += cost
        else:
            parts.append(piece)
            size = cost
    return parts or [diff]


def _file_pieces(part: str, limit: int, counter: TokenCounter) -> list[str]:
    """One file's diff cut at hunks (then lines) into pieces within `limit`, header on each."""
    if counter.count_text(part) <= limit:
        return [part]
    head, *hunks = re.split(r"(?m)^(?=@@ )", part)
    room = max(MIN_PART_TOKENS, limit - counter.count_text(head))
    pieces: list[str] = []
    for hunk in hunks or [head]:
        for chunk in _lines_within(hunk, room, counter):
            pieces.append(chunk if not hunks else head + chunk)
    return pieces


def _lines_within(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """`text` cut at line ends into chunks within `limit` (a single longer line stays whole)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        cost = counter.count_text(line)
        if current and size + cost > limit:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += cost
    return [*chunks, "".join(current)] if current else chunks
