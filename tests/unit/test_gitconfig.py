"""executor/gitconfig.py reads a config file exactly as git does: checked against git itself.

git is the oracle: `git config --file F --list -z --no-includes`, run with no other config, on
the spellings a repository could use to name one file to git and another to us, and on a few
thousand random configs built from the characters git's grammar treats specially.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from executor import gitconfig

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "LC_ALL": "C"}
_KEEPS_TABS = None


def git_reads(path: Path, data: bytes) -> tuple[bool, list[tuple[str, str | None]]]:
    """(whether git reads the file to its end, the entries it lists)."""
    path.write_bytes(data)
    done = subprocess.run(["git", "config", "--file", str(path), "--list", "-z",
                           "--no-includes"], capture_output=True, env=_ENV, cwd=path.parent,
                          check=False)
    entries: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0")[:-1]:
        key, newline, value = item.partition(b"\n")
        entries.append((os.fsdecode(key), os.fsdecode(value) if newline else None))
    return done.returncode == 0, entries


def git_keeps_tabs(tmp_path: Path) -> bool:
    """Whether this git keeps whitespace inside a value as written (2.45 and later)."""
    return git_reads(tmp_path / "probe", b"[a]\nk = x\ty\n")[1] == [("a.k", "x\ty")]


def we_read(data: bytes, keeps_tabs: bool) -> tuple[bool, list[tuple[str, str | None]]]:
    parsed = gitconfig.parse(data)
    pick = 0 if keeps_tabs else -1  # the readings: (whitespace kept, whitespace as spaces)
    return parsed.error is None, [(e.key, e.values[pick] if e.values else None)
                                  for e in parsed.entries]


SPELLINGS = [
    b"\xef\xbb\xbf[include]\n\tpath = tools/local.gitconfig\n",  # a byte-order mark
    b"[core]\n\thooksPath = .hooks\\tx\n",  # escapes
    b"[core]\n\thooksPath = .ho\\\noks\n",  # a continued line
    b'[core]\n\thooksPath = ".ho"oks # "not a comment"\n',  # quoting
    b"[core]\r\n\thooksPath = a b\t c  \r\n",  # CR LF, inner and trailing whitespace
    b'[include "path\x00"]\n\tx = evil\n',  # a NUL ends the name: this is include.path
    b"[Core.HooksPATH]\nx=1\n",  # the legacy subsection form, lowercased
    b'[includeIf "gitdir:/x/"]\n\tpath = a\n[includeIf.onbranch:main]\n',
    b'[core "Sub\\\\x\\"y"]\nK=v\n',
    b"[core] hookspath = \"a;b\" ; c\n",
    b"[core]\n  hooksPath = a\\qb\n",  # an unknown escape: git stops
    b'[core]\n  hooksPath = "a\n',  # an open quote: git stops
    b'[core "x" ]\nk=v\n',
    b"\xef\xbbx",  # a partial byte-order mark
    b"[a]\nk = x \\\n\n",
    b"[a]\nk = v #c\\\nm=1\n",
    b"[a]\nk = a\x00b\n",
    b"[a]\n1k=v\n",
    b'[ "sub"]\nk=v\n',
    b"[core]\n\thooksPath = x\x0by\n",
]


@pytest.mark.parametrize("data", SPELLINGS)
def test_each_spelling_is_read_as_git_reads_it(tmp_path: Path, data: bytes) -> None:
    ok, entries = git_reads(tmp_path / "config", data)
    mine = we_read(data, git_keeps_tabs(tmp_path))
    assert mine[0] == ok
    assert mine[1][:len(entries)] == entries if not ok else mine[1] == entries


_TOKENS = [b"[", b"]", b'"', b"\\", b"\n", b"\r", b"\r\n", b" ", b"\t", b"#", b";", b"=", b".",
           b"a", b"B", b"1", b"-", b"\x00", b"\xef\xbb\xbf", b"core", b"path", b"t", b"n",
           b"\\t", b"\\\n", b'"x y"', b"\xc3\xa9", b"\x0b", b"\x0c"]


def _random_config(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.3:
            parts.append(rng.choice([b"[core]", b"[include]", b'[includeIf "gitdir:x"]',
                                     b"[a.B]", b'[s "q\\"r"]', b"[a \t\"s\"]"])
                         + rng.choice([b"\n", b" ", b"\r\n", b""]))
        elif kind < 0.8:
            parts.append(rng.choice([b"path", b"hooksPath", b"k", b"K-1"])
                         + rng.choice([b" = ", b"=", b"\t=\t", b""])
                         + b"".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 8)))
                         + rng.choice([b"\n", b"\r\n", b""]))
        else:
            parts.append(b"".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 6))))
    return b"".join(parts)


def test_random_configs_are_read_as_git_reads_them(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    keeps_tabs = git_keeps_tabs(tmp_path)
    read_whole = 0
    for _ in range(600):
        data = _random_config(rng)
        ok, entries = git_reads(tmp_path / "config", data)
        mine = we_read(data, keeps_tabs)
        assert mine[0] == ok, data
        if ok:
            read_whole += 1
            assert mine[1] == entries, data
        else:  # git may stop before printing what it had read
            assert mine[1][:len(entries)] == entries, data
    assert read_whole > 100  # the generator makes enough valid files to mean something


def test_where_git_versions_differ_both_readings_are_given() -> None:
    [entry] = gitconfig.parse(b"[core]\n\thooksPath = .hooks\tx\n").entries
    assert entry.values == (".hooks\tx", ".hooks x")
    [entry] = gitconfig.parse(b'[core]\n\thooksPath = ".hooks\tx"\n').entries
    assert entry.values == (".hooks\tx",)


def test_what_cannot_be_read_with_certainty_is_an_error_never_an_empty_file(
        tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"#" * (gitconfig.MAX_BYTES + 1) + b"\n[include]\npath = x\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # never opened for a write: reading it would block
    assert gitconfig.read(big).error == "larger than 1 MiB"
    assert gitconfig.read(fifo).error == "not a regular file"
    assert gitconfig.read(tmp_path / "absent") == gitconfig.Parsed()
    assert gitconfig.read(tmp_path) == gitconfig.Parsed()  # git reads nothing from a directory
    assert gitconfig.read(Path("/dev/null")) == gitconfig.Parsed()  # GIT_CONFIG_GLOBAL=/dev/null
    link = tmp_path / "link"
    link.symlink_to("real")
    (tmp_path / "real").write_bytes(b"[core]\n\thooksPath = h\n")
    assert gitconfig.read(link).entries == [gitconfig.Entry("core.hookspath", ("h",))]
