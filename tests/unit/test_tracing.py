"""Tracing: off without an OTLP endpoint; spans leave without events, message attributes or status text."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from myao2.application import tracing
from myao2.infrastructure.tracing import WithoutText, start_tracing


def test_without_an_endpoint_nothing_is_set_up_and_spans_cost_nothing() -> None:
    assert start_tracing(False, environ={}) is None
    with tracing.span("answer", {"slack.channel_id": "C1"}) as span:
        span.set_attribute("myao2.answer.attempt", 1)  # a no-op, not an error


def test_while_tracing_is_off_every_span_is_one_shared_no_op() -> None:
    # Nothing is built per span (each answer and each Slack event has one): no generator, no context manager.
    assert tracing.span("answer", {"slack.channel_id": "C1"}) is tracing.span("slack.event")


def test_spans_leave_without_what_may_hold_text() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(WithoutText(memory)))
    with provider.get_tracer("t").start_as_current_span("chat", record_exception=False) as span:
        span.set_attribute("gen_ai.request.model", "fake")
        span.set_attribute("gen_ai.input.messages", "Alice: my PIN is 7291")
        span.set_attribute("gen_ai.tool.call.result", "memo: PIN 7291")
        span.add_event("gen_ai.user.message", {"content": "my PIN is 7291"})
        span.set_status(Status(StatusCode.ERROR, "Incorrect API key provided: sk-7291"))
    (sent,) = memory.get_finished_spans()
    assert dict(sent.attributes) == {"gen_ai.request.model": "fake"}
    assert sent.events == () and sent.status.status_code is StatusCode.ERROR and sent.status.description is None
    assert sent.context == span.get_span_context()
