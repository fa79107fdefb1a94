"""What a person reads about pending changes: a unified diff, a stat, JSON, a summary.

Text from the sandbox (paths, file contents, link targets) is made inert before it reaches a
terminal by `executor.text.inert`, the one function every command uses: control characters
(escape sequences, carriage returns, backspaces), Unicode bidirectional overrides and invisible
format characters (zero-width, U+2028/2029, U+FEFF, tags) are shown as `\\x1b`-style escapes,
never interpreted.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from executor.text import inert, inert_line
from executor.workspace.changes import Change, Changeset, Matcher, text_lines
from executor.workspace.manifest import Entry, applied_mode
from executor.workspace.store import BlobStore

Content = Callable[[str], bytes | None]
MAX_SUMMARY_LINES = 15


def reader(blobs: BlobStore) -> Content:
    """Blob contents by sha256, None when not kept (or unreadable)."""
    def read(digest: str) -> bytes | None:
        try:
            return blobs.get(digest)
        except Exception:  # a missing or damaged blob only means "not shown"
            return None
    return read


# ---------------------------------------------------------------------------- diff


def diff(changes: list[Change], content: Content, *, safe: bool) -> Iterator[str]:
    """Unified diff lines (each ending in a newline); `safe`: made inert for a terminal."""
    for change in changes:
        for line in _file_diff(change, content):
            yield inert(line) if safe else line


_COLOURS = (("!!", "\x1b[1;33m"), ("diff --", "\x1b[1m"), ("+++", "\x1b[1m"), ("---", "\x1b[1m"),
            ("@@", "\x1b[36m"), ("+", "\x1b[32m"), ("-", "\x1b[31m"))
"""Line starts and their colour, as git colours a diff (the first that matches)."""


def coloured(lines: Iterable[str]) -> Iterator[str]:
    """Diff lines (already inert) coloured for a terminal; only our own escape codes."""
    for line in lines:
        colour = next((c for start, c in _COLOURS if line.startswith(start)), None)
        body = line.removesuffix("\n")
        yield f"{colour}{body}\x1b[0m\n" if colour and body else line


def for_terminal(lines: Iterable[str]) -> Iterable[str]:
    """`lines` coloured when stdout is a terminal and NO_COLOR is not set."""
    import os
    import sys

    return coloured(lines) if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else lines


_GIT_NAMED = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r",
              34: '\\"', 92: "\\\\"}


def git_quoted(name: str) -> str:
    """A path as git writes it in a patch: as it is, or C-quoted in double quotes when it holds
    a control character, a quote or a backslash (`"a/line\\nbreak.txt"`; `git apply` reads
    it back), so no name can start a line of its own in what a person reviews or applies."""
    raw = name.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b == 0x7F or b in (34, 92) for b in raw) and not re.search(
            "[\x80-\x9f\udc80-\udcff]", name):
        return name
    out = []
    for char in name:
        data = char.encode("utf-8", "surrogateescape")
        if len(data) == 1 and data[0] in _GIT_NAMED:
            out.append(_GIT_NAMED[data[0]])
        elif any(b < 0x20 or b == 0x7F for b in data) or "\x80" <= char <= "\x9f" or (
                "\udc80" <= char <= "\udcff"):
            out.append("".join(f"\\{b:03o}" for b in data))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _file_diff(change: Change, content: Content) -> Iterator[str]:
    path, before, after = change.path, change.before, change.after
    for flag in change.flags:
        yield f"!! {inert_line(flag)}\n"
    yield f"diff --sandbox-agent {git_quoted('a/' + path)} {git_quoted('b/' + path)}\n"
    yield from _headers(before, after, change.host_bits)
    if {_kind(before), _kind(after)} <= {"dir", None}:
        return  # a directory has no content to show
    yield from _content_lines(path, before, after, content, as_text=bool(change.flags))


def _kind(entry: Entry | None) -> str | None:
    return None if entry is None else entry.kind


def _headers(before: Entry | None, after: Entry | None, host_bits: int | None
             ) -> Iterator[str]:
    """`new file mode`, `deleted file mode`, `old mode`/`new mode` as git writes them; with
    the file's bits in the tree now (`host_bits`), the modes it has and will have."""
    if before is None and after is not None:
        yield f"new {_what(after)}\n"
    elif after is None and before is not None:
        yield f"deleted {_what(before, host_bits)}\n"
    elif before is not None and after is not None:
        if before.kind != after.kind:
            yield f"was {_what(before, host_bits)}, now {_what(after)}\n"
        elif before.kind == "file":
            old = before.mode if host_bits is None else host_bits
            new = after.mode if host_bits is None else applied_mode(host_bits, after.mode)
            if old != new:
                yield f"old mode {_mode(old)}\nnew mode {_mode(new)}\n"


def _what(entry: Entry, host_bits: int | None = None) -> str:
    if entry.kind == "file":
        return f"file mode {_mode(entry.mode if host_bits is None else host_bits)}"
    return "symlink" if entry.kind == "symlink" else "directory"


def _mode(bits: int) -> str:
    return f"{stat.S_IFREG | bits:o}"


