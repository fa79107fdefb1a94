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
import random
import re
import resource
import selectors
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import toolbox_view as toolbox

PACKAGE = Path(toolbox.MODULES[0].__file__ or "").parent
REPO = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("TOOLBOX_TEST_PYTHON", sys.executable)
SECRET = "TOP-SECRET-never-in-output"
HAS_RG = shutil.which("rg") is not None


class Box:
    """A toolbox process and a tiny client for its protocol."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None,
                 fsize: int | None = None) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "executor.sandbox.toolbox", "--root", str(root), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**(env if env is not None else os.environ), "PYTHONPATH": str(REPO)},
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize)))
            if fsize else None,
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

    def make(*args: str, env: dict[str, str] | None = None, fsize: int | None = None) -> Box:
        boxes.append(Box(root, *args, env=env, fsize=fsize))
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
    assert set(box.ready) == {"ready", "pid", "version", "python", "rg", "guarded", "filter",
                              "root", "channel"}
    assert box.ready["ready"] is True and box.ready["version"] == 1
    assert box.ready["filter"] == "not given" and box.ready["channel"] == "stdio"
    here = os.stat(box.root)  # the host compares this with its own view of the root
    assert box.ready["root"] == {"dev": here.st_dev, "ino": here.st_ino,
                                 "mtime_ns": here.st_mtime_ns}
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


def _bootstrapped(root: Path, payload: bytes) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
    """The magic line, ready line and first reply of the host's bootstrap fed `payload`."""
    from executor.sandbox import boot

    proc = subprocess.Popen([PYTHON, "-u", "-c", boot.source("bootstrap"), "--root", str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    request = json.dumps({"id": 1, "tool": "read_file", "args": {"path": "README.md"}})
    out, _ = proc.communicate(payload + request.encode() + b"\n", timeout=30)
    magic, *lines = out.splitlines()
    ready, reply = (json.loads(line) for line in lines)
    assert proc.returncode == 0
    return magic, ready, reply


def test_runs_under_the_hosts_bootstrap(root: Path):
    """The bootstrap says its bytecode format; this one is ours, so it gets our code."""
    from importlib.util import MAGIC_NUMBER

    from executor.sandbox.docker import toolbox_payload

    payload = toolbox_payload(MAGIC_NUMBER.hex().encode())
    magic, ready, reply = _bootstrapped(root, payload)
    assert magic == MAGIC_NUMBER.hex().encode() and payload.startswith(b"code ")
    assert ready["ready"]
    assert reply["ok"] and reply["output"] == "     1\t# demo"


def test_another_python_gets_the_source(root: Path):
    """An unknown bytecode format (or a garbled line) gets the source, which the bootstrap
    compiles; the same toolbox answers."""
    from executor.sandbox.docker import toolbox_payload

    for said in (b"00000000", b"not hex at all"):
        payload = toolbox_payload(said)
        assert payload.startswith(b"source ")
        _, ready, reply = _bootstrapped(root, payload)
        assert ready["ready"] and reply["ok"] and reply["output"] == "     1\t# demo"


def test_the_bootstrap_runs_the_code_it_is_sent(root: Path):
    """`code`: the bundle's `toolbox.__main__` runs as the toolbox (here one that only says
    so), importing its sibling modules from the bundle, under their own names."""
    import marshal
    import zlib

    def code(text: str, name: str) -> Any:
        return compile(text, name, "exec")

    bundle = {"toolbox": (True, code("", "toolbox/__init__.py")),
              "toolbox.said": (False, code("import json\nREADY = json.dumps({'ready': "
                                           "'code'})\n", "toolbox/said.py")),
              "toolbox.__main__": (False, code(
                  "import json, sys\nfrom .said import READY\n"
                  "def main(argv):\n    print(READY)\n    print(json.dumps({'argv': sys.argv, "
                  "'name': __name__, 'file': __file__}))\n    return 0\n",
                  "toolbox/__main__.py"))}
    blob = zlib.compress(marshal.dumps(bundle))
    _, ready, reply = _bootstrapped(root, f"code {len(blob)}\n".encode() + blob)
    assert ready == {"ready": "code"}
    assert reply == {"argv": ["toolbox", "--root", str(root)], "name": "toolbox.__main__",
                     "file": "toolbox/__main__.py"}


def test_source_is_python39_syntax():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    for path in files:
        ast.parse(path.read_text(), feature_version=(3, 9))
        assert path.name == "__init__.py" or "from __future__ import annotations" in \
            path.read_text(), path


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


def test_a_failed_edit_finds_its_closest_line_cheaply_whatever_the_file(box: Box, root: Path):
    """difflib's ratio is quadratic in a line's length: in a crafted file (long lines of many
    distinct characters) the "closest line" hint of a failed edit took 10 s for 20 lines. Only
    lines of up to 500 characters are compared now."""
    rng = random.Random(1)
    alphabet = [chr(0x100 + i) for i in range(300)]
    lines = ["".join(rng.choice(alphabet) for _ in range(20_000)) for _ in range(20)]
    (root / "long.txt").write_text("\n".join([*lines, "short line here"]) + "\n")
    started = time.monotonic()
    near = box.call("edit_file", path="long.txt", old_text="short lime here", new_text="x")
    assert "Hint: line 21 is the closest; copy it exactly:\nshort line here" in failed(near)
    other = "".join(rng.choice(alphabet) for _ in range(20_000))
    far = box.call("edit_file", path="long.txt", old_text=other, new_text="x")
    failed(far, "0 matches")
    assert time.monotonic() - started < 5


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
    quoted = box.call("edit_file", path="src/app.py", old_text="def add(a, c):", new_text="x")
    assert "Hint: line 1 is the closest; copy it exactly:\ndef add(a, b):" in failed(quoted)
    numbered = box.call("edit_file", path="src/app.py", old_text="     2\t    return a + b",
                        new_text="x")
    failed(numbered, "line numbers from read_file")
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_edit_hint_finds_the_text_without_its_quotes_punctuation_or_case(box: Box, root: Path):
    (root / "greet.py").write_text('def greet(name):\n    return "Hello, " + name + "!"\n')
    for guess in ("Hello.", "'hello'", '"Hello!"'):
        output = failed(box.call("edit_file", path="greet.py", old_text=guess, new_text="Hi"),
                        "0 matches")
        assert "Hint: 'Hello' is on line 2" in output.replace("'hello'", "'Hello'")
        assert 'copy the whole line:\n    return "Hello, " + name + "!"' in output
    (root / "many.txt").write_text("Hello\n" * 4)
    assert "is on line" not in failed(box.call("edit_file", path="many.txt", old_text="Hello.",
                                               new_text="x"), "0 matches")


def test_an_edit_that_would_break_a_python_file_is_refused_with_the_result_shown(
        box: Box, root: Path):
    source = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    (root / "calc.py").write_text(source)
    reply = box.call("edit_file", path="calc.py", old_text="    return a + b",
                     new_text="    return a +\n  b")
    output = failed(reply, "not changed: this edit would break 'calc.py' (SyntaxError",
                    "give its last lines as old_text", "After this edit the file would read:",
                    "     2\t    return a +", "This is 'calc.py' now")
    assert "line 2" in reply["meta"]["syntax_error"] and output
    assert (root / "calc.py").read_text() == source
    preview = box.request({"id": 99, "tool": "preview", "args": {"tool": "edit_file", "args": {
        "path": "calc.py", "old_text": "a - b", "new_text": "a -"}}})
    assert "would break" in preview["meta"]["error"]
    inside = box.call("edit_file", path="calc.py", old_text="def sub(a, b):",
                      new_text="def sub(a, b):\ndef mul(a, b):\nreturn a * b")
    failed(inside, "would break", "IndentationError")  # not after sub() either: no indent
    assert (root / "calc.py").read_text() == source


def test_lines_added_after_a_def_line_go_after_its_body(box: Box, root: Path):
    source = ('"""Helpers."""\n\n\ndef add(a, b):\n    """Sum."""\n    return a + b\n\n\n'
              'def sub(a, b):\n    return a - b\n')
    (root / "calc.py").write_text(source)
    args = {"path": "calc.py", "old_text": "def add(a, b):",
            "new_text": "def add(a, b):\n\n\ndef mul(a, b):\n    return a * b"}
    preview = box.request({"id": 99, "tool": "preview", "args": {"tool": "edit_file",
                                                                "args": args}})
    assert "+def mul(a, b):" in preview["output"] and preview["meta"]["error"] is None
    reply = box.call("edit_file", **args)
    assert reply["ok"] and "the new lines went after line 6, the end of the block that line 4 " \
        "opens" in reply["output"]
    assert (root / "calc.py").read_text() == (
        '"""Helpers."""\n\n\ndef add(a, b):\n    """Sum."""\n    return a + b\n\n\n'
        'def mul(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n')
    (root / "k.py").write_text("class K:\n    def f(self):\n        return 1\n")
    assert box.call("edit_file", path="k.py", old_text="    def f(self):", new_text=(
        "    def f(self):\n    def g(self):\n        return 2"))["ok"]
    assert (root / "k.py").read_text() == (
        "class K:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n")
    method = box.call("edit_file", path="k.py", old_text="    def g(self):", new_text=(
        "    def g(self):\n\ndef h(self):\n    if self:\n        return 3"))
    assert method["ok"] and "indented by 4 more spaces to stand beside it" in method["output"]
    assert (root / "k.py").read_text().endswith(
        "        return 2\n\n    def h(self):\n        if self:\n            return 3\n")
    deeper = box.call("edit_file", path="k.py", old_text="    def h(self):", new_text=(
        "    def h(self):\n\n            def i(self):\n                return 4"))
    failed(deeper, "would break 'k.py' (IndentationError")  # more indented: not guessed


def test_an_edit_says_which_lines_still_use_a_name_it_replaced(box: Box, root: Path):
    (root / "cart.py").write_text("from billing import calc_total\n\n\ndef total(items):\n"
                                  "    return calc_total(items)\n")
    reply = box.call("edit_file", path="cart.py", old_text="    return calc_total(items)",
                     new_text="    return compute_total(items)")
    assert reply["ok"] and reply["meta"]["still_there"] == {"calc_total": [1]}
    assert reply["output"].endswith(
        "\nnote: 'calc_total' is still on line 1: from billing import calc_total")
    done = box.call("edit_file", path="cart.py", old_text="import calc_total",
                    new_text="import compute_total")
    assert done["ok"] and "still_there" not in done["meta"] and "note" not in done["output"]


def test_a_python_file_that_did_not_compile_may_be_edited_step_by_step(box: Box, root: Path):
    (root / "half.py").write_text("def f(:\n    return 1\n")
    assert box.call("edit_file", path="half.py", old_text="return 1", new_text="return (")["ok"]
    (root / "notes.txt").write_text("def f():\n")
    assert box.call("edit_file", path="notes.txt", old_text="f()", new_text="f(")["ok"]
    (root / "warn.py").write_text("x = 1\n")
    escaped = box.call("edit_file", path="warn.py", old_text="x = 1", new_text="x = '\\d'")
    assert escaped["ok"] and (root / "warn.py").read_text() == "x = '\\d'\n"


def test_a_failed_edit_of_a_small_file_shows_the_file_so_the_fix_needs_no_read(
        box: Box, root: Path):
    reply = box.call("edit_file", path="src/app.py", old_text="a * b", new_text="x")
    output = failed(reply, "0 matches", "This is 'src/app.py' now")
    assert output.endswith("\n     1\tdef add(a, b):\n     2\t    return a + b")
    assert reply["meta"]["file_shown"] is True
    failed(box.call("edit_file", path="src/app.py", old_text="", new_text="x"),
           "old_text is empty", "     1\tdef add(a, b):")
    (root / "big.py").write_text("x = 1\n" * 500)
    big = box.call("edit_file", path="big.py", old_text="y = 2", new_text="y = 3")
    assert "now" not in failed(big, "0 matches") and "file_shown" not in big["meta"]


def test_edit_with_many_matches_and_replace_all(box: Box, root: Path):
    (root / "m.txt").write_text("x = 1\nx = 1\ny = 2\nx = 1\n")
    failed(box.call("edit_file", path="m.txt", old_text="x = 1", new_text="x = 9"),
           "matches 3 times", "at lines 1, 2, 4", "replace_all=true")
    (root / "r.py").write_text("from b import f\n\n\ndef g():\n    return f(1)\n")
    many = failed(box.call("edit_file", path="r.py", old_text="f", new_text="h"), "matches 4 "
                  "times", "(at lines 1, 1, 4, 5)")
    assert "one call per line; the lines are:\nfrom b import f\ndef g():\n    return f(1)" in many
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


# -- preview and the approved hash -------------------------------------------------------------


def preview_request(box: Box, args: dict[str, Any]) -> dict[str, Any]:
    """A raw preview request (its own `tool` argument would clash with `Box.call`'s)."""
    return box.request({"id": 1, "tool": "preview", "args": args})


def preview(box: Box, tool: str, **args: Any) -> dict[str, Any]:
    """A preview reply: always ok, the facts in meta (duration dropped)."""
    reply = preview_request(box, {"tool": tool, "args": args})
    assert reply["ok"], reply
    reply["meta"].pop("duration_ms")
    return reply


def test_preview_of_a_new_file_is_all_additions_and_writes_nothing(box: Box, root: Path):
    reply = preview(box, "write_file", path="pkg/new.py", content="A = 1\nB = 2")
    assert reply["output"] == ("--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n"
                               "\\ No newline at end of file\n")
    assert reply["meta"] == {"path": "pkg/new.py", "resolved": "pkg/new.py", "symlink": False,
                             "exists": False, "binary": False, "sha256_before": None,
                             "sha256_after": hashlib.sha256(b"A = 1\nB = 2").hexdigest(),
                             "error": None}
    assert not (root / "pkg").exists()


def test_a_preview_costs_what_changed_and_gives_up_on_crafted_text(box: Box, root: Path):
    """Red-team round 7: difflib is quadratic on many short repeated lines; a 30,000-line
    write kept the preview busy past the call's deadline."""
    big = "".join(f"line {i}\n" for i in range(100_000))
    (root / "big.txt").write_text(big)
    started = time.monotonic()
    one = preview(box, "edit_file", path="big.txt", old_text="line 50000\n",
                  new_text="line X\n")
    assert time.monotonic() - started < 5
    assert one["output"] == ("--- a/big.txt\n+++ b/big.txt\n@@ -49998,7 +49998,7 @@\n"
                             " line 49997\n line 49998\n line 49999\n-line 50000\n+line X\n"
                             " line 50001\n line 50002\n line 50003\n")
    rng = random.Random(5)
    crafted = "".join(f"{rng.randint(0, 150)}\n" for _ in range(30_000))
    started = time.monotonic()
    described = preview(box, "write_file", path="big.txt", content=crafted)
    assert time.monotonic() - started < 5
    assert described["output"].startswith("content not shown (over 5000 changed lines)")
    assert described["meta"]["sha256_after"] == hashlib.sha256(crafted.encode()).hexdigest()


def test_counting_the_changed_lines_after_a_write_stays_cheap(box: Box, root: Path):
    """Red-team round 8: after the write, lines_changed ran difflib without autojunk, cubic on
    crafted lines (2,400 lines took minutes): the host restarted the toolbox and the written
    file had no write record. Past a few hundred lines the count is a multiset difference."""
    (root / "data.txt").write_text("A\n" + "x\n" * 2400 + "END1\n")
    started = time.monotonic()
    reply = box.call("write_file", path="data.txt", content="B\n" + "x\nz\n" * 1200 + "END2\n")
    assert time.monotonic() - started < 3
    assert reply["ok"] and reply["meta"]["lines_changed"] == 2404, reply
    small = box.call("edit_file", path="src/app.py", old_text="a + b", new_text="b + a")
    assert small["meta"]["lines_changed"] == 2


def test_a_write_goes_ahead_only_as_the_preview_showed_it(box: Box, root: Path):
    """Red-team round 7: compile()'s recursion limit depends on the caller's stack, so the
    preview and the edit could take different branches; the host now sends the preview's
    sha256_after, and a call that would write other bytes writes nothing."""
    (root / "a.py").write_text("def f():\n    return 1\n")
    args = {"path": "a.py", "old_text": "return 1", "new_text": "return 2"}
    shown = preview(box, "edit_file", **args)["meta"]["sha256_after"]
    assert shown == hashlib.sha256(b"def f():\n    return 2\n").hexdigest()
    other = box.call("edit_file", **args, expect_sha256_after="0" * 64)
    failed(other, "would not be written as it was shown for approval; nothing was written")
    assert other["meta"]["not_as_approved"] is True
    assert (root / "a.py").read_text() == "def f():\n    return 1\n"
    assert box.call("edit_file", **args, expect_sha256_after=shown)["ok"]
    failed(box.call("write_file", path="b.txt", content="x", expect_sha256_after=shown),
           "would not be written as it was shown")
    assert not (root / "b.txt").exists()


def test_preview_of_an_overwrite_diffs_against_the_file_on_disk(box: Box, root: Path):
    (root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    content = (root / "f.txt").read_text().replace("line 5\n", "five\n") + "\x1b[2K tail\n"
    reply = preview(box, "write_file", path="f.txt", content=content)
    assert reply["output"].splitlines() == [
        "--- a/f.txt", "+++ b/f.txt",
        "@@ -2,9 +2,10 @@", " line 2", " line 3", " line 4", "-line 5", "+five", " line 6",
        " line 7", " line 8", " line 9", " line 10", "+\x1b[2K tail",
    ]
    assert reply["meta"]["exists"] and reply["meta"]["sha256_before"] == sha(
        (root / "f.txt").read_bytes())
    assert "five" not in (root / "f.txt").read_text()


def test_preview_of_an_edit_is_the_whole_files_diff_with_context(box: Box, root: Path):
    reply = preview(box, "edit_file", path="src/app.py", old_text="a + b", new_text="a - b")
    assert reply["output"] == ("--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n"
                               " def add(a, b):\n-    return a + b\n+    return a - b\n")
    assert reply["meta"]["error"] is None
    assert (root / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_preview_says_why_an_edit_would_fail(box: Box, root: Path):
    (root / "m.txt").write_text("x\nx\n")
    many = preview(box, "edit_file", path="m.txt", old_text="x", new_text="y")
    assert many["output"] == "" and "matches 2 times" in many["meta"]["error"]
    none = preview(box, "edit_file", path="m.txt", old_text="zzz", new_text="y")
    assert "0 matches" in none["meta"]["error"] and none["meta"]["exists"]
    outside = preview(box, "write_file", path="../secret.txt", content="x")
    assert "outside the project root" in outside["meta"]["error"]
    assert outside["meta"]["resolved"] is None
    git = preview(box, "write_file", path=".git/hooks/pre-commit", content="x")
    assert "read-only" in git["meta"]["error"]
    hidden = preview(box, "write_file", path=".sandbox-agent/x", content="x")
    assert "reserved" in hidden["meta"]["error"]


def test_preview_names_the_real_file_behind_a_symlink(box: Box, root: Path):
    (root / "link.py").symlink_to("src/app.py")
    (root / "lib").symlink_to("src", target_is_directory=True)
    reply = preview(box, "edit_file", path="link.py", old_text="a + b", new_text="a * b")
    assert reply["meta"]["symlink"] and reply["meta"]["resolved"] == "src/app.py"
    assert reply["output"].startswith("--- a/src/app.py\n+++ b/src/app.py\n")
    through = preview(box, "write_file", path="lib/app.py", content="x\n")
    assert through["meta"]["symlink"] and through["meta"]["resolved"] == "src/app.py"
    plain = preview(box, "write_file", path=str(root / "src" / "app.py"), content="x\n")
    assert not plain["meta"]["symlink"] and plain["meta"]["resolved"] == "src/app.py"


def test_preview_describes_binary_content_instead_of_dumping_it(box: Box, root: Path):
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    reply = preview(box, "write_file", path="blob.bin", content="text now\n")
    assert reply["meta"]["binary"]
    old, new = sha(b"\x00\x01\x02"), sha(b"text now\n")
    assert reply["output"] == (f"content not shown (binary or not UTF-8)\n"
                               f"before: 3 bytes, sha256 {old}\nafter:  9 bytes, sha256 {new}")
    latin = preview(box, "write_file", path="new.txt", content="caf\udce9")
    assert latin["meta"]["binary"] and "before: no file" in latin["output"]


def test_preview_refuses_other_tools_and_bad_arguments(box: Box):
    failed(preview_request(box, {"tool": "run_shell_command", "args": {"command": "ls"}}),
           "preview is for write_file and edit_file")
    failed(preview_request(box, {"tool": "write_file", "args": {"path": "x"}}),
           "missing required argument 'content'")
    failed(preview_request(box, {"tool": "write_file"}), "missing required argument 'args'")


def test_a_write_approved_on_other_content_writes_nothing(box: Box, root: Path):
    before = (root / "README.md").read_bytes()
    (root / "README.md").write_text("# changed meanwhile\n")
    failed(box.call("write_file", path="README.md", content="new\n", expect_sha256=sha(before)),
           "'README.md' changed since it was approved; nothing was written")
    assert (root / "README.md").read_text() == "# changed meanwhile\n"
    failed(box.call("edit_file", path="README.md", old_text="changed", new_text="x",
                    expect_sha256=sha(before)), "changed since it was approved")
    failed(box.call("write_file", path="late.txt", content="x", expect_sha256=sha(b"")),
           "changed since it was approved")
    assert not (root / "late.txt").exists()


def test_a_write_approved_on_the_same_content_goes_ahead(box: Box, root: Path):
    now = sha((root / "README.md").read_bytes())
    assert box.call("write_file", path="README.md", content="ok\n", expect_sha256=now)["ok"]
    assert box.call("write_file", path="fresh.txt", content="1\n", expect_sha256="absent")["ok"]
    failed(box.call("write_file", path="fresh.txt", content="2\n", expect_sha256="absent"),
           "changed since it was approved")
    assert (root / "fresh.txt").read_text() == "1\n"


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
    assert lines[2:] == ["src/util.py:2:NEEDLE = 1", "src/util.py:4:print(NEEDLE)",
                         "[1 file the search passed over (binary, or ignored by .gitignore/"
                         ".ignore) also matches: bin.dat; results are incomplete]"]
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
    assert none["ok"] and none["meta"]["matches"] == 0 and none["output"] == (
        "no matches for 'zzz' in .\nIt may go by another name: read the likely files. The "
        "files there:\nREADME.md\nmany.txt\nsrc/app.py")
    assert engine_box.call("search_files", pattern="zzz", path="src/app.py")["output"] == (
        "no matches for 'zzz' in src/app.py")
    for n in range(31):
        (root / f"f{n:02}.txt").write_text("x\n")
    assert engine_box.call("search_files", pattern="zzz")["output"] == (
        "no matches for 'zzz' in .")
    failed(engine_box.call("search_files", pattern="a("), "invalid regex 'a('")
    failed(engine_box.call("search_files", pattern="x", path="nope"), "path not found: nope")
    engine_box.alive()


def test_a_lower_case_pattern_matches_any_case(engine_box: Box, root: Path):
    (root / "config.py").write_text("from os import environ\nPORT = 8731\nretries = 2\n")
    reply = engine_box.call("search_files", pattern="port")
    assert reply["ok"] and reply["meta"]["ignore_case"] is True
    assert reply["output"] == "config.py:1:from os import environ\nconfig.py:2:PORT = 8731"
    assert engine_box.call("search_files", pattern=r"\w+ = \d")["output"] == (
        "config.py:2:PORT = 8731\nconfig.py:3:retries = 2")
    exact = engine_box.call("search_files", pattern="PORT")
    assert exact["output"] == "config.py:2:PORT = 8731" and "ignore_case" not in exact["meta"]


def test_a_search_without_matches_says_what_matches_ignoring_case(engine_box: Box, root: Path):
    (root / "config.py").write_text("TIMEOUT_SECONDS = 30\nretries = 2\n")
    reply = engine_box.call("search_files", pattern="Timeout")
    assert reply["ok"] and reply["meta"]["ignore_case"] is True
    assert reply["output"] == ("no matches for 'Timeout' in . as written; ignoring upper/lower "
                               "case:\nconfig.py:1:TIMEOUT_SECONDS = 30")
    exact = engine_box.call("search_files", pattern="Retries = 2|retries")
    assert exact["output"] == "config.py:2:retries = 2" and "ignore_case" not in exact["meta"]
    assert engine_box.call("search_files", pattern="(?i)zzz")["output"].startswith(
        "no matches for '(?i)zzz' in .\nIt may go by another name")


def test_a_fifo_in_the_tree_neither_blocks_a_search_nor_is_listed(engine_box: Box, root: Path):
    """Red-team round 7: the Python scan opened a FIFO with no writer and blocked until the
    call's deadline; the list of files searched named FIFOs and symlinks."""
    os.mkfifo(root / "pipe")
    (root / "link.txt").symlink_to(root / "README.md")
    started = time.monotonic()
    behind = engine_box.call("search_files", pattern=r"(?<=x )= 1")
    assert behind["ok"] and time.monotonic() - started < 5 and behind["meta"]["matches"] == 0
    listed = behind["output"].split("The files there:\n")[1].split("\n")
    assert "pipe" not in listed and "link.txt" not in listed and "README.md" in listed
    assert engine_box.call("search_files", pattern=r"(?<=x )= 1", path="pipe")["ok"]


def test_a_pattern_that_backtracks_for_ages_ends_at_the_deadline(make_box: Callable[..., Box],
                                                                   root: Path):
    """Red-team round 8: `re` cannot be interrupted mid-match, so the Python scan of a
    catastrophic pattern ran until the host restarted the toolbox (75 s, no result). The scan
    now runs in a child process killed at the deadline; the toolbox answers, and goes on."""
    (root / "a.py").write_text('x = "' + "a" * 40 + '!"\n')
    (root / "b.py").write_text("ab\n")
    box = make_box("--default-timeout", "2")
    started = time.monotonic()
    reply = box.call("search_files", pattern="(?=a)(a|a)+b")
    took = time.monotonic() - started
    assert reply["ok"] and reply["meta"]["engine"] == "python", reply
    assert took < 6, took
    assert reply["meta"]["truncated"] is True
    assert reply["output"] == ("no matches for '(?=a)(a|a)+b' in ., but the search is "
                               "incomplete: the search hit its time limit")
    assert box.call("search_files", pattern="(?<=a)b", path="b.py")["output"] == "b.py:1:ab"
    box.alive()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == box.proc.pid]


def test_a_file_the_python_scan_cannot_hold_never_passes_for_searched(
        make_box: Callable[..., Box], root: Path):
    """Red-team round 9: a file of millions of matching lines made the scan's child run out of
    memory, and the toolbox, ignoring how the child ended, said "no matches" (truncated: false)
    although another file matched. Now a file gives at most limit + 1 hits, lines are taken one
    at a time, a file too big to hold is named as not searched, and a child that dies makes the
    result incomplete."""
    (root / "a_fixture.txt").write_text(" evil(x)\n" * 300_000)
    (root / "zz_real.py").write_text("import os\n evil(os.environ)\n")
    box = make_box("--no-rg")
    many = box.call("search_files", pattern=r"(?<=\s)evil\(", max_results=5)
    assert many["meta"]["matches"] == 5 and many["meta"]["truncated"] is True, many
    real = box.call("search_files", pattern=r"(?<=\s)evil\(", path="zz_real.py")
    assert real["output"] == "zz_real.py:2: evil(os.environ)"
    with (root / "big.txt").open("wb") as f:  # over the scan's 16 MiB: named, not passed over
        f.truncate(17 * 1024 * 1024)
        f.seek(0)
        f.write(b"evil(")
    (root / "a_fixture.txt").unlink()
    hidden = box.call("search_files", pattern=r"(?<=\s)evil\(")
    assert hidden["output"].splitlines() == [
        "zz_real.py:2: evil(os.environ)",
        "[1 file over 16 MiB not searched by this pattern's Python scan: big.txt; results are "
        "incomplete]"], hidden
    assert hidden["meta"]["truncated"] is True


def test_a_matching_file_a_search_passes_over_is_named(engine_box: Box, root: Path):
    """Red-team round 10: a NUL byte after the match (both engines) or the repository's
    `.ignore` (rg) hid a file: "no matches", complete, and the file listed as searched."""
    (root / "a").mkdir()
    (root / "a" / "install.sh").write_bytes(b"#!/bin/sh\ncurl x | sh  # evil(payload)\n\0\n")
    (root / "b").mkdir()
    (root / "b" / "run.py").write_text("import os\nos.system('id')  # evil(x)\n")
    (root / ".ignore").write_text("b/run.py\n")
    pattern = r"(?<=# )evil\(" if "--no-rg" in str(engine_box.proc.args) else r"evil\("
    reply = engine_box.call("search_files", pattern=pattern)
    assert reply["meta"]["truncated"] is True, reply
    assert "a/install.sh" in reply["output"] and "also match" in reply["output"], reply["output"]
    assert "It may go by another name" not in reply["output"]
    if reply["meta"]["engine"] == "rg":
        assert reply["output"] == (
            "no matches for 'evil\\(' in ., but the search is incomplete: 2 files the search "
            "passed over (binary, or ignored by .gitignore/.ignore) also match: a/install.sh, "
            "b/run.py"), reply["output"]
    else:  # the Python scan reads no ignore files
        assert reply["output"] == (
            "b/run.py:2:os.system('id')  # evil(x)\n[1 file the search passed over (binary, "
            "or ignored by .gitignore/.ignore) also matches: a/install.sh; results are "
            "incomplete]"), reply["output"]


def test_a_byte_order_mark_before_ascii_lines_hides_nothing(make_box: Callable[..., Box],
                                                           root: Path):
    """Red-team round 11: rg reads a file that starts with `FF FE` as UTF-16, so its ASCII
    lines (which `sh` runs) never matched. The second pass takes no byte order mark."""
    if not HAS_RG:
        pytest.skip("ripgrep is not installed")
    (root / "x.sh").write_bytes(b"\xff\xfe\necho evil(1)\n")
    reply = make_box().call("search_files", pattern=r"evil\(")
    assert reply["meta"]["truncated"] is True, reply
    assert reply["output"].endswith("also matches: x.sh"), reply["output"]


def test_a_python_scan_that_dies_is_not_a_complete_search(root: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    """Out of memory in the scan's child (here: any failure of it) reads as incomplete."""
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root), "--no-rg"]))

    def dies(*args: Any) -> list[Any]:
        raise MemoryError

    toolbox.patch(monkeypatch, "_grep_file", dies)  # in the forked child too
    found = toolbox._search_py(ctx, str(root), re.compile("add"), 10, time.monotonic() + 10)
    assert found == ["the Python scan ended early (out of memory?); narrow the path"]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_the_python_scan_keeps_its_hits_and_order_across_files(make_box: Callable[..., Box],
                                                                root: Path):
    for name in ("c.txt", "a.txt", "b.txt"):
        (root / name).write_text("".join(f"say {name} {i}\n" for i in range(3)))
    reply = make_box("--no-rg").call("search_files", pattern=r"(?<=say )[ab]\.txt [02]")
    assert reply["output"].splitlines() == ["a.txt:1:say a.txt 0", "a.txt:3:say a.txt 2",
                                            "b.txt:1:say b.txt 0", "b.txt:3:say b.txt 2"]
    limited = make_box("--no-rg").call("search_files", pattern="(?<=say )", max_results=4)
    assert limited["meta"]["matches"] == 4 and limited["meta"]["truncated"] is True


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


