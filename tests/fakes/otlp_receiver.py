"""A real OTLP/HTTP trace receiver on 127.0.0.1: decodes each export with opentelemetry-proto.

`hang=True` makes a dead collector of the worst kind: it accepts the connection and the
request, then never answers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    """One span as the collector got it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof("value")
    if field == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, field) if field else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver:
    """Collects the spans exported to `endpoint` (http://127.0.0.1:PORT)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.paths: list[str] = []
        self._got = threading.Condition()
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans, once at least `count` have arrived (or the timeout passed)."""
        with self._got:
            self._got.wait_for(lambda: len(self.spans) >= count, timeout)
            return list(self.spans)

    def named(self, prefix: str) -> Iterator[ReceivedSpan]:
        """Spans whose name starts with `prefix`."""
        return (s for s in self.spans if s.name.startswith(prefix))

    def _take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = [
            ReceivedSpan(
                name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                status_code=span.status.code, attributes=_attributes(span.attributes),
                events=[(e.name, _attributes(e.attributes)) for e in span.events],
                resource=_attributes(rs.resource.attributes))
            for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans
        ]
        with self._got:
            self.requests += 1
            self.paths.append(path)
            self.spans.extend(spans)
            self._got.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.hang:
                    receiver._release.wait(60)  # a collector that never answers
                    return
                receiver._take(self.path, body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