def _content_lines(path: str, before: Entry | None, after: Entry | None, content: Content, *,
                   as_text: bool) -> Iterator[str]:
    old, new = _side(before, content, as_text), _side(after, content, as_text)
    if old is None or new is None:
        yield _unshown(before, after, content)
        return
    if old == new:
        return
    name_a = git_quoted(f"a/{path}") if before is not None and before.kind != "dir" else "/dev/null"
    name_b = git_quoted(f"b/{path}") if after is not None and after.kind != "dir" else "/dev/null"
    for line in unified(old, new, name_a, name_b):
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def unified(a: list[str], b: list[str], name_a: str, name_b: str, context: int = 3
            ) -> Iterator[str]:
    """difflib.unified_diff's output, from the cheaper matcher."""
    for index, group in enumerate(Matcher(a, b).get_grouped_opcodes(context)):
        if index == 0:
            yield f"--- {name_a}\n"
            yield f"+++ {name_b}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            yield from ("-" + line for line in a[i1:i2])
            yield from ("+" + line for line in b[j1:j2])


def _range(start: int, stop: int) -> str:
    """A hunk range as `diff -u` writes it (1-based; an empty range names the line before)."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _side(entry: Entry | None, content: Content, as_text: bool) -> list[str] | None:
    """The lines one side shows: a file's text, a link's target, nothing for the rest;
    `as_text`: a flagged file is text even with a NUL in it (what runs is what you read)."""
    if entry is not None and entry.kind == "symlink":
        return [f"-> {entry.target}\n"]
    return text_lines(entry, content, as_text=as_text)


def _unshown(before: Entry | None, after: Entry | None, content: Content) -> str:
    for entry in (before, after):
        if entry is not None and entry.kind == "file" and entry.sha256 and (
                content(entry.sha256) is None):
            side = "earlier" if entry is before else "new"
            return (f"(the {side} content is not kept: the file changed on the host since "
                    "the copy, or is too big)\n")
    return f"Binary files differ ({_size(before)} -> {_size(after)})\n"


def _size(entry: Entry | None) -> str:
    if entry is None or entry.kind != "file":
        return "none"
    return f"{entry.size} bytes"


# ---------------------------------------------------------------------------- stat and summary


def stat_lines(changes: list[Change], *, safe: bool, limit: int | None = None) -> list[str]:
    """` M path  +3 -1  ! flags` per change, then a totals line."""
    width = min(60, max((len(c.path) for c in changes), default=0))
    lines = []
    for change in changes[:limit] if limit else changes:
        path = inert_line(change.path) if safe else git_quoted(change.path)
        flagged = f" ! {inert_line('; '.join(change.flags))}" if change.flags else ""
        lines.append(f" {change.status} {path:<{width}}  {_counts(change):<10}{flagged}".rstrip())
    if limit and len(changes) > limit:
        lines.append(f" … and {len(changes) - limit} more")
    lines.append(totals(changes))
    return [inert(line) if safe else line for line in lines]


def _counts(change: Change) -> str:
    if change.added is not None and change.removed is not None:
        return f"+{change.added} -{change.removed}"
    kinds = {_kind(change.before), _kind(change.after)}
    if "file" in kinds:
        return "binary"
    return "link" if "symlink" in kinds else "directory"


def totals(changes: list[Change]) -> str:
    """'3 files changed, +12 -4' (and how many are flagged)."""
    added = sum(c.added or 0 for c in changes)
    removed = sum(c.removed or 0 for c in changes)
    flagged = sum(1 for c in changes if c.flags)
    text = f"{len(changes)} path{'s' * (len(changes) != 1)} changed, +{added} -{removed}"
    return text + (f", {flagged} flagged for review" if flagged else "")


def summary(changeset: Changeset, pending: list[Change], *, root: str) -> list[str]:
    """The one screen `ask` prints after a copy session."""
    if not changeset.changes:
        return ["copy workspace: no changes (your tree is untouched)", *_refusals(changeset)]
    head = (f"copy workspace: {totals(pending)} — pending, your tree is untouched"
            if pending else "copy workspace: every change is already applied")
    lines = [head, *stat_lines(pending, safe=True, limit=MAX_SUMMARY_LINES)[:-1]]
    lines += _refusals(changeset)
    target = f"--root {_quote(root)} --session {changeset.session}"
    lines += [f"review: sandbox-agent diff {target}",
              f"apply:  sandbox-agent apply {target}   (then `undo` takes it back)"]
    return lines


def _refusals(changeset: Changeset) -> list[str]:
    if not changeset.refused:
        return []
    shown = "; ".join(f"{inert_line(r['path'])}: {inert_line(r['reason'])}"
                      for r in changeset.refused[:5])
    more = f" (and {len(changeset.refused) - 5} more)" if len(changeset.refused) > 5 else ""
    return [f"not brought back: {shown}{more}"]


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z0-9_./:=@%+-]+", text) else "'" + text.replace(
        "'", "'\\''") + "'"


# ---------------------------------------------------------------------------- json


def as_json(changeset: Changeset, applied: set[str], reviewed: list[Change] | None = None
            ) -> dict[str, Any]:
    """The changeset for machines: every change with its states, flags and counts; the flags
    of a pending change from `reviewed` (apply.for_review) when given."""
    flagged = {c.path: c.flags for c in reviewed or []}
    return {
        "session": changeset.session, "changeset": changeset.id, "root": changeset.root,
        "collected_at": changeset.collected_at,
        "changes": [{"path": c.path, "status": c.status,
                     "before": c.before.describe() if c.before else None,
                     "after": c.after.describe() if c.after else None,
                     "flags": flagged.get(c.path, c.flags),
                     "added": c.added, "removed": c.removed, "applied": c.path in applied}
                    for c in changeset.changes],
        "refused": changeset.refused, "notes": changeset.notes,
        "pending": sum(1 for c in changeset.changes if c.path not in applied),
    }
