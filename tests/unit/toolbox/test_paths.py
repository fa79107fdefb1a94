"""The toolbox: Paths the model names: resolved inside the root, hidden and read-only names."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor.toolbox.paths import shown, unshown
from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import SECRET, Box, failed


@pytest.mark.parametrize(
    ("code", "expected"),
    [(errno.EROFS, "read-only file system: the project is mounted read-only"),
     (errno.EACCES, "permission denied: src/app.py"), (errno.ENOSPC, "no space left on device"),
     (errno.EISDIR, "'src/app.py' is a directory"), (errno.ENOENT, "file not found: src/app.py")],
)
def test_os_errors_are_mapped_to_clear_texts(root: Path, code: int, expected: str):
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root)]))
    exc = OSError(code, os.strerror(code), str(root.resolve() / "src" / "app.py"))
    assert toolbox.os_error_text(ctx, exc) == expected


def _escape_calls(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
            ("edit_file", {"path": path, "old_text": "TOP", "new_text": "x"}),
            ("list_files", {"path": path}), ("search_files", {"pattern": "TOP", "path": path})]


@pytest.mark.parametrize("path", ["../secret.txt", "../../secret.txt", "src/../../secret.txt",
                                  "/etc/passwd", "SECRET_ABS", "link-rel", "link-abs",
                                  "link-dir/secret.txt", "link-dir/new.txt"])
def test_paths_leaving_the_root_are_refused(box: Box, root: Path, path: str):
    (root / "link-rel").symlink_to("../secret.txt")
    (root / "link-abs").symlink_to(root.parent / "secret.txt")
    (root / "link-dir").symlink_to(root.parent)
    path = str(root.parent / "secret.txt") if path == "SECRET_ABS" else path
    for tool, args in _escape_calls(path):
        output = failed(box.call(tool, **args), f"path '{path}' is outside the project root")
        assert SECRET not in output
    assert (root.parent / "secret.txt").read_text() == SECRET + "\n"
    assert not (root.parent / "new.txt").exists()
    box.alive()


def test_absolute_paths_inside_the_root_work(box: Box, root: Path):
    assert box.call("read_file", path=str(root / "README.md"))["output"] == "     1\t# demo"
    assert box.call("write_file", path=str(root / "abs.txt"), content="a")["ok"]
    assert (root / "abs.txt").read_text() == "a"


@pytest.mark.parametrize(("path", "message"), [
    ("", "path is empty"), ("   ", "path is empty"), ("src/a\x00pp.py", "path contains a NUL byte"),
])
def test_empty_and_nul_paths(box: Box, path: str, message: str):
    for tool, args in _escape_calls(path):
        failed(box.call(tool, **args), message)
    box.alive()


@pytest.mark.parametrize("path", [".sandbox-agent", ".sandbox-agent/audit.ndjson",
                                  "./.sandbox-agent/x", "src/../.sandbox-agent/audit.ndjson",
                                  "sneaky/audit.ndjson"])
def test_the_state_dir_is_reserved(box: Box, root: Path, path: str):
    (root / "sneaky").symlink_to(".sandbox-agent")
    for tool, args in _escape_calls(path):
        output = failed(box.call(tool, **args), "is reserved and not accessible")
        assert '"seq"' not in output
    assert (root / ".sandbox-agent" / "audit.ndjson").read_text() == '{"seq": 0}\n'


def test_readonly_dirs_refuse_writes_but_allow_reads(box: Box, root: Path):
    message = "'.git/config' is inside .git, which is read-only in the sandbox"
    failed(box.call("write_file", path=".git/config", content="x"), message)
    failed(box.call("edit_file", path=".git/config", old_text="core", new_text="x"), message)
    failed(box.call("write_file", path=".git/hooks/pre-commit", content="x"), "read-only")
    assert box.call("read_file", path=".git/config")["ok"]
    assert (root / ".git" / "config").read_text() == "[core]\n"
    assert not (root / ".git" / "hooks").exists()
    (root / "vendor" / "lib" / ".git").mkdir(parents=True)
    failed(box.call("write_file", path="vendor/lib/.git/hooks/post-checkout", content="x"),
           "is inside .git, which is read-only")
    assert not (root / "vendor" / "lib" / ".git" / "hooks").exists()
    assert box.call("write_file", path="vendor/lib/ok.txt", content="x")["ok"]


def test_writes_through_a_link_to_a_git_dir_are_refused(box: Box, root: Path):
    (root / "gitdir" / "hooks").mkdir(parents=True)
    (root / "sub").mkdir()
    (root / "sub" / ".git").symlink_to("../gitdir")
    (root / "alias").symlink_to("sub/.git")
    for path in ("sub/.git/hooks/pre-commit", "alias/hooks/pre-commit",
                 str(root / "sub" / ".git" / "config")):
        failed(box.call("write_file", path=path, content="#!/bin/sh\n"),
               f"'{path}' is inside .git, which is read-only in the sandbox")
    assert list((root / "gitdir" / "hooks").iterdir()) == []
    assert box.call("read_file", path="alias/hooks/../../README.md")["ok"]  # reads go on


# -- names that are not UTF-8, as the model reads and writes them (docs/TOOLS.md) --------

# What os.fsdecode makes of any bytes: text, and each byte that is not UTF-8 as U+DC80..U+DCFF.
names = st.binary(max_size=40).map(os.fsdecode)
tricky = st.lists(st.sampled_from(["\\", "x", "e9", "\udce9", "a", "\\x", "\\\\", "xff", "é"]),
                  max_size=12).map("".join)


@given(st.one_of(names, tricky))
def test_every_name_reads_back_as_itself_and_reaches_a_model_as_text(name: str):
    assert unshown(shown(name)) == name
    assert not [c for c in shown(name) if "\ud800" <= c <= "\udfff"]  # any JSON carries it


def test_the_forms_of_some_names():
    assert shown(os.fsdecode(b"caf\xe9.txt")) == "caf\\xe9.txt"
    assert shown(os.fsdecode(b"d\xff/a\\b\xfe")) == "d\\xff/a\\\\b\\xfe"
    assert shown("a\\b") == "a\\b" and shown("caf\\xe9") == "caf\\\\xe9"  # UTF-8 names
    assert unshown("caf\\xE9.txt") == os.fsdecode(b"caf\xe9.txt")  # upper case hex too
    assert unshown("a\\b") == "a\\b" and unshown("x\\x41") == "x\\x41"  # taken as written
