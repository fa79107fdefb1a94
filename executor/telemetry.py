"""OpenTelemetry traces of runs, off by default: a trace per run, a span per model request and
per tool call, sent over OTLP/HTTP (protobuf) by the official SDK.

On when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set, or
`otel_endpoint` in the user config file (or `SANDBOX_AGENT_OTEL_ENDPOINT`); the other standard
`OTEL_EXPORTER_OTLP_*` variables (headers, timeout, compression, certificates) and
`OTEL_SERVICE_NAME`/`OTEL_RESOURCE_ATTRIBUTES` apply as the SDK reads them; `OTEL_SDK_DISABLED=true`
or `OTEL_TRACES_EXPORTER=none` turn it off. Needs the `otel` extra (`pip install
'hardened-sandbox-agent[otel]'`); without it a run says so once and goes on.

Spans follow the GenAI semantic conventions where they exist (`invoke_agent`, `chat`,
`execute_tool`, `gen_ai.request.model`, `gen_ai.usage.*`, `gen_ai.tool.*`) and add
`sandbox_agent.*` attributes for the decision, approval, policy rule, exit code and files
changed. Every string passes the audit's redactor (executor/redact.py) first.

A dead or hanging collector never slows a run: spans go out from the SDK's batch processor on
its own (daemon) thread, each export is bounded (`EXPORT_TIMEOUT_S` unless the
`OTEL_EXPORTER_OTLP_*TIMEOUT` variables say otherwise), and `close` waits at most
`SHUTDOWN_TIMEOUT_S` for what is left, then drops it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from executor import DISTRIBUTION, toolmeta
from executor.delegation import DELEGATE_TOOL
from executor.hooks import (
    ChildEvent,
    CompleteEvent,
    ErrorEvent,
    Event,
    HookBus,
    ModelRequestEvent,
    RetryEvent,
    RunStartEvent,
    SandboxStartEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from executor.redact import Redactor

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_S = 2.0
"""Seconds one export may take, retries included (the SDK's own default is 10)."""
SHUTDOWN_TIMEOUT_S = 2.0
"""Seconds `close` waits for the spans still queued before it drops them."""
SCHEDULE_DELAY_MS = 1000
"""How often the batch processor sends what it has."""
ARGUMENT_MAX_CHARS = 2048
"""Tool arguments kept in `gen_ai.tool.call.arguments` (redacted, then cut)."""
PATHS_MAX = 50
"""Changed paths listed on a tool span."""
_SPAN_EVENTS = ("run_start", "sandbox_start", "model_request", "tool_call", "tool_result",
                "retry", "complete", "error", "warning", "child_event")


def endpoint_from(environ: Mapping[str, str], configured: str | None) -> str | None:
    """The traces endpoint to send to, or None when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces  # a signal endpoint is used as it is
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or (configured or "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def _export_timeout(environ: Mapping[str, str]) -> float:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        try:
            value = float(environ.get(name, ""))
        except ValueError:
            continue
        return value if value > 0 else EXPORT_TIMEOUT_S  # seconds, as the Python SDK reads it
    return EXPORT_TIMEOUT_S


class _ExportFailures(logging.Handler):
    """Takes the SDK's log lines (one per failed attempt) so a run says it once, at its end."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.first = self.first or record.getMessage()[:240]  # the cause; later ones repeat it


class Tracing:
    """Turns one run's hook events into spans and exports them."""

    def __init__(self, provider: TracerProvider, redactor: Redactor, *,
                 shutdown_timeout: float = SHUTDOWN_TIMEOUT_S,
                 on_warning: Callable[[str], object] | None = None) -> None:
        self._provider = provider
        self._on_warning = on_warning or (lambda text: log.warning("%s", text))
        self._failures = _ExportFailures()
        self._tracer: Tracer = provider.get_tracer("sandbox-agent")
        self._redactor = redactor
        self._shutdown_timeout = shutdown_timeout
        self._root: Span | None = None
        self._calls: dict[str, Span] = {}
        self._paths: dict[str, str] = {}
        self._delegating: str | None = None
        self._run: dict[str, Any] = {}
        self._tokens = [0, 0]
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def create(cls, endpoint: str, redactor: Redactor,
               environ: Mapping[str, str] | None = None,
               on_warning: Callable[[str], object] | None = None) -> Tracing:
        """A provider with a batch processor and an OTLP/HTTP exporter to `endpoint`."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from executor import __version__

        env = os.environ if environ is None else environ
        timeout = _export_timeout(env)
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or
                                    "sandbox-agent", "service.version": __version__})
        provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
        provider.add_span_processor(BatchSpanProcessor(
            exporter, schedule_delay_millis=SCHEDULE_DELAY_MS,
            export_timeout_millis=timeout * 1000))
        return cls(provider, redactor, on_warning=on_warning)

    def attach(self, bus: HookBus) -> Tracing:
        """Follow `bus`'s events (never critical: tracing cannot stop a run); the SDK's log
        lines (one per failed export attempt) are counted from now on, for `close` to tell."""
        sdk_log = logging.getLogger("opentelemetry")
        if not any(isinstance(h, logging.NullHandler) for h in sdk_log.handlers):
            sdk_log.addHandler(logging.NullHandler())  # a late line after close stays quiet too
        if self._failures not in sdk_log.handlers:
            sdk_log.addHandler(self._failures)
        sdk_log.propagate = False  # no SDK traceback lines in the middle of a run's output
        bus.subscribe(self.on_event, *_SPAN_EVENTS)  # type: ignore[arg-type]
        return self

    # ---------------------------------------------------------------- events

    def on_event(self, event: Event) -> None:
        """One hook event into the spans."""
        with self._lock:
            if self._closed:
                return
            handler = _HANDLERS.get(type(event))
            if handler is not None:
                handler(self, event)

    def _start_run(self, event: RunStartEvent) -> None:
        self._end_run("ok", None)
        self._run = self._clean({
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "sandbox-agent",
            "gen_ai.provider.name": event.provider, "gen_ai.request.model": event.model,
            "gen_ai.conversation.id": event.session, "sandbox_agent.image": event.image,
            "sandbox_agent.mount_mode": event.mount_mode,
            "sandbox_agent.workspace": event.workspace,
            "sandbox_agent.policy_source": event.policy_source,
            "sandbox_agent.parent_session": event.parent_session,
        })
        self._root_span(event.at)

    def _root_span(self, at: float) -> Span:
        """The run's span, started on first use: at `run_start`, or for each later answer of
        a REPL session (one `run_start`, a `complete` per answer) with the session's facts."""
        if self._root is None:
            attributes = self._run or {"gen_ai.operation.name": "invoke_agent",
                                       "gen_ai.agent.name": "sandbox-agent"}
            self._root = self._tracer.start_span(
                "invoke_agent sandbox-agent", start_time=_ns(at), attributes=attributes)
        return self._root

    def _in_run(self) -> Any:
        from opentelemetry import trace

        assert self._root is not None
        return trace.set_span_in_context(self._root)

    def _sandbox(self, event: SandboxStartEvent) -> None:
        root = self._root_span(event.at)
        root.add_event("sandbox_start", timestamp=_ns(event.at), attributes=self._clean({
            "sandbox_agent.container_id": event.container_id,
            "sandbox_agent.image_digest": event.image_digest,
            "sandbox_agent.runtime": event.runtime, "sandbox_agent.reattached": event.reattached,
        }))

    def _model_request(self, event: ModelRequestEvent) -> None:
        from opentelemetry.trace import SpanKind

        end = int(event.at * 1e9)
        began = end - round(event.duration_ms * 1e6)  # exact: the request's own duration
        self._root_span(began / 1e9)
        self._tokens[0] += event.prompt_tokens or 0
        self._tokens[1] += event.completion_tokens or 0
        span = self._tracer.start_span(
            f"chat {self._redactor.text(event.model)}", context=self._in_run(),
            kind=SpanKind.CLIENT, start_time=began,
            attributes=self._clean({
                "gen_ai.operation.name": "chat", "gen_ai.request.model": event.model,
                "gen_ai.provider.name": self._run.get("gen_ai.provider.name"),
                "gen_ai.usage.input_tokens": event.prompt_tokens,
                "gen_ai.usage.output_tokens": event.completion_tokens,
                "sandbox_agent.messages": event.messages,
                "sandbox_agent.prompt_bytes": event.prompt_bytes,
            }))
        span.end(end_time=end)

    def _tool_call(self, event: ToolCallEvent, child: str | None = None) -> None:
        import json

        from opentelemetry import trace

        self._root_span(event.at)
        parent = self._calls.get(self._delegating) if child and self._delegating else None
        arguments = self._redactor.text(json.dumps(event.arguments, ensure_ascii=False))
        span = self._tracer.start_span(
            f"execute_tool {self._redactor.text(event.tool)}",
            context=trace.set_span_in_context(parent) if parent else self._in_run(),
            start_time=_ns(event.at), attributes=self._clean({
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool,
                "gen_ai.tool.call.id": event.call_id,
                "gen_ai.tool.call.arguments": arguments[:ARGUMENT_MAX_CHARS],
                "sandbox_agent.decision": event.decision,
                "sandbox_agent.approved_by": event.approved_by,
                "sandbox_agent.policy.rule": event.rule, "sandbox_agent.reason": event.reason,
                "sandbox_agent.session": child,
            }))
        key = _key(event.call_id, child)
        old = self._calls.pop(key, None)
        if old is not None:
            old.end()
        if event.decision != "allow":
            from opentelemetry.trace import StatusCode

            span.set_status(StatusCode.ERROR, f"{event.decision}: {event.reason or event.rule}")
            span.set_attribute("error.type", f"tool_{event.decision}")
        self._calls[key] = span
        if event.tool == DELEGATE_TOOL and child is None:
            self._delegating = key  # the child session's calls nest under this one
        path = event.arguments.get("path")
        if isinstance(path, str):
            self._paths[key] = path

    def _child(self, event: ChildEvent) -> None:
        """A delegated child session's call or result (relayed), as spans of this trace."""
        from pydantic import ValidationError

        kinds: dict[str, type[ToolCallEvent] | type[ToolResultEvent]] = {
            "tool_call": ToolCallEvent, "tool_result": ToolResultEvent}
        kind = kinds.get(event.event)
        if kind is None:
            return
        try:
            inner = kind.model_validate({**event.payload, "at": event.at})
        except ValidationError:
            return
        if isinstance(inner, ToolCallEvent):
            self._tool_call(inner, child=event.session)
        else:
            self._tool_result(inner, child=event.session)

    def _tool_result(self, event: ToolResultEvent, child: str | None = None) -> None:
        from opentelemetry.trace import StatusCode

        key = _key(event.call_id, child)
        if key == self._delegating:
            self._delegating = None
        span = self._calls.pop(key, None)
        if span is None:
            return
        meta = event.meta
        paths = _changed_paths(meta, self._paths.pop(key, None))
        span.set_attributes(self._clean({
            "sandbox_agent.tool.ok": event.ok, "process.exit.code": toolmeta.exit_code(meta),
            "sandbox_agent.timed_out": toolmeta.timed_out(meta),
            "sandbox_agent.output_bytes": len(event.output.encode("utf-8", "surrogatepass")),
            "sandbox_agent.files_changed": len(paths),
            "sandbox_agent.files_changed.paths": paths[:PATHS_MAX] or None,
        }))
        if not event.ok and span.is_recording():
            span.set_status(StatusCode.ERROR, "tool failed")
        span.end(end_time=_ns(event.at))

    def _note(self, event: RetryEvent | WarningEvent | ErrorEvent) -> None:
        from opentelemetry.trace import StatusCode

        root = self._root_span(event.at)
        if isinstance(event, RetryEvent):
            attributes = {"sandbox_agent.attempt": event.attempt,
                          "sandbox_agent.reason": event.reason}
        else:
            attributes = {"sandbox_agent.message": event.message}
        root.add_event(event.kind, timestamp=_ns(event.at), attributes=self._clean(attributes))
        if isinstance(event, ErrorEvent):
            root.set_status(StatusCode.ERROR, self._redactor.text(event.message))
            root.set_attribute("error.type", event.error_type or "error")

    def _complete(self, event: CompleteEvent) -> None:
        self._root_span(event.at)
        self._end_run(event.status, event.turns, at=event.at)

    def _end_run(self, status: str, turns: int | None, at: float | None = None) -> None:
        from opentelemetry.trace import StatusCode

        for span in self._calls.values():  # calls that never got a result
            span.end(end_time=_ns(at) if at else None)
        self._calls.clear()
        self._paths.clear()
        self._delegating = None
        if self._root is None:
            return
        self._root.set_attributes(self._clean({
            "sandbox_agent.status": status, "sandbox_agent.turns": turns,
            "gen_ai.usage.input_tokens": self._tokens[0],
            "gen_ai.usage.output_tokens": self._tokens[1]}))
        if status != "ok":
            self._root.set_status(StatusCode.ERROR, status)
        self._root.end(end_time=_ns(at) if at else None)
        self._root, self._tokens = None, [0, 0]

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """End what is open and send it, waiting at most the shutdown timeout."""
        with self._lock:
            if self._closed:
                return
            if self._root is not None:  # the run ended without its `complete`
                self._end_run("interrupted", None)
            self._closed = True
        done = threading.Thread(target=self._shutdown, name="otel-shutdown", daemon=True)
        done.start()
        done.join(self._shutdown_timeout)  # a hanging collector keeps only this daemon thread
        logging.getLogger("opentelemetry").removeHandler(self._failures)
        if done.is_alive():
            self._on_warning(f"the OpenTelemetry collector did not take the last spans within "
                             f"{self._shutdown_timeout:.0f} s; they were dropped")
        elif self._failures.count:
            self._on_warning(f"OpenTelemetry: {self._failures.count} failed export attempt(s) "
                             f"(first: {self._redactor.text(self._failures.first)})")

    def _shutdown(self) -> None:
        try:
            self._provider.shutdown()
        except Exception:  # the SDK's own failure must not become the run's
            log.debug("OpenTelemetry shutdown failed", exc_info=True)

    def _clean(self, attributes: Mapping[str, Any]) -> dict[str, Any]:
        """Attributes without None values, every string redacted."""
        out: dict[str, Any] = {}
        for key, value in attributes.items():
            if value is None:
                continue
            if isinstance(value, str):
                value = self._redactor.text(value)
            elif isinstance(value, list):
                value = [self._redactor.text(str(v)) for v in value]
            out[key] = value
        return out


_HANDLERS: dict[type, Any] = {
    RunStartEvent: Tracing._start_run, SandboxStartEvent: Tracing._sandbox,
    ModelRequestEvent: Tracing._model_request, ToolCallEvent: Tracing._tool_call,
    ToolResultEvent: Tracing._tool_result, RetryEvent: Tracing._note,
    WarningEvent: Tracing._note, ErrorEvent: Tracing._note, CompleteEvent: Tracing._complete,
    ChildEvent: Tracing._child,
}


def _key(call_id: str, child: str | None) -> str:
    """Calls of a child session have ids of their own: keep them apart from the parent's."""
    return f"{child}\x00{call_id}" if child else call_id


def _ns(at: float | None) -> int | None:
    return None if at is None else int(at * 1e9)


def _changed_paths(meta: Mapping[str, Any], own_path: str | None) -> list[str]:
    """Paths a call wrote: a write tool's own path, and the files a command changed."""
    paths = [str(c["path"]) for c in toolmeta.changes(meta)]
    if toolmeta.sha256_after(meta) and own_path:
        paths.insert(0, own_path)
    return paths


def start(bus: HookBus, *, configured_endpoint: str | None, redactor: Redactor,
          on_warning: Any = None) -> Tracing | None:
    """Trace the runs on `bus` when OpenTelemetry is configured (else None); closed at exit."""
    endpoint = endpoint_from(os.environ, configured_endpoint)
    if endpoint is None:
        return None
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol.strip() not in ("http/protobuf", "") and on_warning is not None:
        on_warning(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: sandbox-agent sends OTLP/HTTP "
                   "(http/protobuf) only; point the endpoint at the collector's HTTP port")
    try:
        tracing = Tracing.create(endpoint, redactor, on_warning=on_warning)
    except ImportError:
        message = ("OpenTelemetry is configured but its packages are missing: install "
                   f"'{DISTRIBUTION}[otel]'; the run goes on without traces")
        log.warning("%s", message)
        if on_warning is not None:
            on_warning(message)
        return None
    atexit.register(tracing.close)
    return tracing.attach(bus)