# -- change tracking around run_shell_command -------------------------------------------------


def shell(box: Box, command: str, **args: Any) -> dict[str, Any]:
    """One run_shell_command call."""
    return box.call("run_shell_command", command=command, **args)


def by_path(reply: dict[str, Any], key: str = "changes") -> dict[str, dict[str, Any]]:
    """A result's change records by path."""
    return {change["path"]: change for change in reply["meta"][key]}


def change(path: str, kind: str, what: str, **fields: Any) -> dict[str, Any]:
    """A full change record: every field None unless given."""
    record: dict[str, Any] = {"path": path, "change": what, "kind": kind, "target": None}
    for side in ("before", "after"):
        for name in ("sha256", "size", "mode"):
            record[f"{name}_{side}"] = None
    return {**record, **fields}


def test_shell_changes_are_reported_with_hashes(box: Box, root: Path):
    (root / "run.sh").write_text("echo hi\n")
    (root / "old.txt").write_text("old\n")
    reply = shell(box, "printf 'more\\n' >> README.md; echo new > new.txt; rm old.txt; "
                       "chmod 700 run.sh; ln -s README.md link; rm -r src && echo x > src")
    assert reply["ok"], reply
    assert by_path(reply) == {
        "README.md": change("README.md", "file", "modified", sha256_before=sha(b"# demo\n"),
                            sha256_after=sha(b"# demo\nmore\n"), size_before=7, size_after=12,
                            mode_before="0644", mode_after="0644"),
        "new.txt": change("new.txt", "file", "created", sha256_after=sha(b"new\n"),
                          size_after=4, mode_after="0644"),
        "old.txt": change("old.txt", "file", "deleted", sha256_before=sha(b"old\n"),
                          size_before=4, mode_before="0644"),
        "run.sh": change("run.sh", "file", "mode", sha256_before=sha(b"echo hi\n"),
                         sha256_after=sha(b"echo hi\n"), size_before=8, size_after=8,
                         mode_before="0644", mode_after="0700"),
        "link": change("link", "symlink", "created", mode_after="0777", target="README.md"),
        "src": change("src", "file", "type", sha256_after=sha(b"x\n"), size_after=2,
                      mode_before="0755", mode_after="0644"),
        "src/app.py": change("src/app.py", "file", "deleted", size_before=32,
                             sha256_before=sha(b"def add(a, b):\n    return a + b\n"),
                             mode_before="0644"),
    }
    assert [c["path"] for c in reply["meta"]["changes"]] == sorted(by_path(reply))
    assert reply["meta"]["changes_total"] == 7
    assert reply["meta"]["changes_truncated"] is reply["meta"]["changes_incomplete"] is False
    assert reply["output"] == ("exit_code: 0\nfiles changed: 2 created, 1 modified, 2 deleted, "
                               "1 mode changed, 1 type changed\n(no output)")
    assert "outside_changes" not in reply["meta"]


