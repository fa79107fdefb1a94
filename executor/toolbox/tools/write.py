"""`write_file` and `edit_file`: writes that keep what they replace in view."""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import re
from collections import Counter

from ..gitshape import GITDIR_PARTS, gitdir_shape, kind_of
from ..guards.disk import _check_write, _note_write
from ..guards.git import _rename_in_place
from ..limits import (
    _NAME,
    ABSENT,
    BINARY_SNIFF,
    CLOSEST_MAX_CHARS,
    CLOSEST_MAX_LINES,
    COUNT_EXACT_LINES,
    QUARANTINE,
    SHOW_MAX_CHARS,
    SHOW_MAX_LINES,
    SYNTAX_MAX_BYTES,
)
from ..paths import _inside, _regular_file, rel, resolve
from ..tracking import _readonly_mounts
from ..wire import ToolError, ok

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable
    from typing import Any

    from ..context import Context
    from ..wire import QuarantineRecord, Result, T, WriteRecord
    pass



# -- write_file / edit_file -------------------------------------------------------------------


def tool_write_file(ctx: Context, path: str, content: str, expect_sha256: str | None = None,
                    expect_sha256_after: str | None = None) -> Result:
    """Create or overwrite a file, creating its parent directories."""
    real = resolve(ctx, path, write=True)
    before = _read_existing(real, path)
    _check_unchanged(path, before, expect_sha256)
    data = _encode(content, "surrogatepass")
    _check_as_shown(path, data, expect_sha256_after)
    meta = _write(ctx, real, before, data)
    how = "new file" if meta["created"] else f"{meta['lines_changed']} lines changed"
    return ok(f"wrote {meta['bytes']} bytes to '{path}' ({how})" + _gitdir_note(meta), **meta)


def tool_edit_file(ctx: Context, path: str, new_text: str, old_text: str | None = None,
                   replace_all: bool = False, expect_sha256: str | None = None,
                   expect_sha256_after: str | None = None) -> Result:
    """Replace the unique (or, with replace_all, every) occurrence of old_text."""
    real = resolve(ctx, path, write=True)
    before = _read_existing(real, path)
    _check_unchanged(path, before, expect_sha256)
    try:
        edit = _edited(path, before, new_text, old_text, replace_all)
    except ToolError as exc:
        raise _with_file(exc, path, before) from None
    _check_as_shown(path, edit.after, expect_sha256_after)
    meta = _write(ctx, real, before, edit.after)
    if before is None:
        return ok(f"created '{path}' ({meta['bytes']} bytes)" + _gitdir_note(meta),
                  replacements=0, **meta)
    extra: dict[str, Any] = {"still_there": edit.still_there} if edit.still_there else {}
    return ok(f"edited '{path}': {edit.count} replacement{'s' * (edit.count > 1)}, "
              f"{meta['lines_changed']} lines changed" + edit.note + _gitdir_note(meta),
              replacements=edit.count, **meta, **extra)


def _gitdir_note(meta: WriteRecord) -> str:
    records = meta.get("git_quarantined") or []
    return "".join(f"\n{r['path']} was made to look like a git repository; its HEAD was renamed "
                   f"to {r['renamed_to'] or '(failed)'} so git on the host does not use it"
                   for r in records)


class Edit:
    """What an edit makes of a file: its new bytes, replacements, and what to tell the model."""

    def __init__(self, after: bytes, count: int, note: str = "",
                 still_there: dict[str, list[int]] | None = None) -> None:
        self.after, self.count, self.note = after, count, note
        self.still_there = still_there or {}
        """Names the edit took out of the text it replaced that other lines still use."""


