from __future__ import annotations

from typing import Any

import openai
import pytest
from strands import Agent

from myao2.infrastructure.llm.agent_pool import KEEP, AgentPool
from myao2.infrastructure.llm.tool_registry import SpecCountingModel

ANSWER = "answer-canary-52e0"


class ScriptedModel(SpecCountingModel):
    """Answers every call with `ANSWER`, without a request."""

    def __init__(self) -> None:
        super().__init__(client=openai.AsyncOpenAI(api_key="sk-none", base_url="http://127.0.0.1:9/v1"), model_id="m")

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any) -> Any:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": ANSWER}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        yield {"metadata": {"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "metrics": {"latencyMs": 1}}}


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


def pool_of(model: ScriptedModel) -> AgentPool:
    return AgentPool(lambda: Agent(model=model, callback_handler=None))


async def test_an_agent_given_back_keeps_nothing_of_its_answer(model):
    pool = pool_of(model)
    agent = pool.take(model, "system-canary-1d2e")
    agent.state.set("seen", "state-canary-8f0a")
    await agent.invoke_async("prompt-canary-3b9c")
    assert agent.messages and agent.event_loop_metrics.traces

    pool.give_back(agent)

    again = pool.take(model, "You are a cat.")
    assert again is agent
    assert (again.messages, again.state.get(), again.system_prompt) == ([], {}, "You are a cat.")
    assert again.event_loop_metrics.traces == [] and again.event_loop_metrics.agent_invocations == []
    assert again.trace_span is None
    kept = repr(vars(again)) + repr(again.take_snapshot(preset="session").to_dict())
    assert not [canary for canary in ("1d2e", "8f0a", "3b9c", ANSWER) if canary in kept]


async def test_an_agent_strands_left_something_of_its_own_on_is_not_kept(model):
    pool = pool_of(model)
    agent = pool.take(model, "system")
    await agent.invoke_async("hello")
    agent._deferred_continuation_inputs = ["prompt-canary-3b9c"]  # as strands keeps input an interrupt deferred

    pool.give_back(agent)

    assert pool.take(model, "system") is not agent


def test_agents_of_a_model_built_anew_are_not_lent():
    models = [ScriptedModel()]
    pool = AgentPool(lambda: Agent(model=models[-1], callback_handler=None))
    agent = pool.take(models[-1], "system")
    pool.give_back(agent)
    models.append(ScriptedModel())  # as `ModelClients` builds its models anew once closed

    lent = pool.take(models[-1], "system")

    assert lent is not agent and lent.model is models[-1]


def test_at_most_a_few_idle_agents_are_kept(model):
    pool = pool_of(model)
    agents = [pool.take(model, "system") for _ in range(KEEP + 2)]
    for agent in agents:
        pool.give_back(agent)

    lent = {id(pool.take(model, "system")) for _ in range(KEEP + 2)}

    assert len(lent & {id(agent) for agent in agents}) == KEEP