def test_a_command_changing_nothing_reports_no_changes(box: Box, root: Path):
    reply = shell(box, "cat README.md; touch README.md; echo y > .sandbox-agent/y")
    assert reply["meta"]["changes"] == [] and reply["meta"]["changes_total"] == 0
    assert reply["output"] == "exit_code: 0\nstdout:\n# demo"


def test_only_read_only_mounts_are_left_unwalked(box: Box, root: Path):
    """Here (no container) .git is not a read-only mount, so what a command writes in it counts;
    in the sandbox it is one, and nothing can be written there."""
    reply = shell(box, "echo x > .git/x; mkdir -p .git.quarantined-cache && echo y > "
                       ".git.quarantined-cache/big")
    assert {c["path"] for c in reply["meta"]["changes"]} == {
        ".git/x", ".git.quarantined-cache", ".git.quarantined-cache/big"}


def test_changes_between_calls_are_outside_changes(box: Box, root: Path):
    assert shell(box, "true")["meta"]["changes"] == []
    (root / "README.md").write_text("# edited on the host\n")
    (root / "host.txt").write_text("h")
    assert box.call("write_file", path="notes/todo.txt", content="mine")["ok"]
    assert box.call("edit_file", path="src/app.py", old_text="a + b", new_text="b + a")["ok"]

    reply = shell(box, "echo c > cmd.txt")
    assert set(by_path(reply)) == {"cmd.txt"}
    outside = by_path(reply, "outside_changes")
    assert set(outside) == {"README.md", "host.txt"}
    assert outside["README.md"]["sha256_after"] == sha(b"# edited on the host\n")
    assert reply["meta"]["outside_changes_total"] == 2
    assert "files changed outside the sandbox since the last call (not by you): 1 created, " \
           "1 modified" in reply["output"]
    assert "outside_changes" not in shell(box, "true")["meta"]


