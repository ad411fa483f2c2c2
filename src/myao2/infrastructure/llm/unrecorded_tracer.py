"""Strands' tracer for a bot that records no traces: its spans are started and ended without being filled.

Strands' `Tracer` fills every span it starts or ends (the agent's, each event loop cycle's, each model call's and
tool call's) with the prompt, the tool names and specs, and the answer, serialised to JSON: about six
serialisations of the whole prompt per model call, on the event loop. Without a tracer provider (the bot traces
only given an OTLP endpoint, `myao2.infrastructure.tracing`) OpenTelemetry's spans record nothing and all of it is
thrown away. `UnrecordedTracer` gives strands OpenTelemetry's invalid span, the span OpenTelemetry's no-op tracer
gives it then, without that work.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from strands.telemetry import tracer as strands_tracer


def _invalid_span(self: strands_tracer.Tracer, *args: Any, **kwargs: Any) -> trace.Span:
    """OpenTelemetry's invalid span, which records nothing."""
    return trace.INVALID_SPAN


def _leave_unfilled(self: strands_tracer.Tracer, *args: Any, **kwargs: Any) -> None:
    """Nothing: the span records nothing."""


class UnrecordedTracer(strands_tracer.Tracer):
    """A strands `Tracer` whose spans are OpenTelemetry's invalid span (it records nothing), left unfilled.

    Every method of strands' tracer that starts or ends a span is overridden (a test checks that none is missed).
    Only for a process without a tracer provider: a provider set later would not be used.
    """

    start_agent_span = start_event_loop_cycle_span = start_model_invoke_span = start_tool_call_span = _invalid_span
    start_multiagent_span = start_memory_search_span = start_memory_add_span = _invalid_span
    start_memory_inject_span = start_memory_extract_span = _invalid_span
    end_agent_span = end_event_loop_cycle_span = end_model_invoke_span = end_tool_call_span = _leave_unfilled
    end_swarm_span = end_memory_search_span = end_memory_add_span = _leave_unfilled
    end_memory_inject_span = end_memory_extract_span = _leave_unfilled
    end_span_with_error = end_span_with_cancellation = _leave_unfilled


def leave_spans_unfilled() -> None:
    """Make `UnrecordedTracer` the tracer strands' agents, event loop and tools get (`get_tracer`) from now on.

    Strands keeps its one tracer in a module global, made at the first `get_tracer()`; this sets it.
    """
    strands_tracer._tracer_instance = UnrecordedTracer()