def _edited(path: str, before: bytes | None, new_text: str, old_text: str | None,
            replace_all: bool) -> Edit:
    """What an edit makes of the file, or the ToolError it fails with."""
    if old_text is None or (old_text == "" and before is None):
        # Small models send old_text="" to mean "create": treat it like an omitted old_text.
        if before is not None:
            raise ToolError(f"'{path}' already exists. To change it, give old_text (the exact "
                            "text to replace); to overwrite all of it, use write_file.")
        return Edit(_encode(new_text, "surrogatepass"), 0)
    if old_text == "":
        raise ToolError(f"old_text is empty but '{path}' exists. Give the exact text to "
                        "replace, or use write_file to overwrite the whole file.")
    if before is None:
        raise ToolError(f"file not found: {path}. Check the path (list_files shows the files); "
                        "to create a new file, use write_file or edit_file without old_text.")
    text = _edit_text(before, path)
    old, new, count = _find(text, old_text, new_text)
    _check_count(text, path, old, count, replace_all)
    after = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    note = ""
    error = _broken(path, text, after)
    if error is not None:
        moved = None if replace_all else _after_block(text, old, new)
        if moved is None:
            raise _syntax_refusal(path, after, error)
        after, note = moved
    left = _still_there(after, old, new)
    return Edit(_encode(after, "surrogateescape"), count if replace_all else 1,
                note + _still_there_note(after, left), left)


def _still_there(after: str, old: str, new: str, limit: int = 3) -> dict[str, list[int]]:
    """{name: line numbers} of the names (identifiers) old had and new has not that the file
    still uses: a rename of `calc_total` in one line leaves the import two lines up."""
    if len(after) > SYNTAX_MAX_BYTES:
        return {}
    gone = sorted(set(_NAME.findall(old)) - set(_NAME.findall(new)))
    if not gone or len(gone) > limit:
        return {}
    lines = after.split("\n")
    found: dict[str, list[int]] = {}
    for name in gone:
        word = re.compile(rf"\b{re.escape(name)}\b")
        numbers = [n for n, line in enumerate(lines, 1) if word.search(line)]
        if numbers:
            found[name] = numbers[:limit]
    return found


def _still_there_note(after: str, left: dict[str, list[int]]) -> str:
    lines = after.split("\n") if left else []
    return "".join(f"\nnote: '{name}' is still on line {n}: {lines[n - 1].strip()[:200]}"
                   for name, numbers in left.items() for n in numbers)


def _broken(path: str, before: str, after: str) -> SyntaxError | None:
    """The SyntaxError an edit brings into a Python file that compiled before, or None."""
    if not path.endswith((".py", ".pyw")) or len(after) > SYNTAX_MAX_BYTES:
        return None
    if _syntax_error(before, path) is not None:
        return None  # it did not compile before: this edit may be one step of a repair
    return _syntax_error(after, path)


def _after_block(text: str, old: str, new: str) -> tuple[str, str] | None:
    """(text, note) with new's added lines after the block old's last line opens, or None.

    A weak model adds a function with old_text `def add(a, b):` and new_text that line plus
    the new function: taken literally the new code splits add() from its body. When new_text
    is old_text plus lines, and old_text ends with the line that opens a block (`...:`), the
    lines go after the end of that block instead (indented as that line, see `_indented`), if
    the file then compiles.
    """
    if not new.startswith(old) or text.count(old) != 1 or not old.rstrip().endswith(":"):
        return None
    if "\r" in text:
        return None
    end = text.index(old) + len(old)
    if end < len(text) and text[end] not in "\r\n":
        return None  # old_text stops inside a line
    added = new[len(old):].strip("\r\n")
    if not added.strip():
        return None
    opener = text.count("\n", 0, end) + 1
    block = _block_opened_at(text, opener)
    if block is None:
        return None
    last, column = block
    placed, shifted = _indented(added, column)
    if placed is None:
        return None
    lines = text.split("\n")
    head, rest = "\n".join(lines[:last]), "\n".join(lines[last:]).lstrip("\n")
    gap = "\n\n\n" if column == 0 else "\n\n"  # the end of the last line, then blank lines
    moved = head + gap + placed + (gap + rest if rest.strip() else "\n")
    if _syntax_error(moved, "<edit>") is not None:
        return None
    how = f", indented by {shifted} more spaces to stand beside it" if shifted else ""
    return moved, (f"\nnote: the new lines went after line {last}, the end of the block that "
                   f"line {opener} opens{how}: right after line {opener} they would have "
                   "broken it")


def _indented(added: str, column: int) -> tuple[str | None, int]:
    """(added indented to `column`, spaces added), or (None, 0) when it cannot be.

    Lines written less indented than the block they follow (a method written at the top level
    after a method) are moved right as a whole; lines indented more, or with tabs, are not.
    """
    lines = added.split("\n")
    first = next(line for line in lines if line.strip())
    have = len(first) - len(first.lstrip(" "))
    if have == column:
        return added, 0
    if have > column or "\t" in added:
        return None, 0
    if any(line.strip() and len(line) - len(line.lstrip(" ")) < have for line in lines):
        return None, 0
    pad = " " * (column - have)
    return "\n".join(pad + line if line.strip() else line for line in lines), column - have


def _parsed(text: str) -> Any:
    """ast.parse(text), or None."""
    import ast
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _block_opened_at(text: str, line: int) -> tuple[int, int] | None:
    """(last line, column) of the compound statement whose header ends on `line`, or None."""
    import ast
    tree = _on_fresh_stack(_parsed, text)
    if tree is None:
        return None
    found: tuple[int, int] | None = None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, ast.stmt) or not isinstance(body, list) or not body:
            continue
        first = body[0].lineno  # decorators of the first statement come before its def
        first = min([first] + [d.lineno for d in getattr(body[0], "decorator_list", [])])
        end = node.end_lineno
        if node.lineno <= line < first and end is not None and (found is None or end <= found[0]):
            found = (end, node.col_offset)
    return found


def _syntax_refusal(path: str, after: str, error: SyntaxError) -> ToolError:
    """Why an edit that would break a Python file changed nothing, with the lines it broke."""
    line = error.lineno or 1
    lines = after.split("\n")
    start, end = max(1, line - 4), min(len(lines), line + 3)
    shown = "\n".join(f"{n:>6}\t{lines[n - 1].rstrip(chr(13))}" for n in range(start, end + 1))
    return ToolError(
        f"not changed: this edit would break '{path}' ({type(error).__name__}: {error.msg}, "
        f"line {line}). new_text replaces old_text exactly, so it must hold complete lines "
        "that fit where old_text was. To add code after a function, give its last lines as "
        "old_text and those lines followed by the new code as new_text. After this edit the "
        f"file would read:\n{shown}", syntax_error=f"{error.msg} (line {line})")


def _syntax_error(source: str, path: str) -> SyntaxError | None:
    """The SyntaxError compiling `source` raises, or None (also when it cannot be compiled)."""
    return _on_fresh_stack(_compile_error, source, path)


def _on_fresh_stack(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a new thread: compile()'s and ast's recursion limits count the caller's
    frames, and the preview and the call, whose stacks differ, must come to the same verdict.
    (Where no thread can start, the host's expect_sha256_after still keeps them together.)"""
    import threading
    done: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):  # nothing on stderr: the host reads it
            done.append(fn(*args))

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
    except RuntimeError:
        return fn(*args)
    thread.join()
    if not done:
        raise ToolError("the Python check of this edit failed; nothing was written")
    return done[0]


def _compile_error(source: str, path: str) -> SyntaxError | None:
    import warnings  # a SyntaxWarning (say, an invalid escape) must not reach stderr
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _with_file(exc: ToolError, path: str, before: bytes | None) -> ToolError:
    """A failed edit's error plus the file as it is, when small: the fix needs no extra read."""
    if before is None or b"\0" in before[:BINARY_SNIFF] or len(before) > SHOW_MAX_CHARS:
        return exc
    lines = before.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) > SHOW_MAX_LINES:
        return exc
    numbered = "\n".join(f"{n:>6}\t{line.rstrip(chr(13))}" for n, line in enumerate(lines, 1))
    return ToolError(f"{exc}\nThis is '{path}' now (copy old_text from it exactly, without the "
                     f"line numbers):\n{numbered or '(empty file)'}", **exc.meta, file_shown=True)


def _check_unchanged(path: str, before: bytes | None, expected: str | None) -> None:
    """Refuse a write whose file is not what the person approved (the host sends the hash)."""
    if expected is not None and _digest(before) != expected:
        raise ToolError(f"'{path}' changed since it was approved; nothing was written. Read it "
                        "again before changing it.", changed_since_approval=True)


def _check_as_shown(path: str, after: bytes, expected: str | None) -> None:
    """Refuse a write whose result is not the content the person approved (the host sends the
    preview's sha256_after, or FAILS when the preview said the call would fail): the diff
    shown and the bytes written can never differ."""
    if expected is not None and _digest(after) != expected:
        raise ToolError(f"'{path}' would not be written as it was shown for approval; nothing "
                        "was written. Make the call again to be shown what it would do.",
                        not_as_approved=True)


