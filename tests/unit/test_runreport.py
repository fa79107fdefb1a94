"""The run report: net changes, a delegated child's calls, the --fail-on-denied line."""

from __future__ import annotations

from executor.cli.machine import denied_error
from executor.hooks import ChildEvent, HookBus, ToolCallEvent, ToolResultEvent
from executor.runreport import RunRecorder, stream_event


def _write(bus: HookBus, call_id: str, path: str, change: str, *, child: str | None = None
           ) -> None:
    call = ToolCallEvent(call_id=call_id, tool="run_shell_command", decision="allow", rule="r")
    result = ToolResultEvent(call_id=call_id, tool="run_shell_command", ok=True,
                             meta={"changes": [{"path": path, "change": change}]})
    for event in (call, result):
        bus.emit(event if child is None else ChildEvent(session=child, event=event.kind,
                                                        payload=event.data))


def test_changes_are_the_net_change_of_the_run() -> None:
    bus = HookBus()
    recorder = RunRecorder().attach(bus)
    _write(bus, "1", "tmp.txt", "created")
    _write(bus, "2", "tmp.txt", "deleted")
    _write(bus, "3", "a.py", "deleted")
    _write(bus, "4", "a.py", "created")
    assert [(c.path, c.change) for c in recorder.report().changes] == [("a.py", "modified")]


def test_a_childs_calls_and_changes_are_the_runs_naming_the_child() -> None:
    bus = HookBus()
    recorder = RunRecorder().attach(bus)
    _write(bus, "1", "x.py", "modified")
    _write(bus, "1", "y.py", "created", child="kid")  # the same call id, in the child
    report = recorder.report()
    assert [(c.id, c.child_session, c.ok) for c in report.tool_calls] == [
        ("1", None, True), ("1", "kid", True)]
    assert [(c.path, c.child_session) for c in report.changes] == [("x.py", None),
                                                                    ("y.py", "kid")]
    relayed = ChildEvent(session="kid", event="tool_call", payload=ToolCallEvent(
        call_id="1", tool="read_file", decision="deny", rule="r", reason="no").data)
    assert stream_event(relayed) == {"type": "tool_call", "child_session": "kid",
                                     "call_id": "1", "tool": "read_file", "arguments": {},
                                     "decision": "deny", "rule": "r", "reason": "no",
                                     "approved_by": None}


def test_the_denied_line_cuts_a_long_reason_at_a_word() -> None:
    bus = HookBus()
    recorder = RunRecorder().attach(bus)
    reason = "no terminal to ask at, so this write is denied " * 3
    bus.emit(ToolCallEvent(call_id="1", tool="write_file", decision="deny", rule="r",
                           reason=reason))
    error = denied_error(recorder.report())
    assert error is not None and error.exit_code == 32
    shown = error.message.split("write_file (", 1)[1]
    assert shown.endswith(" …)") and reason.startswith(shown.removesuffix(" …)"))
    assert len(shown) <= 83
