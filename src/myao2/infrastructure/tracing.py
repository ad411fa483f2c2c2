"""Traces over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set.

The exporter is OpenTelemetry's own, configured by the standard ``OTEL_*`` variables.
Strands' agent, model and tool spans and the bot's own spans (`myao2.application.tracing`)
go out together. Unless `logging.debug_llm_messages` is on, what may hold text is taken
off every span before it leaves: events (strands records prompts and replies as events,
and exceptions their messages), the message attributes strands may set, and status
descriptions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from myao2.application import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
TEXT_ATTRIBUTES = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "content",
        "message",
    }
)
"""Span attributes strands may fill with prompts, replies, tool arguments or results."""


def start_tracing(debug_messages: bool, environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Send traces over OTLP/HTTP if an endpoint is configured; the provider to shut down at exit, or None."""
    environ = os.environ if environ is None else environ
    if not any(environ.get(name) for name in ENDPOINT_VARIABLES):
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {"service.name": environ.get("OTEL_SERVICE_NAME") or "myao2"}
    )
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter if debug_messages else WithoutText(exporter)))
    trace.set_tracer_provider(provider)
    tracing.enable()
    return provider


class WithoutText:
    """A span exporter that hands `exporter` the spans without what may hold text (see the module docstring)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export([_without_text(span) for span in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def _without_text(span: ReadableSpan) -> ReadableSpan:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import Status

    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={key: value for key, value in (span.attributes or {}).items() if key not in TEXT_ATTRIBUTES},
        events=(),
        links=span.links,
        kind=span.kind,
        status=Status(span.status.status_code),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
