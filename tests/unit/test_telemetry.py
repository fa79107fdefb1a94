"""OpenTelemetry traces, sent by the real SDK to a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor import telemetry
from executor.config import load_settings
from executor.delegation import DELEGATE_TOOL
from executor.hooks import ChildEvent, CompleteEvent, HookBus, ToolCallEvent, ToolResultEvent
from executor.redact import Redactor
from tests.fakes.audit_log import EVIL_NAME, SECRET, hook_events
from tests.fakes.otlp_receiver import OtlpReceiver

ERROR = 2  # Status.STATUS_CODE_ERROR in the protocol


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as server:
        yield server


def redactor() -> Redactor:
    return Redactor({"DEPLOY_TOKEN": SECRET})


def run_events(tracing: telemetry.Tracing) -> None:
    """The events of one real-shaped run (tests/fakes/audit_log.py) through a bus."""
    bus = HookBus()
    tracing.attach(bus)
    for event in hook_events():
        bus.emit(event)
    bus.emit(CompleteEvent(status="ok", answer="Fixed add().", turns=3, duration_ms=4200))


def traced(endpoint: str, warnings: list[str] | None = None) -> telemetry.Tracing:
    return telemetry.Tracing.create(endpoint + "/v1/traces", redactor(), environ={},
                                    on_warning=(warnings if warnings is not None else []).append)


def test_off_unless_configured() -> None:
    assert telemetry.endpoint_from({}, None) is None
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}
    assert telemetry.endpoint_from(base, None) == "http://c:4318/v1/traces"
    assert telemetry.endpoint_from({}, "http://cfg:4318") == "http://cfg:4318/v1/traces"
    assert telemetry.endpoint_from(
        {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}, "http://cfg") == "http://t/x"
    assert telemetry.endpoint_from({**base, "OTEL_SDK_DISABLED": "true"}, None) is None
    assert telemetry.endpoint_from({**base, "OTEL_TRACES_EXPORTER": "none"}, "http://cfg") is None


def test_a_trace_per_run_with_a_span_per_request_and_call(receiver: OtlpReceiver) -> None:
    tracing = traced(receiver.endpoint)
    run_events(tracing)
    tracing.close()
    spans = receiver.wait_for(8)
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert {s.trace_id for s in spans} == {spans[0].trace_id}  # one trace
    (root,) = receiver.named("invoke_agent")
    assert root.parent_span_id == "" and root.resource["service.name"] == "sandbox-agent"
    assert root.attributes["gen_ai.provider.name"] == "ollama"
    assert root.attributes["sandbox_agent.status"] == "ok"
    assert root.attributes["sandbox_agent.turns"] == 3
    assert root.status_code == ERROR  # the run emitted an error event
    assert [name for name, _ in root.events] == ["sandbox_start", "retry", "warning", "error"]
    (chat,) = receiver.named("chat ")
    assert chat.parent_span_id == root.span_id and chat.kind == 3  # CLIENT
    assert {k: chat.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens")} == {"gen_ai.operation.name": "chat",
                                           "gen_ai.request.model": "qwen2.5-coder",
                                           "gen_ai.usage.input_tokens": 310,
                                           "gen_ai.usage.output_tokens": 42}
    assert chat.end_ns - chat.start_ns == 1_500_000_000  # the request's own duration
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in receiver.named("execute_tool ")}
    assert sorted(tools) == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert all(s.parent_span_id == root.span_id for s in tools.values())


def test_tool_spans_carry_decision_rule_exit_code_and_files(receiver: OtlpReceiver) -> None:
    tracing = traced(receiver.endpoint)
    run_events(tracing)
    tracing.close()
    receiver.wait_for(8)
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in receiver.named("execute_tool ")}
    edit = tools["c2"].attributes
    assert (edit["gen_ai.tool.name"], edit["sandbox_agent.decision"],
            edit["sandbox_agent.approved_by"]) == ("edit_file", "allow", "user")
    assert edit["sandbox_agent.policy.rule"] == "policy.toml:3 [[rules]] #1 (edit)"
    assert edit["sandbox_agent.files_changed.paths"] == ["calc.py"]
    shell = tools["c3"].attributes
    assert shell["process.exit.code"] == 0 and shell["sandbox_agent.files_changed"] == 1
    assert shell["sandbox_agent.files_changed.paths"] == [EVIL_NAME]
    denied = tools["c4"]
    assert denied.status_code == ERROR and denied.attributes["error.type"] == "tool_deny"
    assert denied.attributes["sandbox_agent.reason"] == "network tools are denied"
    assert tools["c1"].attributes["sandbox_agent.files_changed"] == 0


def test_secrets_are_redacted_as_in_the_audit(receiver: OtlpReceiver) -> None:
    tracing = traced(receiver.endpoint)
    run_events(tracing)
    tracing.close()
    spans = receiver.wait_for(8)
    dumped = json.dumps([s.__dict__ for s in spans], default=str)
    assert SECRET not in dumped
    shell = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "c3")
    assert "[REDACTED:env:DEPLOY_TOKEN]" in shell.attributes["gen_ai.tool.call.arguments"]


def test_each_answer_of_a_repl_session_is_its_own_trace(receiver: OtlpReceiver) -> None:
    tracing = traced(receiver.endpoint)
    run_events(tracing)  # run_start ... complete
    bus = HookBus()
    tracing.attach(bus)
    (model,) = [e for e in hook_events() if e.kind == "model_request"]
    bus.emit(model)  # the second question of the session: no new run_start
    bus.emit(CompleteEvent(status="ok", turns=1))
    tracing.close()
    spans = receiver.wait_for(10)
    roots = list(receiver.named("invoke_agent"))
    assert len(roots) == 2 and len({s.trace_id for s in spans}) == 2
    assert roots[1].attributes["gen_ai.provider.name"] == "ollama"  # the session's facts
    assert roots[1].attributes["sandbox_agent.turns"] == 1


def test_a_delegated_child_s_calls_nest_under_the_delegate_call(receiver: OtlpReceiver) -> None:
    tracing = traced(receiver.endpoint)
    bus = HookBus()
    tracing.attach(bus)
    start, *_ = hook_events()
    bus.emit(start)
    bus.emit(ToolCallEvent(call_id="c1", tool=DELEGATE_TOOL, arguments={"task": "survey"},
                           decision="allow", rule="default:medium", approved_by="user"))
    child_call = ToolCallEvent(call_id="c1", tool="run_shell_command",
                               arguments={"command": f"echo {SECRET}"}, decision="allow",
                               rule="default:high", approved_by="--yes")
    child_result = ToolResultEvent(call_id="c1", tool="run_shell_command", ok=False,
                                   meta={"exit_code": 2})
    for inner in (child_call, child_result):  # as Runner.delegate relays them
        bus.emit(ChildEvent(session="fix-tests.1", event=inner.kind, payload=inner.data))
    bus.emit(ToolResultEvent(call_id="c1", tool=DELEGATE_TOOL, ok=True, output="done"))
    bus.emit(CompleteEvent(status="ok", turns=2))
    tracing.close()
    receiver.wait_for(3)
    delegate = next(receiver.named(f"execute_tool {DELEGATE_TOOL}"))
    child = next(receiver.named("execute_tool run_shell_command"))
    assert child.parent_span_id == delegate.span_id and child.trace_id == delegate.trace_id
    assert child.attributes["sandbox_agent.session"] == "fix-tests.1"
    assert child.attributes["process.exit.code"] == 2 and child.status_code == ERROR
    assert delegate.status_code != ERROR  # the same call id, kept apart from the child's
    assert SECRET not in child.attributes["gen_ai.tool.call.arguments"]


def test_the_user_config_file_turns_it_on(receiver: OtlpReceiver, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text(f'otel_endpoint = "{receiver.endpoint}"\n')
    settings = load_settings()
    assert settings.otel_endpoint == receiver.endpoint
    bus = HookBus()
    tracing = telemetry.start(bus, configured_endpoint=settings.otel_endpoint,
                              redactor=redactor())
    assert tracing is not None
    bus.emit(CompleteEvent(status="max_turns", turns=20))
    tracing.close()
    (root,) = receiver.wait_for(1)
    assert root.attributes["sandbox_agent.status"] == "max_turns" and root.status_code == ERROR


def test_a_hanging_collector_is_given_up_on_at_close() -> None:
    """close returns when its bound passes, not when the export would (the collector never
    answers): the warning says the spans were dropped. bench_audit_formats.py prints the time."""
    warnings: list[str] = []
    with OtlpReceiver(hang=True) as dead:
        # an export that would wait longer than close may: with both at 2 s, the exporter's own
        # timeout now and then came first, and close said that instead
        tracing = telemetry.Tracing.create(dead.endpoint + "/v1/traces", redactor(),
                                           environ={"OTEL_EXPORTER_OTLP_TIMEOUT": "10"},
                                           on_warning=warnings.append)
        run_events(tracing)
        tracing.close()
    assert dead.requests == 0  # nothing was ever answered
    assert warnings == ["the OpenTelemetry collector did not take the last spans within 2 s; "
                        "they were dropped"]


def test_a_refused_connection_breaks_nothing() -> None:
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    warnings: list[str] = []
    tracing = traced(f"http://127.0.0.1:{port}", warnings)
    run_events(tracing)
    tracing.close()
    tracing.close()  # idempotent
    run_events(tracing)  # after close, events are ignored, not an error
    (warning,) = warnings
    assert warning.startswith("OpenTelemetry: ") and "Failed to establish a new connection" in warning