def _digest(data: bytes | None) -> str:
    """sha256 hex of a file's bytes, or ABSENT for a file that does not exist."""
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def _read_existing(real: str, path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist yet; a hard-linked file is refused.

    Writing in place through one of several names changes the others too (a Makefile linked
    to notes.txt): what the approval and the audit name would not be what changed.
    """
    try:
        info = _regular_file(real, path)
    except FileNotFoundError:
        return None
    if info.st_nlink > 1:
        raise ToolError(f"'{path}' has {info.st_nlink} hard links: writing it would change the "
                        "other names too, so nothing was written. Remove it and write a new "
                        "file instead (run_shell_command: cp --remove-destination ...).",
                        hard_links=info.st_nlink)
    with open(real, "rb") as f:
        return f.read()


def _edit_text(data: bytes, path: str) -> str:
    if b"\0" in data[:BINARY_SNIFF]:
        raise ToolError(f"'{path}' is a binary file; edit_file only edits text files")
    return data.decode("utf-8", "surrogateescape")  # invalid bytes survive the edit unchanged


def _encode(text: str, errors: str) -> bytes:
    try:
        return text.encode("utf-8", errors)
    except UnicodeEncodeError as exc:
        raise ToolError(f"the text cannot be written as UTF-8: {exc.reason}") from exc


def _find(text: str, old: str, new: str) -> tuple[str, str, int]:
    """(old, new, count), retried with CRLF line ends when the file uses them."""
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        crlf_old, crlf_new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        if text.count(crlf_old):
            return crlf_old, crlf_new, text.count(crlf_old)
    return old, new, count


def _check_count(text: str, path: str, old: str, count: int, replace_all: bool) -> None:
    if count == 0:
        hint = _no_match_hint(text, old)
        raise ToolError(f"old_text not found in '{path}' (0 matches). Copy the exact text from "
                        "the file (read_file shows it), including spaces and indentation." + hint)
    if count > 1 and not replace_all:
        lines = _match_lines(text, old)
        raise ToolError(f"old_text matches {count} times in '{path}' (at lines {lines}). Add "
                        "surrounding lines to old_text so it matches once, or set "
                        "replace_all=true to replace all of them." + _whole_lines(text, lines))


def _whole_lines(text: str, numbers: str, limit: int = 3) -> str:
    """The first matching lines in full: one of them, as old_text, changes one place at a time."""
    have = text.split("\n")
    picked = list(dict.fromkeys(int(n) for n in numbers.split(", ") if n.isdigit()))[:limit]
    shown = "\n".join(have[n - 1].rstrip("\r") for n in picked if n <= len(have))
    return f" One whole line is enough, one call per line; the lines are:\n{shown}"


def _match_lines(text: str, old: str, limit: int = 10) -> str:
    found: list[str] = []
    pos, line, at = 0, 1, text.find(old)
    while at != -1 and len(found) < limit:
        line += text.count("\n", pos, at)
        found.append(str(line))
        pos, at = at, text.find(old, at + len(old))
    return ", ".join(found) + (", ..." if at != -1 else "")


def _no_match_hint(text: str, old: str) -> str:
    """A concrete reason the text did not match, when one is cheap to find."""
    lines = [line for line in old.split("\n") if line]
    if lines and all(re.match(r"\s*\d+\t", line) for line in lines):
        return (" Hint: old_text starts with line numbers from read_file; remove the number "
                "and tab at the start of each line.")
    wanted = [line.strip() for line in old.strip("\n").split("\n")]
    if not wanted[0] or len(text) > 5_000_000:
        return ""
    have = text.split("\n")
    for i, line in enumerate(have):
        if line.strip() == wanted[0] and [x.strip() for x in have[i:i + len(wanted)]] == wanted:
            return (f" Hint: lines {i + 1}-{i + len(wanted)} match except for whitespace; "
                    "copy them exactly as read_file shows them.")
    return _core_lines(have, wanted) or _closest_line(have, wanted[0])


def _core_lines(have: list[str], wanted: list[str], limit: int = 3) -> str:
    """' Hint: ... is on line N' when old_text, less its quotes, punctuation or case, is there.

    A model told "it says Hello" guesses `Hello.` or `'Hello'`; the file has `"Hello, "`.
    """
    core = wanted[0].strip(" \t.,;:!?'\"`") if len(wanted) == 1 else ""
    if len(core) < 3 or len(have) > CLOSEST_MAX_LINES:
        return ""
    found = [n for n, line in enumerate(have, 1) if core in line]
    if not found:
        found = [n for n, line in enumerate(have, 1) if core.lower() in line.lower()]
    if not found or len(found) > limit:
        return ""
    shown = "\n".join(have[n - 1].rstrip("\r") for n in found)
    where = "line " + ", ".join(str(n) for n in found)
    return (f" Hint: {core!r} is on {where}; old_text must match exactly, so copy the whole "
            f"line:\n{shown}")


def _closest_line(have: list[str], wanted: str) -> str:
    """' Hint: line N is the closest ...' for a line like `wanted` (quotes, a typo), or ''."""
    if len(have) > CLOSEST_MAX_LINES or len(wanted) > CLOSEST_MAX_CHARS:
        return ""  # difflib's ratio is quadratic in a line's length: a crafted file costs 10 s
    stripped = [line.strip() if len(line) <= CLOSEST_MAX_CHARS else "" for line in have]
    close = difflib.get_close_matches(wanted, stripped, n=1, cutoff=0.6)
    if not close:
        return ""
    number = stripped.index(close[0]) + 1
    return f" Hint: line {number} is the closest; copy it exactly:\n{have[number - 1]}"


def _write(ctx: Context, real: str, before: bytes | None, data: bytes) -> WriteRecord:
    """Write data to real (in place: mode, owner and hard links stay); returns the meta."""
    allocated = _check_write(ctx, real, len(data))
    os.makedirs(os.path.dirname(real), exist_ok=True)
    with open(real, "wb") as f:
        f.write(data)
    digest = hashlib.sha256(data).hexdigest()
    _note_write(ctx, real, allocated, digest)
    meta: WriteRecord = {
        "bytes": len(data),
        "sha256_before": None if before is None else hashlib.sha256(before).hexdigest(),
        "sha256_after": digest,
        "lines_changed": _lines_changed(before or b"", data), "created": before is None}
    disabled = _gitdir_made_by_write(ctx, real) if ".git" in ctx.readonly else None
    if disabled:
        meta["git_quarantined"] = [disabled]
    return meta


def _gitdir_made_by_write(ctx: Context, real: str) -> QuarantineRecord | None:
    """A write that completes a repository look-alike (HEAD, objects/, refs/ in one directory,
    whatever its name) disables it at once: git on the host would run its config."""
    folder = os.path.dirname(real)
    while _inside(ctx.root, folder):
        modes: dict[str, int] = {}
        for part in GITDIR_PARTS:
            with contextlib.suppress(OSError):
                modes[part] = os.lstat(os.path.join(folder, part)).st_mode
        if gitdir_shape({part: kind_of(mode) for part, mode in modes.items()}) and \
                folder not in _readonly_mounts(ctx.root):
            head = rel(ctx, os.path.join(folder, "HEAD"))
            renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
            try:
                _rename_in_place(ctx, head, renamed)
            except OSError as exc:
                return {"path": rel(ctx, folder), "kind": "gitdir", "renamed_to": None,
                        "error": exc.strerror or str(exc)}
            if ctx.tracker is not None and ctx.tracker.index is not None:
                ctx.tracker.index.stats.pop(head, None)
                ctx.tracker.refresh(renamed)
            return {"path": rel(ctx, folder), "kind": "gitdir", "renamed_to": renamed}
        if folder == ctx.root:
            return None
        folder = os.path.dirname(folder)
    return None


def _lines_changed(old: bytes, new: bytes) -> int:
    """Added plus removed lines: exact via difflib when few changed, else a multiset count.

    It runs after the write, so it must be cheap whatever the text: difflib without autojunk
    is cubic on crafted lines (800 took 5 s), hence the small bound on the exact count."""
    a, b = old.splitlines(), new.splitlines()
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and end < len(b) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    a, b = a[start:len(a) - end], b[start:len(b) - end]
    if not a or not b or len(a) + len(b) > COUNT_EXACT_LINES:
        ca, cb = Counter(a), Counter(b)
        return sum(((ca - cb) + (cb - ca)).values())
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum((i2 - i1) + (j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")