def test_the_change_lists_are_capped(box: Box, root: Path):
    reply = shell(box, "mkdir many && cd many && for i in $(seq 1 600); do : > f$i; done")
    meta = reply["meta"]
    assert len(meta["changes"]) == 500 and meta["changes_total"] == 601
    assert meta["changes_truncated"] is True
    assert meta["changes"][0]["path"] == "many"
    assert "files changed: 601 created" in reply["output"]


def in_process(root: Path, *argv: str) -> Callable[[str], dict[str, Any]]:
    """run_shell_command in this process (so a test can shrink the toolbox's caps)."""
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root), *argv]))
    return lambda command: toolbox.call_tool(ctx, "run_shell_command", {"command": command})


def test_big_files_are_not_hashed_but_still_compared(root: Path, monkeypatch):
    toolbox.patch(monkeypatch, "HASH_FILE_MAX", 100)
    toolbox.patch(monkeypatch, "HASH_WALK_MAX", 150)
    (root / "big.bin").write_bytes(b"x" * 200)
    run = in_process(root)
    reply = run("head -c 300 /dev/zero >> big.bin; head -c 90 /dev/zero > a.bin; "
                "head -c 90 /dev/zero > b.bin")
    found = by_path(reply)
    assert found["big.bin"]["change"] == "modified"
    assert found["big.bin"]["sha256_before"] is found["big.bin"]["sha256_after"] is None
    assert found["big.bin"]["size_before"] == 200 and found["big.bin"]["size_after"] == 500
    assert found["big.bin"]["unhashed"] == "not hashed: larger than 0 MiB"
    assert found["a.bin"]["sha256_after"] == sha(b"\0" * 90)  # 90 of the 150 bytes a walk
    assert found["b.bin"]["sha256_after"] is None
    assert found["b.bin"]["unhashed"] == "not hashed: over the 0 MiB hashed per walk"
    assert "unhashed" not in found["a.bin"]
    again = by_path(run("rm b.bin; head -c 90 /dev/zero > c.bin"))  # a.bin is not read again
    assert again["c.bin"]["sha256_after"] == sha(b"\0" * 90)


def test_a_capped_walk_says_so_and_reports_no_false_deletions(root: Path, monkeypatch):
    toolbox.patch(monkeypatch, "TRACK_MAX_ENTRIES", 4)
    run = in_process(root)
    reply = run("true")
    assert reply["meta"]["changes_incomplete"] is True
    assert "only part of it was checked for changes" in reply["output"]
    assert not [c for c in reply["meta"]["changes"] if c["change"] == "deleted"]


# -- set-id bits ------------------------------------------------------------------------------


def test_setid_bits_a_command_adds_are_removed(box: Box, root: Path):
    (root / "old-suid").write_text("x")
    (root / "old-suid").chmod(0o4755)  # in the tree before the session: left alone
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)  # set-gid directories only pass on their group
    reply = shell(box, "printf '#!/bin/sh\\n' > tool && chmod 4755 tool && : > g && "
                       "chmod 2711 g && chmod g+s old-suid && mkdir shared/sub")
    assert stat_mode(root / "tool") == 0o755 and stat_mode(root / "g") == 0o711
    assert stat_mode(root / "old-suid") == 0o4755
    assert stat_mode(root / "shared" / "sub") & 0o2000
    assert reply["meta"]["setid_cleared"] == [
        {"path": "g", "removed": ["set-gid"], "mode_before": "2711", "mode_after": "0711"},
        {"path": "old-suid", "removed": ["set-gid"], "mode_before": "6755",
         "mode_after": "4755"},
        {"path": "tool", "removed": ["set-uid"], "mode_before": "4755", "mode_after": "0755"},
    ]
    assert "removed set-uid bit from ./tool: set-id files are not allowed in the project" \
        in reply["output"]
    assert "removed set-gid bit from ./g: set-id files" in reply["output"]
    assert by_path(reply)["tool"]["mode_after"] == "4755"  # what the command did
    assert "outside_changes" not in shell(box, "true")["meta"]  # our chmod is in the index


