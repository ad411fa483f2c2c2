"""Spans around the bot's work: event handling, answers, judgments, memory jobs, search.

Off, and free (OpenTelemetry is not even imported), until `enable()`. Attributes carry
ids, counts and outcomes, never what anyone wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

Attribute = str | int | float | bool | None


class Span(Protocol):
    def set_attribute(self, key: str, value: Any) -> None: ...


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        """Nothing to record while tracing is off."""


_tracer: Any = None


def enable() -> None:
    """Make `span` record, through the global OpenTelemetry tracer provider."""
    global _tracer
    from opentelemetry import trace

    _tracer = trace.get_tracer("myao2")


def enabled() -> bool:
    """Whether spans are recorded (`enable` was called)."""
    return _tracer is not None


_OFF: AbstractContextManager[Span] = nullcontext(_NoSpan())
"""Every span while tracing is off: one shared no-op (each answer and each Slack event has a span)."""


def span(name: str, attributes: Mapping[str, Attribute] | None = None) -> AbstractContextManager[Span]:
    """A span named `name` around the block, current within it; attributes that are None are left out."""
    if _tracer is None:
        return _OFF
    given = {key: value for key, value in (attributes or {}).items() if value is not None}
    recorded: AbstractContextManager[Span] = _tracer.start_as_current_span(name, attributes=given)
    return recorded
