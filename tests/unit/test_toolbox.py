"""The in-container toolbox, driven as a real subprocess over its JSON-lines protocol.

The root is a temp dir and a secret file sits next to it (never inside). No Docker: the fork
and memory bombs are exercised in real containers by tests/docker; here they are skipped.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.sandbox import toolbox

TOOLBOX = Path(toolbox.__file__)
PYTHON = os.environ.get("TOOLBOX_TEST_PYTHON", sys.executable)
SECRET = "TOP-SECRET-never-in-output"
HAS_RG = shutil.which("rg") is not None


class Box:
    """A toolbox process and a tiny client for its protocol."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            [PYTHON, str(TOOLBOX), "--root", str(root), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )
        self._buf = b""
        self._next = 0
        self.ready = self.read()

    def call(self, tool: str, **args: Any) -> dict[str, Any]:
        """One tool call; checks the reply belongs to it."""
        self._next += 1
        reply = self.request({"id": self._next, "tool": tool, "args": args})
        assert reply["id"] == self._next
        return reply

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send an arbitrary request object."""
        return self.send_line(json.dumps(message).encode())

    def send_line(self, line: bytes) -> dict[str, Any]:
        """Send raw bytes plus a newline, read one reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self, timeout: float = 30) -> dict[str, Any]:
        """The next protocol line, parsed (every stdout line must be one)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                assert sel.select(max(0.0, deadline - time.monotonic())), "toolbox hung"
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, f"toolbox exited with {self.proc.wait()}"
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    def alive(self) -> None:
        """The process still answers."""
        assert self.call("ping")["output"] == "pong"

    def close(self) -> int:
        """Close stdin and wait for the exit code."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small project with a secret file next to it (not inside)."""
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (project / "README.md").write_text("# demo\n")
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    (project / ".sandbox-agent").mkdir()
    (project / ".sandbox-agent" / "audit.ndjson").write_text('{"seq": 0}\n')
    return project


@pytest.fixture
def make_box(root: Path) -> Iterator[Callable[..., Box]]:
    """Start toolboxes on `root` with extra argv; all are closed at the end."""
    boxes: list[Box] = []

    def make(*args: str, env: dict[str, str] | None = None) -> Box:
        boxes.append(Box(root, *args, env=env))
        return boxes[-1]

    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def box(make_box: Callable[..., Box]) -> Box:
    """A toolbox on `root` with the host's usual argv."""
    return make_box("--readonly-dir", ".git")


@pytest.fixture(params=["rg", "python"])
def engine_box(request: pytest.FixtureRequest, make_box: Callable[..., Box]) -> Box:
    """A toolbox searching with ripgrep, or with the forced Python fallback."""
    if request.param == "rg" and not HAS_RG:
        pytest.skip("ripgrep is not installed")
    return make_box() if request.param == "rg" else make_box("--no-rg")


def failed(reply: dict[str, Any], *fragments: str) -> str:
    """Assert a failed result whose output holds every fragment; return the output."""
    assert reply["ok"] is False, reply
    for fragment in fragments:
        assert fragment in reply["output"], reply["output"]
    return str(reply["output"])


def gone(pid: int, within: float = 3.0) -> bool:
    """Whether a process disappeared (or is a zombie) within a few seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in (b"Z", b"X"):
            return True
        time.sleep(0.02)
    return False


# -- protocol ---------------------------------------------------------------------------------


def test_ready_line(box: Box):
    assert set(box.ready) == {"ready", "pid", "version", "python", "rg"}
    assert box.ready["ready"] is True and box.ready["version"] == 1
    assert box.ready["pid"] == box.proc.pid
    assert box.ready["python"].count(".") == 2
    assert box.ready["rg"] is HAS_RG


def test_forced_fallback_reports_no_rg(make_box: Callable[..., Box]):
    assert make_box("--no-rg").ready["rg"] is False
    assert make_box(env={**os.environ, "TOOLBOX_NO_RG": "1"}).ready["rg"] is False


def test_ping_and_duration(box: Box):
    reply = box.call("ping")
    assert reply["ok"] and reply["output"] == "pong"
    assert isinstance(reply["meta"]["duration_ms"], float)


def test_shutdown_replies_then_exits_zero(box: Box):
    assert box.call("shutdown")["ok"]
    assert box.proc.wait(timeout=10) == 0


def test_eof_exits_zero(box: Box):
    assert box.close() == 0


@pytest.mark.parametrize(
    ("line", "rid"),
    [(b"not json", None), (b"\xff\xfe{", None), (b"[1, 2]", None), (b'{"id": 3}', 3),
     (b'{"id": 4, "tool": 5}', 4), (b"", None), (b"[" * 100_000, None)],
)
def test_bad_requests_get_a_reply_and_change_nothing(box: Box, line: bytes, rid: int | None):
    reply = box.send_line(line)
    assert reply["id"] == rid
    failed(reply, "bad request")
    assert "duration_ms" in reply["meta"]
    box.alive()


def test_args_must_be_an_object(box: Box):
    failed(box.request({"id": 9, "tool": "read_file", "args": ["README.md"]}), "JSON object")
    failed(box.request({"id": 10, "tool": "list_files", "args": []}), "JSON object")
    assert box.request({"id": 11, "tool": "list_files", "args": None})["ok"]
    box.alive()


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("read_file", {}, "missing required argument 'path'"),
        ("read_file", {"path": 5}, "argument 'path' must be a string"),
        ("read_file", {"path": "README.md", "start_line": "x"},
         "argument 'start_line' must be an integer"),
        ("read_file", {"path": "README.md", "start_line": True},
         "argument 'start_line' must be an integer"),
        ("read_file", {"path": "README.md", "start_line": 0}, "'start_line' must be 1 or more"),
        ("read_file", {"path": "README.md", "bogus": 1, "zz": 2},
         "unknown arguments for read_file: bogus, zz; allowed: path, start_line, end_line"),
        ("write_file", {"path": "x.txt"}, "missing required argument 'content'"),
        ("edit_file", {"path": "README.md", "old_text": "#", "new_text": "!",
                       "replace_all": "yes"}, "argument 'replace_all' must be true or false"),
        ("search_files", {"pattern": "x", "max_results": 0}, "between 1 and 1000"),
        ("search_files", {"pattern": ""}, "pattern is empty"),
        ("list_files", {"depth": 0}, "'depth' must be 1 or more"),
        ("run_shell_command", {"command": 42}, "argument 'command' must be a string"),
        ("run_shell_command", {"command": "true", "timeout_seconds": "5"},
         "argument 'timeout_seconds' must be a number"),
        ("run_shell_command", {"command": "true", "timeout_seconds": 0}, "more than 0"),
        ("run_shell_command", {"command": "  "}, "command is empty"),
        ("frobnicate", {}, "unknown tool 'frobnicate'; available: read_file, write_file, "
                           "edit_file, search_files, list_files, run_shell_command"),
    ],
)
def test_bad_arguments_are_clear_errors(box: Box, tool: str, args: dict[str, Any], message: str):
    failed(box.call(tool, **args), message)
    box.alive()


def test_unexpected_exceptions_become_internal_errors(root: Path, monkeypatch):
    def broken(ctx: Any, path: str) -> Any:
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(toolbox.TOOLS, "read_file", (broken, {"path": (toolbox.STR, True)}))
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root)]))
    reply, stop = toolbox.respond(ctx, b'{"id": 1, "tool": "read_file", "args": {"path": "x"}}')
    assert reply["id"] == 1 and not stop
    failed(reply, "internal error in read_file: ZeroDivisionError: boom")


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


TOOL_NAMES = ["read_file", "write_file", "edit_file", "search_files", "list_files"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(tool=st.sampled_from(TOOL_NAMES), args=st.dictionaries(
    st.sampled_from(["path", "content", "old_text", "new_text", "pattern", "start_line",
                     "glob", "depth", "max_results", "replace_all", "extra"]),
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=12)
    | st.lists(st.integers(), max_size=2), max_size=4))
def test_no_request_crashes_the_process(shared_box: Box, tool: str, args: dict[str, Any]):
    reply = shared_box.call(tool, **args)
    assert set(reply) == {"id", "ok", "output", "meta"}
    assert "internal error" not in reply["output"], reply
    assert SECRET not in reply["output"]


@pytest.fixture(scope="module")
def shared_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """One toolbox for the property test (hypothesis reuses function fixtures)."""
    base = tmp_path_factory.mktemp("fuzz")
    (base / "secret.txt").write_text(SECRET)
    (base / "project").mkdir()
    (base / "project" / "a.txt").write_text("alpha\nbeta\n")
    box = Box(base / "project")
    yield box
    assert box.close() == 0


def test_runs_under_the_hosts_bootstrap(root: Path):
    from executor.sandbox.docker import _BOOTSTRAP

    source = TOOLBOX.read_bytes()
    proc = subprocess.Popen([PYTHON, "-u", "-c", _BOOTSTRAP, "--root", str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    request = json.dumps({"id": 1, "tool": "read_file", "args": {"path": "README.md"}})
    out, _ = proc.communicate(str(len(source)).encode() + b"\n" + source + request.encode()
                              + b"\n", timeout=30)
    ready, reply = (json.loads(line) for line in out.splitlines())
    assert ready["ready"] and proc.returncode == 0
    assert reply["ok"] and reply["output"] == "     1\t# demo"


def test_source_is_python39_syntax():
    ast.parse(TOOLBOX.read_text(), feature_version=(3, 9))
    assert "from __future__ import annotations" in TOOLBOX.read_text()


# -- paths ------------------------------------------------------------------------------------


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


# -- read_file --------------------------------------------------------------------------------


def test_read_numbered_lines_and_ranges(box: Box, root: Path):
    (root / "five.txt").write_text("".join(f"line {i}\n" for i in range(1, 6)))
    whole = box.call("read_file", path="five.txt")
    assert whole["ok"] and whole["output"].splitlines()[0] == "     1\tline 1"
    assert whole["meta"]["lines"] == 5 and whole["meta"]["total_lines"] == 5
    assert whole["meta"]["truncated"] is False and whole["meta"]["total_bytes"] == 35
    part = box.call("read_file", path="five.txt", start_line=2, end_line=3)
    assert part["output"] == "     2\tline 2\n     3\tline 3"
    assert box.call("read_file", path="five.txt", start_line=5)["output"] == "     5\tline 5"
    failed(box.call("read_file", path="five.txt", start_line=9),
           "start_line 9 is past the end of 'five.txt' (5 lines)")
    failed(box.call("read_file", path="five.txt", start_line=3, end_line=2),
           "end_line (2) is before start_line (3)")


@pytest.mark.parametrize(("path", "message"), [
    ("src", "'src' is a directory; use list_files"), ("missing.txt", "file not found: missing.txt"),
    ("src/nope/x.py", "file not found: src/nope/x.py"),
])
def test_read_errors(box: Box, path: str, message: str):
    failed(box.call("read_file", path=path), message)


def test_read_binary_invalid_utf8_empty_crlf_and_fifo(box: Box, root: Path):
    (root / "blob.bin").write_bytes(b"\x00\x01\x02" * 1000)
    assert failed(box.call("read_file", path="blob.bin")) == "binary file (3000 bytes); not shown"
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    latin = box.call("read_file", path="latin1.txt")
    assert latin["ok"] and "caf\ufffd" in latin["output"] and "not valid UTF-8" in latin["output"]
    (root / "empty.txt").write_bytes(b"")
    assert box.call("read_file", path="empty.txt")["output"].startswith("(empty file")
    (root / "dos.txt").write_bytes(b"a\r\nb\r\n")
    assert box.call("read_file", path="dos.txt")["output"] == "     1\ta\n     2\tb"
    os.mkfifo(root / "pipe")
    failed(box.call("read_file", path="pipe"), "'pipe' is not a regular file")


def test_read_a_50_mb_file_in_pages(box: Box, root: Path):
    with (root / "big.log").open("wb") as f:
        f.write(b"".join(b"line %d " % i + b"x" * 40 + b"\n" for i in range(1_000_000)))
    assert (root / "big.log").stat().st_size > 50_000_000
    first = box.call("read_file", path="big.log")
    assert first["ok"] and first["meta"]["truncated"] is True and len(first["output"]) < 110_000
    shown = first["meta"]["lines"]
    assert f"showing lines 1-{shown} of 1000000" in first["output"]
    assert f"call read_file with start_line={shown + 1}" in first["output"]
    tail = box.call("read_file", path="big.log", start_line=999_999, end_line=1_000_005)
    assert tail["output"].splitlines()[0].startswith("999999\tline 999998 ")
    assert tail["meta"]["lines"] == 2 and not tail["meta"]["truncated"]


def test_read_a_huge_single_line(box: Box, root: Path):
    (root / "min.js").write_bytes(b"x" * 10_000_000 + "\u00e9".encode() * 10)
    reply = box.call("read_file", path="min.js")
    assert reply["ok"] and len(reply["output"]) < 3000
    assert "line cut" in reply["output"] and "longer than 2000 characters" in reply["output"]
    assert "not valid UTF-8" not in reply["output"]


# -- write_file / edit_file -------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_write_creates_parents_and_reports_hashes(box: Box, root: Path):
    reply = box.call("write_file", path="pkg/deep/new.py", content="X = 1\nY = 'é'\n")
    data = "X = 1\nY = 'é'\n".encode()
    assert reply["ok"] and (root / "pkg" / "deep" / "new.py").read_bytes() == data
    assert reply["meta"] == {"bytes": len(data), "sha256_before": None, "sha256_after": sha(data),
                             "lines_changed": 2, "created": True,
                             "duration_ms": reply["meta"]["duration_ms"]}
    assert "new file" in reply["output"]


def test_overwrite_counts_changed_lines(box: Box, root: Path):
    (root / "f.txt").write_text("a\nb\nc\n")
    reply = box.call("write_file", path="f.txt", content="a\nB\nc\nd\n")
    assert reply["meta"]["sha256_before"] == sha(b"a\nb\nc\n")
    assert reply["meta"]["lines_changed"] == 3 and reply["meta"]["created"] is False
    assert (root / "f.txt").read_text() == "a\nB\nc\nd\n"


def test_big_rewrites_stay_cheap(box: Box, root: Path):
    old = "".join(f"{i}\n" for i in range(100_000))
    (root / "n.txt").write_text(old)
    reply = box.call("write_file", path="n.txt", content=old.replace("7", "x"))
    assert reply["ok"] and reply["meta"]["lines_changed"] > 0


def test_write_errors(box: Box, root: Path):
    failed(box.call("write_file", path="src", content="x"), "'src' is a directory")
    failed(box.call("write_file", path="README.md/x", content="x"), "README.md")
    assert (root / "README.md").read_text() == "# demo\n"


def test_edit_replaces_the_unique_occurrence(box: Box, root: Path):
    reply = box.call("edit_file", path="src/app.py", old_text="a + b", new_text="a - b")
    assert reply["ok"] and reply["meta"]["replacements"] == 1
    assert reply["meta"]["lines_changed"] == 2
    assert reply["meta"]["sha256_before"] != reply["meta"]["sha256_after"]
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_edit_with_no_match_says_how_to_fix_it(box: Box, root: Path):
    failed(box.call("edit_file", path="src/app.py", old_text="a * b", new_text="x"),
           "0 matches", "read_file", "exact text")
    output = failed(box.call("edit_file", path="src/app.py", old_text="      return a + b",
                             new_text="x"), "0 matches")
    assert "lines 2-2 match except for whitespace" in output
    numbered = box.call("edit_file", path="src/app.py", old_text="     2\t    return a + b",
                        new_text="x")
    failed(numbered, "line numbers from read_file")
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_edit_with_many_matches_and_replace_all(box: Box, root: Path):
    (root / "m.txt").write_text("x = 1\nx = 1\ny = 2\nx = 1\n")
    failed(box.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 9"),
           "matches 3 times", "at lines 1, 2, 4", "replace_all=true")
    assert (root / "m.txt").read_text() == "x = 1\nx = 1\ny = 2\nx = 1\n"
    reply = box.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 9",
                     replace_all=True)
    assert reply["ok"] and reply["meta"]["replacements"] == 3
    assert (root / "m.txt").read_text() == "x = 9\nx = 9\ny = 2\nx = 9\n"


def test_edit_creates_a_missing_file_without_old_text(box: Box, root: Path):
    reply = box.call("edit_file", path="new/mod.py", new_text="VALUE = 1\n")
    assert reply["ok"] and reply["meta"]["created"] and reply["meta"]["replacements"] == 0
    assert (root / "new" / "mod.py").read_text() == "VALUE = 1\n"
    failed(box.call("edit_file", path="new/mod.py", new_text="x"),
           "already exists", "give old_text", "write_file")
    failed(box.call("edit_file", path="nope.py", old_text="a", new_text="b"),
           "file not found: nope.py", "without old_text")
    failed(box.call("edit_file", path="new/mod.py", old_text="", new_text="b"),
           "old_text is empty", "write_file")
    assert (root / "new" / "mod.py").read_text() == "VALUE = 1\n"


def test_edit_with_empty_old_text_creates_a_missing_file(box: Box, root: Path):
    reply = box.call("edit_file", path="hello.py", old_text="", new_text="print('hello')\n")
    assert reply["ok"] and reply["meta"]["created"], reply
    assert (root / "hello.py").read_text() == "print('hello')\n"


def test_edit_keeps_crlf_and_invalid_bytes(box: Box, root: Path):
    (root / "dos.txt").write_bytes(b"\xff one\r\ntwo\r\nthree\r\n")
    reply = box.call("edit_file", path="dos.txt", old_text="one\ntwo", new_text="1\n2")
    assert reply["ok"], reply
    assert (root / "dos.txt").read_bytes() == b"\xff 1\r\n2\r\nthree\r\n"
    (root / "blob.bin").write_bytes(b"\x00abc")
    failed(box.call("edit_file", path="blob.bin", old_text="abc", new_text="x"), "binary file")


# -- search_files -----------------------------------------------------------------------------


def search_tree(root: Path) -> None:
    """Files that tell a correct search from a sloppy one."""
    (root / "src" / "util.py").write_text("import os\nNEEDLE = 1\n\nprint(NEEDLE)\n")
    (root / ".github").mkdir()
    (root / ".github" / "ci.yml").write_text("run: NEEDLE\n")
    (root / ".git" / "NEEDLE").write_text("NEEDLE\n")
    (root / ".sandbox-agent" / "n.txt").write_text("NEEDLE\n")
    (root / "bin.dat").write_bytes(b"NEEDLE\x00\x01")
    (root / "long.txt").write_text("NEEDLE" + "y" * 1000 + "\n")
    (root / "link-out").symlink_to(root.parent / "secret.txt")
    (root.parent / "secret.txt").write_text(SECRET + " NEEDLE\n")


def test_search_finds_lines_as_path_line_text(engine_box: Box, root: Path):
    search_tree(root)
    reply = engine_box.call("search_files", pattern="NEEDLE")
    assert reply["ok"]
    lines = reply["output"].splitlines()
    assert lines[:2] == [".github/ci.yml:1:run: NEEDLE",
                         "long.txt:1:NEEDLE" + "y" * 494 + " [... omitted end of long line]"]
    assert lines[2:] == ["src/util.py:2:NEEDLE = 1", "src/util.py:4:print(NEEDLE)"]
    assert reply["meta"]["matches"] == 4
    assert reply["meta"]["engine"] == ("rg" if engine_box.ready["rg"] else "python")


def test_both_engines_give_the_same_results(make_box: Callable[..., Box], root: Path):
    if not HAS_RG:
        pytest.skip("ripgrep is not installed")
    search_tree(root)
    rg, py = make_box(), make_box("--no-rg")
    for args in [{"pattern": "NEEDLE"}, {"pattern": r"^\w+ = \d$"}, {"pattern": "NEEDLE",
                 "path": "src"}, {"pattern": "os", "path": "src/util.py"},
                 {"pattern": "-?import"}, {"pattern": "nothing-here"}]:
        assert rg.call("search_files", **args)["output"] == py.call("search_files", **args)[
            "output"], args


def test_search_paths_limits_and_errors(engine_box: Box, root: Path):
    (root / "many.txt").write_text("hit\n" * 250)
    capped = engine_box.call("search_files", pattern="hit", max_results=100)
    assert capped["output"].count("\n") == 100 and capped["meta"]["matches"] == 100
    assert "stopped after 100 results" in capped["output"] and capped["meta"]["truncated"]
    assert engine_box.call("search_files", pattern="def add", path="src/app.py")["output"] == (
        "src/app.py:1:def add(a, b):")
    none = engine_box.call("search_files", pattern="zzz")
    assert none["ok"] and none["output"] == "no matches for 'zzz' in ."
    failed(engine_box.call("search_files", pattern="a("), "invalid regex 'a('")
    failed(engine_box.call("search_files", pattern="x", path="nope"), "path not found: nope")
    engine_box.alive()


def test_patterns_only_python_understands_still_work(engine_box: Box):
    reply = engine_box.call("search_files", pattern=r"(?<=def )add")
    assert reply["output"] == "src/app.py:1:def add(a, b):"
    assert reply["meta"]["engine"] == "python"


# -- list_files -------------------------------------------------------------------------------


def test_list_is_sorted_and_skips_git_and_state(box: Box, root: Path):
    (root / "src" / "pkg").mkdir()
    (root / "src" / "pkg" / "m.py").write_text("")
    (root / ".env").write_text("")
    (root / "a.txt").write_text("")
    reply = box.call("list_files")
    assert reply["output"].splitlines() == [".env", "README.md", "a.txt", "src/", "src/app.py",
                                            "src/pkg/", "src/pkg/m.py"]
    assert reply["meta"]["entries"] == 7 and reply["meta"]["truncated"] is False


def test_list_depth_glob_and_subpaths(box: Box, root: Path):
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "deep.py").write_text("")
    shallow = box.call("list_files", depth=1)
    assert shallow["output"].splitlines()[:3] == ["README.md", "a/", "src/"]
    assert "not expanded" in shallow["output"]
    default = box.call("list_files")["output"]
    assert "a/b/c/" in default and "deep.py" not in default and "depth=3" in default
    assert box.call("list_files", glob="*.py")["output"] == "a/b/c/deep.py\nsrc/app.py"
    assert box.call("list_files", path="src")["output"] == "src/app.py"
    assert box.call("list_files", path="src/app.py")["output"] == "src/app.py"
    assert box.call("list_files", glob="*.rs")["output"] == "no entries match '*.rs' in ."
    (root / "void").mkdir()
    assert box.call("list_files", path="void")["output"] == "(empty directory)"
    failed(box.call("list_files", path="nope"), "file not found: nope")


def test_list_is_capped(box: Box, root: Path):
    (root / "many").mkdir()
    for i in range(1100):
        (root / "many" / f"f{i:04}").write_text("")
    reply = box.call("list_files")
    assert reply["meta"]["truncated"] is True and reply["meta"]["entries"] == 1000
    assert "stopped at 1000 entries" in reply["output"]
    assert reply["output"].splitlines()[0] == "README.md"


# -- run_shell_command ------------------------------------------------------------------------


def test_shell_exit_codes_and_sections(box: Box, root: Path):
    good = box.call("run_shell_command", command="echo out; echo err >&2")
    assert good["ok"] and good["output"] == "exit_code: 0\nstdout:\nout\nstderr:\nerr"
    assert good["meta"]["exit_code"] == 0 and good["meta"]["stdout_bytes"] == 4
    bad = box.call("run_shell_command", command="exit 3")
    assert bad["ok"] is False and bad["output"] == "exit_code: 3\n(no output)"
    assert bad["meta"]["exit_code"] == 3 and bad["meta"]["timed_out"] is False
    where = box.call("run_shell_command", command="pwd; cat; echo done")
    assert where["output"] == f"exit_code: 0\nstdout:\n{root.resolve()}\ndone"


def test_shell_killed_by_a_signal(box: Box):
    reply = box.call("run_shell_command", command="kill -KILL $$")
    failed(reply, "exit_code: 137", "killed by SIGKILL")
    assert reply["meta"]["signal"] == "SIGKILL" and reply["meta"]["exit_code"] == 137


def test_shell_timeout_kills_everything(box: Box):
    reply = box.call("run_shell_command", command="sleep 10000 & echo $!; wait",
                     timeout_seconds=1)
    failed(reply, "timed out after 1s")
    assert reply["meta"]["timed_out"] is True and reply["meta"]["exit_code"] is None
    assert reply["meta"]["signal"] == "SIGKILL"
    assert gone(int(reply["output"].split("stdout:\n")[1].split()[0]))
    box.alive()


def test_background_job_holding_the_output_runs_into_the_timeout(box: Box):
    reply = box.call("run_shell_command", command="sleep 10000 & echo started",
                     timeout_seconds=1)
    failed(reply, "timed out after 1s", "shell itself exited with code 0", "started")
    box.alive()


@pytest.mark.parametrize("start", ["sleep 10000", "setsid sleep 10000", "nohup sleep 10000",
                                   "env -i sleep 10000"])
def test_background_jobs_do_not_survive_a_call(box: Box, start: str):
    reply = box.call("run_shell_command", command=f"{start} >/dev/null 2>&1 & echo $!")
    assert reply["ok"] and "1 background process still running were killed" in reply["output"]
    assert reply["meta"]["killed_processes"] == 1
    assert gone(int(reply["output"].split("stdout:\n")[1]))
    box.alive()


def test_endless_output_is_capped_and_killed(box: Box):
    reply = box.call("run_shell_command", command="yes")
    failed(reply, "output limit exceeded", "killed", "bytes omitted")
    assert reply["meta"]["output_limit_exceeded"] and reply["meta"]["truncated"]
    assert 20 * 1024 * 1024 < reply["meta"]["stdout_bytes"] < 21 * 1024 * 1024
    assert len(reply["output"]) < 31_000
    assert box.call("run_shell_command", command="echo again")["output"].endswith("again")


def test_output_keeps_head_and_tail(make_box: Callable[..., Box]):
    box = make_box("--max-output", "3000")
    reply = box.call("run_shell_command", command="seq 1 100000")
    out = reply["output"]
    assert reply["ok"] and out.startswith("exit_code: 0\nstdout:\n1\n2\n3\n")
    assert out.endswith("\n99999\n100000") and "bytes omitted ...]" in out
    assert reply["meta"]["truncated"] and reply["meta"]["stdout_bytes"] == 588_895
    assert len(out) < 3200


@pytest.mark.parametrize(("text", "key", "value"), [
    (b"max 7\n", b"max", 7), (b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", b"oom_kill", 3),
    (b"low 0\nhigh 0\nmax 2\noom 4\noom_kill 4\n", b"oom_kill", 4), (b"", b"max", 0),
])
def test_cgroup_counters_are_parsed(tmp_path: Path, text: bytes, key: bytes, value: int):
    (tmp_path / "events").write_bytes(text)
    assert toolbox._counter(str(tmp_path / "events"), key) == value
    assert toolbox._counter(None, key) == 0


class _Exited:
    returncode = 0


@pytest.mark.parametrize(("hits", "expected"), [
    ((12, 0), "process limit hit: the sandbox refused 12 forks"),
    ((0, 1), "out of memory: the sandbox's memory limit made the kernel kill 1 process"),
])
def test_runaways_are_failures_even_when_the_shell_exits_zero(hits: tuple[int, int], expected: str):
    out, err = toolbox._Capture(100), toolbox._Capture(100)
    err.add(b"sh: Cannot fork\n")
    result = toolbox._shell_result(_Exited(), None, 5, 0, 0, hits, out, err)
    assert result["ok"] is False and result["meta"]["exit_code"] == 0
    assert result["output"].startswith(f"exit_code: 0\n{expected}")
    assert result["output"].endswith("stderr:\nsh: Cannot fork")


@pytest.mark.skip(reason="fork and memory bombs run inside real containers (tests/docker)")
@pytest.mark.parametrize("command", [":(){ :|:& };:", "python3 -c \"a = ' ' * 10**10\""])
def test_bombs(box: Box, command: str):
    failed(box.call("run_shell_command", command=command, timeout_seconds=5))
    box.alive()
