"""Strands agents kept between answers (replies, judgments, memory updates), each giving one answer at a time.

Making a strands `Agent` takes about a third of the CPU strands spends on a plain answer (its plugins are
introspected, its hook, tool and plugin registries built, the ``./tools`` directory looked for). An agent that
ended its answer cleanly gives a later one instead, made blank first: strands' snapshot of a new agent (messages,
state, conversation manager state, interrupt state, system prompt, model state) is loaded into it, and its metrics
(which keep the answer's messages) and its trace span are dropped. An agent on which strands left an attribute
a new agent has not (as it does for input deferred by an interrupt) is not kept. One whose answer failed, or was
cut short, is never given back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strands import Agent, Snapshot
    from strands.models import Model

KEEP = 4
"""Idle agents kept: as many answers as are usually written at once."""

SNAPSHOT_FIELDS = ["messages", "state", "conversation_manager_state", "interrupt_state", "system_prompt", "model_state"]
"""Every field of a strands agent snapshot (`strands.types.Snapshot`)."""


class AgentPool:
    """Agents made by `make`, lent for one answer each (`take`) and, after a clean answer, given back blank."""

    def __init__(self, make: Callable[[], Agent], keep: int = KEEP) -> None:
        self._make = make
        self._keep = keep
        self._idle: list[Agent] = []
        self._blank: Snapshot | None = None
        """A new agent's snapshot, loaded into every agent given back."""
        self._attributes: frozenset[str] = frozenset()
        """A new agent's attribute names."""

    def take(self, model: Model, system: str) -> Agent:
        """An agent of `model` with `system` as its system prompt, for one answer: an idle one or a new one."""
        while self._idle:
            agent = self._idle.pop()
            if agent.model is model:  # else made before the model was built anew (`ModelClients.close`)
                break
        else:
            agent = self._make()
            if self._blank is None:
                agent.system_prompt = None  # the blank has none: cheaper to load
                self._blank = agent.take_snapshot(include=SNAPSHOT_FIELDS)  # type: ignore[arg-type]
                self._attributes = frozenset(vars(agent))
        agent.system_prompt = system
        return agent

    def give_back(self, agent: Agent) -> None:
        """Keep `agent`, whose answer ended cleanly (its stream read to the end), made blank, for a later answer."""
        if self._blank is None or frozenset(vars(agent)) != self._attributes or len(self._idle) >= self._keep:
            return
        agent.load_snapshot(self._blank)
        agent.event_loop_metrics = type(agent.event_loop_metrics)()  # strands' EventLoopMetrics, new
        agent.trace_span = None
        self._idle.append(agent)
