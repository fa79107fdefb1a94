"""`read_file`: numbered lines of a text file, a page at a time."""

from __future__ import annotations

import codecs
import io

from ..limits import (
    BINARY_SNIFF,
    CHUNK,
    COUNT_BUDGET,
    LINE_MAX_BYTES,
    LINE_MAX_CHARS,
    READ_BUFFER,
    READ_MAX_CHARS,
    READ_MAX_LINES,
)
from ..paths import _regular_file, resolve
from ..wire import ToolError, fail, ok

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import BinaryIO

    from ..context import Context
    from ..wire import Result
    pass



# -- read_file --------------------------------------------------------------------------------


def tool_read_file(ctx: Context, path: str, start_line: int | None = None,
                   end_line: int | None = None, page_lines: int | None = None) -> Result:
    """Numbered lines of a text file, capped (at `page_lines` too, when given), with a note
    on how to read the rest."""
    first = _positive(start_line, "start_line") or 1
    last = _positive(end_line, "end_line")
    cap = min(READ_MAX_LINES, _positive(page_lines, "page_lines") or READ_MAX_LINES)
    if last is not None and last < first:
        raise ToolError(f"end_line ({last}) is before start_line ({first})")
    real = resolve(ctx, path)
    size = _regular_file(real, path).st_size
    with io.BufferedReader(io.FileIO(real), READ_BUFFER) as f:  # (open() asks isatty() too)
        if b"\0" in f.peek(BINARY_SNIFF)[:BINARY_SNIFF]:  # read once, not read and seek back
            return fail(f"binary file ({size} bytes); not shown", binary=True, total_bytes=size)
        skipped = _skip_lines(f, first - 1)
        page = _Page(first, cap)
        page.fill(f, last)
        total = page.total_lines(f)
    if not page.lines and first > 1:
        raise ToolError(f"start_line {first} is past the end of '{path}' ({skipped} lines)")
    return ok(page.text(path, size, total), lines=len(page.lines), total_bytes=size,
              truncated=page.more, start_line=first, end_line=first + len(page.lines) - 1,
              total_lines=total)


def _positive(value: int | None, name: str) -> int | None:
    if value is not None and value < 1:
        raise ToolError(f"argument '{name}' must be 1 or more")
    return value


def _skip_lines(f: BinaryIO, count: int) -> int:
    """Advance f past `count` lines in big chunks; returns how many it skipped (fewer at EOF)."""
    skipped, tail = 0, b""
    while skipped < count:
        pos, chunk = f.tell(), f.read(1 << 20)
        if not chunk:
            return skipped + (1 if tail and not tail.endswith(b"\n") else 0)
        found = chunk.count(b"\n")
        if skipped + found >= count:
            idx = -1
            for _ in range(count - skipped):
                idx = chunk.index(b"\n", idx + 1)
            f.seek(pos + idx + 1)
            return count
        skipped, tail = skipped + found, chunk
    return skipped


def _line_rest(f: BinaryIO) -> bool:
    """Skip the rest of a line read up to LINE_MAX_BYTES; whether there was any (it was cut).
    A huge line is never held in memory."""
    cut = False
    while True:
        more = f.readline(CHUNK)
        cut = cut or bool(more)
        if not more or more.endswith(b"\n"):
            return cut


def _decode(raw: bytes, cut: bool) -> tuple[str, bool]:
    """(text, had invalid UTF-8) of one line; a cut line may end inside a character."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        if not cut:  # the common case, and as strict
            return raw.decode("utf-8"), False
        return codecs.getincrementaldecoder("utf-8")().decode(raw, final=False), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


class _Page:
    """The lines one read_file call returns, within the caps."""

    lines: list[str]

    def __init__(self, first: int, cap: int = READ_MAX_LINES) -> None:
        self.first, self.cap, self.lines, self.chars = first, cap, [], 0
        self.more = self.invalid = self.long = self.eof = False

    def fill(self, f: BinaryIO, last: int | None) -> None:
        """Take lines from f until `last`, EOF or a cap (then `more` is set)."""
        number, lines, cap = self.first, self.lines, self.cap
        while True:  # one loop, no call a line: a page of 2000 short lines is common
            raw = f.readline(LINE_MAX_BYTES)
            if not raw:
                self.eof = True
                return
            if raw.endswith(b"\n"):
                raw, cut = raw[:-1], False
            else:
                cut = _line_rest(f)
            if last is not None and number > last:
                return
            if len(lines) >= cap or self.chars >= READ_MAX_CHARS:
                self.more = True
                return
            if cut or raw.endswith(b"\r"):
                text, bad = _decode(raw, cut)
                self.invalid = self.invalid or bad
            else:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text, self.invalid = raw.decode("utf-8", "replace"), True
            if cut or len(text) > LINE_MAX_CHARS:
                text, self.long = text[:LINE_MAX_CHARS] + " [... line cut]", True
            line = f"{number:>6}\t{text}"
            lines.append(line)
            self.chars += len(line) + 1
            number += 1

    def total_lines(self, f: BinaryIO) -> int | None:
        """Lines in the whole file when cheap to know: None if the rest is over budget."""
        if self.eof:
            return self.first + len(self.lines) - 1
        if not self.more:
            return None
        count, last, budget = self.first + len(self.lines), b"\n", COUNT_BUDGET
        while budget > 0:
            chunk = f.read(1 << 20)
            if not chunk:
                return count + (0 if last.endswith(b"\n") else 1)
            count, last, budget = count + chunk.count(b"\n"), chunk, budget - len(chunk)
        return None

    def text(self, path: str, size: int, total: int | None) -> str:
        """The numbered lines plus notes on truncation and encoding."""
        if not self.lines:
            return f"(empty file: '{path}' has 0 bytes)"
        notes = []
        if self.more:
            end = self.first + len(self.lines) - 1
            of = f"of {total}" if total else f"of a {size}-byte file"
            notes.append(f"[truncated: showing lines {self.first}-{end} {of}. To read more, "
                         f"call read_file with start_line={end + 1}.]")
        if self.long:
            notes.append(f"[note: lines longer than {LINE_MAX_CHARS} characters were cut]")
        if self.invalid:
            notes.append("[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]")
        return "\n".join(self.lines + notes)