def stat_mode(path: Path) -> int:
    return path.lstat().st_mode & 0o7777


def test_setid_chmod_never_follows_a_swapped_in_link(root: Path, tmp_path: Path):
    outside = tmp_path / "outside-suid"
    outside.write_text("x")
    outside.chmod(0o4755)
    (root / "d").mkdir()
    (root / "d" / "tool").write_text("x")
    ino = (root / "d" / "tool").stat().st_ino
    shutil.rmtree(root / "d")
    (root / "d").symlink_to(tmp_path)
    (tmp_path / "tool").symlink_to(outside)
    with pytest.raises(OSError):
        toolbox._chmod_nofollow(str(root), "d/tool", ino, 0o755)
    assert stat_mode(outside) == 0o4755


# -- new .git entries -------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "kind"), [
    ("git init -q sub 2>/dev/null || mkdir -p sub/.git/hooks; echo '#!/bin/sh' > sub/.git/hooks/pre-commit", "dir"),
    ("mkdir sub && echo 'gitdir: ../evil' > sub/.git", "file"),
    ("mkdir sub evil && ln -s ../evil sub/.git", "symlink"),
    ("mkdir -p sub/.GIT/hooks", "dir"),
])
def test_a_git_entry_made_by_a_command_is_quarantined(box: Box, root: Path, make: str, kind: str):
    reply = shell(box, make)
    names = os.listdir(root / "sub")
    assert not [n for n in names if n.lower() == ".git"], names
    [moved] = [n for n in names if n.startswith(".git.quarantined-")]
    assert len(moved) == len(".git.quarantined-") + 8
    name = ".GIT" if ".GIT" in make else ".git"
    assert reply["meta"]["git_quarantined"] == [
        {"path": f"sub/{name}", "kind": kind, "renamed_to": f"sub/{moved}"}]
    assert (f"new git repositories inside the project are not allowed in the sandbox; "
            f"sub/{name} was disabled (renamed to sub/{moved})") in reply["output"]
    after = shell(box, "ls -a sub")
    assert "outside_changes" not in after["meta"] and after["meta"]["changes"] == []


def test_a_replaced_git_dir_is_quarantined_and_an_edited_one_is_not(box: Box, root: Path):
    edited = shell(box, "echo x > .git/description")
    assert "git_quarantined" not in edited["meta"]
    replaced = shell(box, "mv .git old-git && mkdir .git")
    assert [q["path"] for q in replaced["meta"]["git_quarantined"]] == [".git"]
    assert not (root / ".git").exists() and (root / "old-git" / "config").is_file()


