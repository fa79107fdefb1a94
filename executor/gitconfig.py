"""git's config file syntax, read the way git reads it (config.c: `git_parse_source`).

What git would run on the host is decided by a few config values (`core.hooksPath`,
`include.path`, `includeIf.*.path`), so reading them differently from git leaves a hole: a
repository that ships a config with a byte-order mark, a `\\t` escape or a continued line would
name one file to git and another to us. This is a port of git's grammar, byte for byte:

- a UTF-8 BOM at the start is skipped; a partial one is an error;
- CR LF is a newline; a lone CR is whitespace;
- `[section]`, `[section "subsection"]` (any byte but newline, `\\` escapes the next one, the
  closing `"` must be followed by `]`) and the legacy `[section.subsection]`; section and key
  names are ASCII, lowercased; a key starts with a letter and has letters, digits and `-`;
- a value: leading and trailing whitespace dropped, `"` toggles quoting, `#` and `;` start a
  comment outside quotes, `\\` escapes `\\`, `"`, `t`, `n`, `b` or the end of the line (a
  continuation); any other escape, an open quote at the end of the line, a bad header or key
  is an error (git stops: "bad config line N");
- a NUL byte ends a value or a name where git's C strings would end it.

git up to 2.44 turns each unquoted whitespace character inside a value into a space; later
versions keep it as written. Where the two differ, both readings are given (`values`), so a
caller protects what either version would use.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_BYTES = 1 << 20
"""A config larger than this is not read (it is reported as unreadable, never skipped)."""

_BOM = b"\xef\xbb\xbf"
_NL = 0x0A
_SPACE = frozenset(b" \t\n\r")  # git's isspace (sane_ctype): not \v or \f
_ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_KEYCHAR = _ALPHA | frozenset(b"0123456789-")
_ESCAPES = {ord("t"): 0x09, ord("b"): 0x08, ord("n"): 0x0A, ord("\\"): ord("\\"),
            ord('"'): ord('"')}
_DEV_NULL = os.makedev(1, 3)
_OPTIONAL = ":(optional)"
_PREFIX = "%(prefix)/"
_PREFIXES = ("/usr", "/usr/local", "/opt/homebrew")


@dataclass(frozen=True)
class Entry:
    """One `key = value` line as git hands it on."""

    key: str
    """`section[.subsection].key`: section and key lowercased, the subsection as written."""
    values: tuple[str, ...]
    """The value as git reads it (two readings when git versions differ); () for a key
    without `=` (git's boolean true)."""


@dataclass(frozen=True)
class Parsed:
    """A config file's entries up to its end, or up to where git would stop."""

    entries: list[Entry] = field(default_factory=list)
    error: str | None = None
    """Why git would not read this file to its end (or could not read it at all)."""


class _Stop(Exception):
    """git's parser gives up here."""


class _Reader:
    """git's get_next_char: one byte at a time; at the end, a newline and `eof` set."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.eof = False

    def next(self) -> int:
        if self.pos >= len(self.data):
            self.eof = True
            return _NL
        char = self.data[self.pos]
        self.pos += 1
        return char


def parse(data: bytes) -> Parsed:
    """The entries git reads from config file content `data`."""
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    elif data[:1] == _BOM[:1]:
        return Parsed([], "line 1: a partial UTF-8 byte-order mark")
    data = data.replace(b"\r\n", b"\n")  # what get_next_char does with CR LF
    reader = _Reader(data)
    entries: list[Entry] = []
    try:
        _parse(reader, entries)
    except _Stop:
        line = data.count(b"\n", 0, max(reader.pos - 1, 0)) + 1
        return Parsed(entries, f"line {line}: git stops reading here (bad config line)")
    return Parsed(entries)


def _parse(reader: _Reader, entries: list[Entry]) -> None:
    section, comment = b"", False
    while True:
        char = reader.next()
        if char == _NL:
            if reader.eof:
                return
            comment = False
        elif comment or char in _SPACE:
            continue
        elif char in b"#;":
            comment = True
        elif char == ord("["):
            section = _section(reader) + b"."
        elif char in _ALPHA:
            entries.append(_entry(reader, section + bytes([char | 0x20])))
        else:
            raise _Stop


def _section(reader: _Reader) -> bytes:
    """get_base_var: the name after `[`, up to and including `]`."""
    name = bytearray()
    while True:
        char = reader.next()
        if reader.eof:
            raise _Stop
        if char == ord("]"):
            break
        if char in _SPACE:
            _subsection(reader, name, char)
            break
        if char not in _KEYCHAR and char != ord("."):
            raise _Stop
        name.append(_lower(char))
    if not name:
        raise _Stop
    return bytes(name)


def _subsection(reader: _Reader, name: bytearray, char: int) -> None:
    """get_extended_base_var: `"subsection"]` after the whitespace that ended the name."""
    while True:
        if char == _NL:
            raise _Stop
        char = reader.next()
        if char not in _SPACE:
            break
    if char != ord('"'):
        raise _Stop
    name.append(ord("."))
    while True:
        char = reader.next()
        if char == _NL:
            raise _Stop
        if char == ord('"'):
            break
        if char == ord("\\"):
            char = reader.next()
            if char == _NL:
                raise _Stop
        name.append(char)
    if reader.next() != ord("]"):
        raise _Stop


def _entry(reader: _Reader, name: bytes) -> Entry:
    """get_value: the rest of the key's name, then `= value` or nothing."""
    key = bytearray(name)
    while True:
        char = reader.next()
        if reader.eof or char not in _KEYCHAR:
            break
        key.append(_lower(char))
    while char in b" \t":
        char = reader.next()
    values: tuple[bytes, ...] = ()
    if char != _NL:
        if char != ord("="):
            raise _Stop
        values = _value(reader)
    return Entry(_text(key), tuple(dict.fromkeys(_text(v) for v in values)))


def _value(reader: _Reader) -> tuple[bytes, bytes]:
    """parse_value, in both readings: (unquoted whitespace kept, turned into spaces)."""
    kept, spaced = bytearray(), bytearray()
    quote = comment = False
    trim = 0
    while True:
        char = reader.next()
        if char == _NL:
            if quote:
                raise _Stop
            if trim:
                del kept[trim:], spaced[trim:]
            return bytes(kept), bytes(spaced)
        if comment:
            continue
        if char in _SPACE and not quote:
            trim = trim or len(kept)
            if kept:
                kept.append(char)
                spaced.append(ord(" "))
            continue
        if not quote and char in b"#;":
            comment = True
            continue
        trim = 0
        if char == ord("\\"):
            char = reader.next()
            if char == _NL:
                continue  # a continuation line
            if char not in _ESCAPES:
                raise _Stop
            char = _ESCAPES[char]
        elif char == ord('"'):
            quote = not quote
            continue
        kept.append(char)
        spaced.append(char)


def _lower(char: int) -> int:
    return char | 0x20 if char in _ALPHA else char


def _text(raw: bytes | bytearray) -> str:
    """A C string's text: up to the first NUL, undecodable bytes kept as surrogates."""
    return os.fsdecode(bytes(raw).split(b"\0", 1)[0])


def path_readings(value: str) -> list[str]:
    """What a pathname value can name, across git versions: as written (older git), without
    the `:(optional)` mark git 2.50 strips, and with `%(prefix)/` (git 2.35) as the usual
    install prefixes. `~` is left to the caller (expanduser)."""
    readings = [value]
    if value.startswith(_OPTIONAL):
        readings.append(value[len(_OPTIONAL):])
    for reading in list(readings):
        if reading.startswith(_PREFIX):
            readings += [f"{prefix}/{reading[len(_PREFIX):]}" for prefix in _PREFIXES]
    return readings


# ---------------------------------------------------------------------------- files


def read(path: Path) -> Parsed:
    """The entries git reads from the config file at `path`, following links as git does.

    A file that is not there (or a directory: git reads nothing from one) has no entries.
    Anything git would read but we cannot read with certainty is an `error`: a FIFO or device
    (opened without blocking, never read), a file over MAX_BYTES, one we may not read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return Parsed()
        return Parsed([], f"cannot be read ({exc.strerror or exc})")
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode) or (stat.S_ISCHR(info.st_mode)
                                          and info.st_rdev == _DEV_NULL):
            return Parsed()
        if not stat.S_ISREG(info.st_mode):
            return Parsed([], "not a regular file")
        chunks, size = [], 0
        while size <= MAX_BYTES and (chunk := os.read(fd, MAX_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return Parsed([], f"cannot be read ({exc.strerror or exc})")
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_BYTES:
        return Parsed([], f"larger than {MAX_BYTES >> 20} MiB")
    return parse(data)
