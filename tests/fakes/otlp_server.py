"""A loopback OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf) that keeps every span it is sent::

    with FakeCollector() as collector:
        # OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint
        collector.spans  # decoded spans, oldest first
        collector.bodies  # the raw request bodies, to look for text that must not be there
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes._server import LoopbackServer

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[str] = field(default_factory=list)
    """The names of the span's events."""
    service: str = ""


class FakeCollector(LoopbackServer):
    """Receives traces as an OpenTelemetry collector would, over OTLP/HTTP with protobuf bodies."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._bodies: list[bytes] = []

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    @property
    def bodies(self) -> list[bytes]:
        with self._lock:
            return list(self._bodies)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name == name]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._handle_traces)
        return app

    async def _handle_traces(self, request: web.Request) -> web.Response:
        if request.content_type != PROTOBUF:
            return web.Response(status=415, text=f"expected {PROTOBUF}")
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        try:
            export.ParseFromString(body)
        except Exception:  # noqa: BLE001 - any undecodable body is the client's fault
            return web.Response(status=400, text="not an ExportTraceServiceRequest")
        received = [
            ReceivedSpan(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(),
                attributes={a.key: _value(a.value) for a in span.attributes},
                events=[event.name for event in span.events],
                service=str(
                    {a.key: _value(a.value) for a in resource_spans.resource.attributes}.get("service.name", "")
                ),
            )
            for resource_spans in export.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self._lock:
            self._bodies.append(body)
            self._spans.extend(received)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None