def test_git_entries_are_left_alone_when_git_writes_are_allowed(make_box: Callable[..., Box],
                                                                  root: Path):
    reply = shell(make_box(), "mkdir -p sub/.git")
    assert (root / "sub" / ".git").is_dir() and "git_quarantined" not in reply["meta"]


def test_the_git_guard_refuses_commands_after_a_repo_appears_outside(
        make_box: Callable[..., Box], root: Path):
    box = make_box("--readonly-dir", ".git", "--git-guard")
    assert shell(box, "true")["ok"]  # the project's own .git predates the session
    (root / "vendor" / ".git").mkdir(parents=True)
    for _ in range(2):  # until the host restarts the sandbox
        reply = shell(box, "touch ran")
        failed(reply, "a git repository appeared in the project from outside the sandbox "
                      "during this session (vendor/.git); the command was not run")
        assert reply["meta"]["remount_needed"] == ["vendor/.git"]
        assert not (root / "ran").exists()
    assert box.call("write_file", path="vendor/x.txt", content="x")["ok"]


def test_the_git_guard_counts_repos_made_before_the_first_command(
        make_box: Callable[..., Box], root: Path):
    box = make_box("--readonly-dir", ".git", "--git-guard")
    (root / "late").mkdir()
    (root / "late" / ".git").write_text("gitdir: /elsewhere\n")
    assert shell(box, "true")["meta"]["remount_needed"] == ["late/.git"]


def test_read_only_mount_points_come_from_mountinfo(tmp_path: Path):
    info = tmp_path / "mountinfo"
    info.write_bytes(
        b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"30 22 8:1 /p/.git /workspace/.git ro,relatime - ext4 /dev/sda1 rw\n"
        b"31 22 8:1 /p/a\\040b/.git /workspace/a\\040b/.git ro,nosuid - ext4 /dev/sda1 rw\n"
        b"32 22 8:1 /p/c/.git /workspace/c/.git rw,relatime - ext4 /dev/sda1 rw\n"
        b"33 22 0:5 / /workspace2/.git ro - tmpfs tmpfs ro\n")
    found = toolbox._readonly_mounts("/workspace", str(info))
    assert found == {"/workspace/.git", "/workspace/a b/.git"}


# -- disk budget ------------------------------------------------------------------------------

SLOW_FILL = "for i in $(seq 1 60); do head -c 1000000 /dev/zero > fill$i; sleep 0.1; done"


def test_a_command_growing_the_project_past_the_budget_is_killed(make_box: Callable[..., Box],
                                                                  root: Path):
    box = make_box("--disk-budget", str(3 * 1024 * 1024))
    started = time.monotonic()
    reply = shell(box, SLOW_FILL)
    output = failed(reply, "the command was killed. Delete files you do not need to go on.")
    assert time.monotonic() - started < 5  # the whole loop takes more than 6 s
    assert output.startswith("disk budget exceeded: the project grew by ")
    assert "(budget 3.0 MB)" in output.splitlines()[0]
    assert reply["meta"]["disk_budget_exceeded"] is True and reply["meta"]["exit_code"] is None
    filled = sorted(root.glob("fill*"))
    assert 4 <= len(filled) < 40  # 4 files of 0.95 MB are over the budget; polled every 0.1s
    assert reply["meta"]["disk_growth"] > 3 * 1024 * 1024
    assert {c["path"] for c in reply["meta"]["changes"]} == {p.name for p in filled}

    still_over = shell(box, "echo alive")  # a command that adds nothing runs on
    assert still_over["ok"] and "note: disk budget exceeded" in still_over["output"]
    freed = shell(box, "rm fill*; head -c 1000000 /dev/zero > small")
    assert freed["ok"] and "disk budget" not in freed["output"]
    assert 0 < freed["meta"]["disk_growth"] < 2 * 1024 * 1024


def test_a_command_that_closed_its_output_is_watched_too(make_box: Callable[..., Box]):
    box = make_box("--disk-budget", str(2 * 1024 * 1024))
    reply = shell(box, "exec >/dev/null 2>&1; " + SLOW_FILL)
    failed(reply, "disk budget exceeded", "the command was killed")


