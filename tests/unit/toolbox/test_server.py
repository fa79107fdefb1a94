"""The toolbox: The protocol: the ready line, requests, replies, and what no request can do."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import HAS_RG, SECRET, Box, failed


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


def test_unexpected_exceptions_become_internal_errors(root: Path, monkeypatch):
    def broken(ctx: Any, path: str) -> Any:
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(toolbox.TOOLS, "read_file", (broken, {"path": (toolbox.STR, True)}))
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root)]))
    reply, stop = toolbox.respond(ctx, b'{"id": 1, "tool": "read_file", "args": {"path": "x"}}')
    assert reply["id"] == 1 and not stop
    failed(reply, "internal error in read_file: ZeroDivisionError: boom")


TOOL_NAMES = ["read_file", "write_file", "edit_file", "search_files", "list_files"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(tool=st.sampled_from(TOOL_NAMES), args=st.dictionaries(
    st.sampled_from(["path", "content", "old_text", "new_text", "pattern", "start_line",
                     "glob", "depth", "max_results", "replace_all", "extra"]),
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=12)
    | st.lists(st.integers(), max_size=2), max_size=4))
def test_no_request_crashes_the_process(shared_box: Box, tool: str, args: dict[str, Any]):
    reply = shared_box.call(tool, **args)
    assert set(reply) == {"id", "ok", "output", "meta", "signals"}
    assert "internal error" not in reply["output"], reply
    assert SECRET not in reply["output"]

