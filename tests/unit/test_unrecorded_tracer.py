"""Without tracing, strands' spans are made without filling them (the prompt, tools and answer as JSON): nothing
records them. Strands' tracer is replaced only then; with tracing on, its spans carry what they always did."""

from __future__ import annotations

import inspect

import pytest
from opentelemetry import trace

from myao2.application import tracing


def test_every_span_strands_tracer_starts_or_ends_is_left_unfilled() -> None:
    """Were strands to add a kind of span, it would be filled again (and this fails): the tracer must name it."""
    from strands.telemetry.tracer import Tracer

    from myao2.infrastructure.llm.unrecorded_tracer import UnrecordedTracer

    span_methods = {
        name for name, member in inspect.getmembers(Tracer, inspect.isfunction) if name.startswith(("start_", "end_"))
    }
    assert span_methods and span_methods <= set(vars(UnrecordedTracer))
    tracer = UnrecordedTracer()
    assert tracer.start_agent_span(messages=[{"role": "user", "content": [{"text": "hi"}]}]) is trace.INVALID_SPAN
    assert not trace.INVALID_SPAN.is_recording()


def test_without_tracing_the_model_libraries_leave_strands_spans_unfilled(monkeypatch: pytest.MonkeyPatch) -> None:
    from strands.telemetry import tracer as strands_tracer

    from myao2.infrastructure.llm.agents import import_model_libraries
    from myao2.infrastructure.llm.unrecorded_tracer import UnrecordedTracer

    monkeypatch.setattr(tracing, "_tracer", None)
    monkeypatch.setattr(strands_tracer, "_tracer_instance", None)
    import_model_libraries()
    assert isinstance(strands_tracer.get_tracer(), UnrecordedTracer)


def test_with_tracing_strands_tracer_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    from strands.telemetry import tracer as strands_tracer

    from myao2.infrastructure.llm.agents import import_model_libraries
    from myao2.infrastructure.llm.unrecorded_tracer import UnrecordedTracer

    monkeypatch.setattr(tracing, "_tracer", trace.get_tracer("test"))
    monkeypatch.setattr(strands_tracer, "_tracer_instance", None)
    try:
        import_model_libraries()
        assert type(strands_tracer.get_tracer()) is strands_tracer.Tracer
        assert not isinstance(strands_tracer.get_tracer(), UnrecordedTracer)
    finally:
        ThreadingInstrumentor().uninstrument()  # as the model libraries leave it without tracing