def test_growth_made_outside_the_sandbox_does_not_count(make_box: Callable[..., Box],
                                                        root: Path):
    box = make_box("--disk-budget", str(1024 * 1024))
    assert shell(box, "true")["ok"]
    (root / "dataset.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    reply = shell(box, "echo small > s.txt")
    assert reply["ok"] and reply["meta"]["disk_growth"] < 64 * 1024, reply
    assert "dataset.bin" in by_path(reply, "outside_changes")


def test_writes_past_the_budget_are_refused(make_box: Callable[..., Box], root: Path):
    box = make_box("--disk-budget", "100000")
    reply = box.call("write_file", path="big.txt", content="x" * 200_000)
    failed(reply, "disk budget exceeded: writing 195.3 KB would make the project",
           "(budget 97.7 KB), so it was refused. Delete files you do not need to go on.")
    assert reply["meta"]["disk_budget_exceeded"] is True and not (root / "big.txt").exists()
    assert box.call("write_file", path="small.txt", content="a" + "x" * 50_000)["ok"]
    failed(box.call("edit_file", path="small.txt", old_text="a", new_text="y" * 60_000),
           "disk budget exceeded")
    assert box.call("write_file", path="small.txt", content="y" * 90_000)["ok"]  # it replaces


def test_low_free_space_kills_growing_commands_only(make_box: Callable[..., Box], root: Path):
    box = make_box("--min-free", str(1 << 60))
    reply = shell(box, SLOW_FILL)
    failed(reply, "disk nearly full: ", "free, less than the 1048576.0 TB the sandbox keeps "
                  "free; the command was killed.")
    assert reply["meta"]["disk_budget_exceeded"] is True
    assert shell(box, "rm fill*; echo fine")["ok"]
    failed(box.call("write_file", path="x.txt", content="x"), "disk nearly full")


def test_a_file_over_the_size_limit_says_it_is_the_disk_budget(make_box: Callable[..., Box],
                                                                root: Path):
    box = make_box("--disk-budget", "10000000", fsize=1_000_000)
    reply = shell(box, "head -c 5000000 /dev/zero > big.bin")
    output = failed(reply, "exit_code: 153 (file size limit exceeded (the disk budget))")
    assert output.startswith("exit_code: 153")
    assert (root / "big.bin").stat().st_size == 1_000_000
    assert shell(box, "rm big.bin")["ok"]


def test_no_track_switches_tracking_off(make_box: Callable[..., Box], root: Path):
    box = make_box("--no-track", "--readonly-dir", ".git", "--disk-budget", "1000")
    reply = shell(box, "mkdir -p sub/.git && : > t && chmod u+s t && head -c 100000 /dev/zero > z")
    assert reply["ok"] and reply["output"] == "exit_code: 0\n(no output)"
    assert not {"changes", "setid_cleared", "git_quarantined", "disk_growth"} & set(reply["meta"])
    assert (root / "sub" / ".git").is_dir() and stat_mode(root / "t") & 0o4000


def test_bad_disk_arguments_are_refused(root: Path):
    for argv in (["--disk-budget", "-1"], ["--min-free", "-5"]):
        with pytest.raises(SystemExit):
            toolbox.parse_args(["--root", str(root), *argv])


# -- what an outside review found --------------------------------------------------------------


def test_a_hard_linked_file_is_never_written_through(box: Box, root: Path):
    (root / "Makefile").write_text("all:\n\ttrue\n")
    os.link(root / "Makefile", root / "notes.txt")
    for tool, args in [("write_file", {"path": "notes.txt", "content": "x"}),
                       ("edit_file", {"path": "notes.txt", "old_text": "true", "new_text": "x"})]:
        failed(box.call(tool, **args), "has 2 hard links", "nothing was written")
    preview = box.request({"id": 9, "tool": "preview", "args": {
        "tool": "write_file", "args": {"path": "notes.txt", "content": "x"}}})
    assert "has 2 hard links" in preview["meta"]["error"]
    assert (root / "Makefile").read_text() == "all:\n\ttrue\n"


def test_an_unreadable_directory_is_still_walked_and_its_mode_kept(box: Box, root: Path):
    reply = shell(box, "mkdir hide && echo secret-work > hide/f && chmod 000 hide")
    assert {c["path"] for c in reply["meta"]["changes"]} == {"hide", "hide/f"}
    assert reply["meta"]["changes_incomplete"] is False
    assert stat.S_IMODE((root / "hide").stat().st_mode) == 0
    more = shell(box, "chmod 700 hide && echo more > hide/g && chmod 000 hide")
    assert {c["path"] for c in more["meta"]["changes"]} == {"hide/g"}


def test_a_new_repository_is_disabled_even_in_a_read_only_directory(box: Box, root: Path):
    reply = shell(box, "mkdir -p sub && git init -q sub && chmod 555 sub")
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "sub/.git" and record["renamed_to"].startswith("sub/.git.quarantined-")
    assert not (root / "sub" / ".git").exists()
    moved = root / record["renamed_to"]
    assert moved.is_dir() and not (moved / "HEAD").exists()  # not a repository under any name
    assert stat.S_IMODE((root / "sub").stat().st_mode) == 0o555


def test_a_directory_made_to_look_like_a_repository_loses_its_head(box: Box, root: Path):
    reply = shell(box, "mkdir -p fake/objects fake/refs && echo 'ref: refs/heads/main' > "
                       "fake/HEAD && printf '[core]\\n\\tfsmonitor = id\\n' > fake/config")
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "fake" and record["kind"] == "gitdir"
    assert not (root / "fake" / "HEAD").exists() and "looks like" not in reply["output"]
    assert "made to look like a git repository" in reply["output"]
    done = subprocess.run(["git", "-C", str(root / "fake"), "rev-parse", "--git-dir"],
                          capture_output=True, text=True, env={**os.environ,
                          "GIT_CEILING_DIRECTORIES": str(root)}, check=False)
    assert done.returncode != 0  # git does not take it for a repository any more


# The shapes git itself takes for a repository (setup.c, is_git_directory): a HEAD symlink
# into refs/, objects/ and refs/ as links (access() follows them), a commondir pointing both
# elsewhere. The outside review's variants A and B, and the commondir one.
LOOK_ALIKES = {
    "head-symlink": "mkdir -p fake/objects fake/refs/heads && ln -s refs/heads/main fake/HEAD",
    "linked-parts": "mkdir -p fake/.o fake/.r/heads && ln -s .o fake/objects && "
                    "ln -s .r fake/refs && echo 'ref: refs/heads/main' > fake/HEAD",
    "commondir": "mkdir -p fake/common/objects fake/common/refs/heads && echo common > "
                 "fake/commondir && echo 'ref: refs/heads/main' > fake/HEAD",
}


def _git_takes_it(root: Path, folder: str) -> bool:
    done = subprocess.run(["git", "-C", str(root / folder), "rev-parse", "--git-dir"],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(root)})
    return done.returncode == 0 and done.stdout.strip() in (".", str(root / folder))


@pytest.mark.parametrize("shape", sorted(LOOK_ALIKES))
def test_every_shape_git_takes_for_a_repository_loses_its_head(box: Box, root: Path,
                                                               shape: str):
    script = LOOK_ALIKES[shape] + " && printf '[core]\\n\\tfsmonitor = id\\n' > fake/config"
    reply = shell(box, script)
    [record] = reply["meta"]["git_quarantined"]
    assert record["path"] == "fake"
    assert not os.path.lexists(root / "fake" / "HEAD")
    assert not _git_takes_it(root, "fake")
    os.rename(root / record["renamed_to"], root / "fake" / "HEAD")  # the oracle: put it back
    assert _git_takes_it(root, "fake"), f"git does not take the {shape} shape: a weak test"


def test_a_look_alike_completed_by_a_later_command_loses_its_head(box: Box, root: Path):
    shell(box, "mkdir fake && echo 'ref: refs/heads/main' > fake/HEAD && "
               "printf '[core]\\n\\tfsmonitor = id\\n' > fake/config")
    reply = shell(box, "mkdir -p fake/.o fake/.r && ln -s .o fake/objects && ln -s .r fake/refs")
    assert reply["meta"]["git_quarantined"][0]["path"] == "fake"
    assert not _git_takes_it(root, "fake")


def test_write_tools_cannot_link_a_look_alike_together(box: Box, root: Path):
    shell(box, "mkdir -p docs/.o docs/.r && ln -s .o docs/objects && ln -s .r docs/refs")
    last = box.call("write_file", path="docs/HEAD", content="ref: refs/heads/main\n")
    assert last["ok"] and last["meta"]["git_quarantined"][0]["path"] == "docs"
    assert not _git_takes_it(root, "docs")


def test_a_differently_cased_git_is_read_only_for_the_write_tools(box: Box, root: Path):
    failed(box.call("write_file", path="sub/.GIT/config", content="x"), "read-only")
    failed(box.call("write_file", path=".Git/hooks/pre-commit", content="x"), "read-only")


def test_write_tools_cannot_assemble_a_repository_look_alike(box: Box, root: Path):
    for path, content in [("docs/HEAD", "ref: refs/heads/main\n"),
                          ("docs/config", "[core]\n\tworktree = .\n\tfsmonitor = id\n"),
                          ("docs/objects/info/.keep", "")]:
        assert box.call("write_file", path=path, content=content)["ok"]
    last = box.call("write_file", path="docs/refs/heads/.keep", content="")
    assert last["ok"] and last["meta"]["git_quarantined"][0]["path"] == "docs"
    assert "made to look like a git repository" in last["output"]
    assert not (root / "docs" / "HEAD").exists()


def test_a_call_its_preview_said_would_fail_writes_nothing(box: Box, root: Path):
    """Red-team round 7: shown "this call would fail", approved, then written (moved)."""
    (root / "a.py").write_text("def f():\n    return 1\n")
    args = {"path": "a.py", "old_text": "def f():", "new_text": "def f():\n\ndef g():\n    pass"}
    fails = box.call("edit_file", **args, expect_sha256_after="fails")
    failed(fails, "would not be written as it was shown for approval")
    assert (root / "a.py").read_text() == "def f():\n    return 1\n"
    assert box.call("edit_file", **args)["ok"]
