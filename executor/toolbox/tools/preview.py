"""The diff a write would make, for the approval prompt (never offered to the model)."""

from __future__ import annotations

import difflib
import os

from ..limits import _HUNK, BINARY_SNIFF, DIFF_MAX_LINES, NOT_TEXT, PREVIEW_MAX_BYTES
from ..paths import _inside, os_error_text, rel, resolve
from ..tools.write import _digest, _edited, _encode, _read_existing
from ..wire import SPECS, ToolError, ok, validate

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Any

    from ..context import Context
    from ..wire import PreviewFacts, Result
    pass



# -- preview (for the host's approval prompt; not a tool the model is offered) -----------------


def tool_preview(ctx: Context, tool: str, args: dict[str, Any]) -> Result:
    """What a write_file or edit_file call would change, as a unified diff; writes nothing.

    The same path checks as the real call; `meta.error` says why the call would fail.
    """
    if tool not in ("write_file", "edit_file"):
        raise ToolError(f"preview is for write_file and edit_file, not '{tool}'")
    clean = validate(tool, SPECS[tool], args)
    facts: PreviewFacts = {"path": clean["path"], "resolved": None, "symlink": False,
                           "exists": False, "binary": False, "sha256_before": None,
                           "sha256_after": None, "error": None}
    try:
        output = _preview(ctx, tool, clean, facts)
    except ToolError as exc:
        output, facts["error"] = "", str(exc)
    except OSError as exc:
        output, facts["error"] = "", os_error_text(ctx, exc)
    return ok(output, **facts)


def _preview(ctx: Context, tool: str, args: dict[str, Any], facts: PreviewFacts) -> str:
    """The diff text; fills `facts` as it learns them (so an error keeps what was known)."""
    path = args["path"]
    real = resolve(ctx, path, write=True)
    facts.update({"resolved": rel(ctx, real), "symlink": _lexical(ctx, path) != rel(ctx, real)})
    before = _read_existing(real, path)
    facts.update({"exists": before is not None,
                  "sha256_before": None if before is None else _digest(before)})
    if tool == "write_file":
        after = _encode(args["content"], "surrogatepass")
    else:
        after = _edited(path, before, args["new_text"], args.get("old_text"),
                        args.get("replace_all", False)).after
    facts["sha256_after"] = _digest(after)
    (old, why_old), (new, why_new) = _text_of(before), _text_of(after)
    why = why_old or why_new
    if why:
        facts["binary"] = NOT_TEXT in (why_old, why_new)
        return _described(before, after, why)
    assert old is not None and new is not None  # _text_of gives the text when no reason
    label = facts["resolved"]
    diff = _unified(old, new, f"a/{label}" if before is not None else "/dev/null", f"b/{label}")
    if diff is None:
        return _described(before, after, f"over {DIFF_MAX_LINES} changed lines")
    return diff


def _lexical(ctx: Context, raw: str) -> str:
    """`raw` relative to the root without following links, to tell a path through a symlink."""
    if os.path.isabs(raw):
        norm = os.path.normpath(raw)
        base = next((r for r in sorted(ctx.roots) if _inside(r, norm)), ctx.root)
        return os.path.relpath(norm, base)
    return os.path.normpath(raw)


def _text_of(data: bytes | None) -> tuple[str | None, str | None]:
    """(text, None) of a file's bytes (None: no file yet), or (None, why it is not shown)."""
    if data is None:
        return "", None
    if b"\0" in data[:BINARY_SNIFF]:
        return None, NOT_TEXT
    if len(data) > PREVIEW_MAX_BYTES:
        return None, f"over {PREVIEW_MAX_BYTES} bytes"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, NOT_TEXT


def _described(before: bytes | None, after: bytes, why: str) -> str:
    """Sizes and hashes instead of a diff."""
    old = "no file" if before is None else f"{len(before)} bytes, sha256 {_digest(before)}"
    return (f"content not shown ({why})\nbefore: {old}\n"
            f"after:  {len(after)} bytes, sha256 {_digest(after)}")


def _unified(old: str, new: str, from_label: str, to_label: str) -> str | None:
    """A unified diff (3 lines of context) of two texts; '' when they are the same, None when
    more than DIFF_MAX_LINES lines changed (difflib is quadratic on crafted text: a preview
    must not outlast the call's deadline). Lines the two share at the start and the end are
    left out of the comparison, so an edit of a big file costs what it changed."""
    a, b = _keep_ends(old), _keep_ends(new)
    head, most = 0, min(len(a), len(b))
    while head < most and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < most - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start, cut = max(0, head - 3), max(0, tail - 3)
    a, b = a[start:len(a) - cut], b[start:len(b) - cut]
    if max(len(a), len(b)) > DIFF_MAX_LINES + 6:
        return None
    out = []
    for line in difflib.unified_diff(a, b, from_label, to_label):
        if start and line.startswith("@@ "):
            line = _HUNK.sub(lambda m: f"{m[1]}{int(m[2]) + start}", line)
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _keep_ends(text: str) -> list[str]:
    """Lines split at "\\n" only (a CR or form feed inside a line stays where it is)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines
