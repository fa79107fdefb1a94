"""The progress view renders events as a person should see them on stderr."""

from __future__ import annotations

import io

from rich.console import Console

from executor.hooks import (
    HookBus,
    ModelRequestEvent,
    ProgressEvent,
    RetryEvent,
    TokenEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from executor.ui import ProgressView


def view_on_bus(**options: bool) -> tuple[ProgressView, HookBus, io.StringIO]:
    """A view writing to a buffer (not a terminal), attached to a fresh bus."""
    buffer = io.StringIO()
    view = ProgressView(Console(file=buffer, force_terminal=False, width=200), **options)
    bus = HookBus()
    view.attach(bus)
    return view, bus, buffer


def test_one_line_per_tool_call_with_its_subject_and_outcome():
    _, bus, out = view_on_bus()
    bus.emit(ToolCallEvent(call_id="1", tool="run_shell_command", arguments={"command": "make [x]"},
             decision="allow", rule="default:high", approved_by="--yes", reason=""))
    bus.emit(ToolResultEvent(call_id="1", tool="run_shell_command", ok=False, output="",
             meta={"exit_code": 2, "duration_ms": 12}))
    bus.emit(ToolCallEvent(call_id="2", tool="write_file", arguments={"path": "a.py"},
             decision="deny", rule="policy.toml:3 [[rules]] #1", approved_by=None,
             reason="no writes here"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "! run_shell_command make [x] (exit 2) 12 ms"
    assert lines[1] == "✗ write_file refused: no writes here (policy.toml:3 [[rules]] #1)"


def test_streamed_tokens_are_shown_and_remembered():
    view, bus, out = view_on_bus(stream=True)
    bus.emit(TokenEvent(text="Hel"))
    bus.emit(TokenEvent(text="lo"))
    bus.emit(ModelRequestEvent(model="m", duration_ms=5.0, reply="Hello"))
    assert out.getvalue() == "Hello\n"
    assert view.last_reply_streamed
    bus.emit(ModelRequestEvent(model="m", duration_ms=5.0, reply="again"))
    assert not view.last_reply_streamed


def test_embedded_model_progress_prints_each_phase_once():
    _, bus, out = view_on_bus()
    for done in (0, 512, 1065):
        bus.emit(ProgressEvent(message=f"assembling model: {done}/1065 MiB",
                 fraction=done / 1065, phase="assemble"))
    bus.emit(ProgressEvent(message="loading model (0 s)", fraction=None, phase="load"))
    bus.emit(ProgressEvent(message="model ready (3 s)", fraction=None, phase="ready"))
    assert out.getvalue().splitlines() == [
        "assembling model: 0/1065 MiB", "loading model (0 s)", "model ready (3 s)",
    ]


def test_trace_shows_model_replies_and_full_tool_output():
    _, bus, out = view_on_bus(trace=True)
    bus.emit(ModelRequestEvent(model="m", duration_ms=7.0, prompt_tokens=10,
             completion_tokens=2, reply='{"answer": "hi"}'))
    bus.emit(ToolCallEvent(call_id="1", tool="read_file", arguments={"path": "a.py"},
             decision="allow", rule="default:low", approved_by="default:low", reason=""))
    bus.emit(ToolResultEvent(call_id="1", tool="read_file", ok=True, output="     1\tx = 1",
             meta={"duration_ms": 1}))
    text = out.getvalue()
    assert '{"answer": "hi"}' in text and "10→2 tokens" in text
    assert '→ read_file {"path": "a.py"}' in text and "     1  x = 1" in text  # tabs expanded


def test_escapes_in_every_event_are_shown_not_obeyed():
    _, bus, out = view_on_bus(stream=True, trace=True)
    bus.emit(TokenEvent(text="hi\x1b[2K"))
    bus.emit(ModelRequestEvent(model="m\x1b[31m", duration_ms=1.0, reply="r\x1b[1A"))
    bus.emit(ToolCallEvent(call_id="1", tool="run_shell_command",
             arguments={"command": "rm -rf src #\x1b[2K\x1b[1G$ ls"}, decision="allow",
             rule="r", approved_by="--yes", reason=""))
    bus.emit(ToolResultEvent(call_id="1", tool="run_shell_command", ok=True,
             output="out\x1b]0;title\x07\r\nnext\u202e", meta={"exit_code": 0, "duration_ms": 1}))
    bus.emit(ToolCallEvent(call_id="2", tool="write_file\x1b[2K", arguments={}, decision="deny",
             rule="[red]rule[/]", approved_by=None, reason="no\x9b"))
    bus.emit(WarningEvent(message="warn\x1b[2J"))
    bus.emit(RetryEvent(attempt=2, reason="server said \x1b[2K\u2066ok"))
    text = out.getvalue()
    assert not any(ch in text for ch in "\x1b\x07\x9b\r\u202e\u2066"), repr(text)
    for shown in (r"hi\x1b[2K", r"m\x1b[31m", r"r\x1b[1A",
                  r"✓ run_shell_command rm -rf src #\x1b[2K\x1b[1G$ ls (exit 0)",
                  r"out\x1b]0;title\x07\r", r"next\u202e",
                  r"✗ write_file\x1b[2K refused: no\x9b ([red]rule[/])",
                  r"warning: warn\x1b[2J", r"server said \x1b[2K\u2066ok"):
        assert shown in text, shown
