"""A real strands Agent, with a scripted model, adds a memo through the memo tools."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from strands import Agent
from strands.models import Model
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

from myao2.domain.memo import Origin
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.memo_tools import MEMO_TOOLS, SCOPE_KEY, MemoToolScope

FINAL_ANSWER = "覚えておくね、田中さんはコーヒーが好き！"


class ScriptedModel(Model):
    """Streams one scripted turn per call: first a tool call, then a final text."""

    def __init__(self, tool_name: str, tool_input: dict[str, Any], answer: str) -> None:
        self.turns = [self._tool_turn(tool_name, tool_input), self._text_turn(answer)]
        self.requests: list[tuple[Messages, list[ToolSpec] | None]] = []

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> dict[str, Any]:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[StreamEvent]:
        self.requests.append((list(messages), tool_specs))
        for event in self.turns.pop(0):
            yield event

    @staticmethod
    def _tool_turn(name: str, tool_input: dict[str, Any]) -> list[StreamEvent]:
        return [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": "call-1"}}}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(tool_input)}}}},
            {"contentBlockStop": {}},
            {"messageStop": {"stopReason": "tool_use"}},
            _usage(),
        ]

    @staticmethod
    def _text_turn(text: str) -> list[StreamEvent]:
        return [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockStart": {"start": {}}},
            {"contentBlockDelta": {"delta": {"text": text}}},
            {"contentBlockStop": {}},
            {"messageStop": {"stopReason": "end_turn"}},
            _usage(),
        ]


def _usage() -> StreamEvent:
    return {
        "metadata": {
            "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
            "metrics": {"latencyMs": 0},
        }
    }


async def test_the_agent_adds_a_memo_and_answers(tmp_path: Path) -> None:
    db_path = tmp_path / "m.db"
    store = SqlMemoStore(open_database(f"sqlite:///{db_path}"), SystemClock())
    model = ScriptedModel(
        "add_memo",
        {"name": "tanaka-coffee", "content": "田中さんはコーヒーが好き", "priority": 3, "tags": ["田中"]},
        FINAL_ANSWER,
    )
    agent = Agent(model=model, tools=MEMO_TOOLS, callback_handler=None)
    origin = Origin("C123", channel_private=False, user_id="U456", message_ts="1700000000.000100")

    result = await agent.invoke_async(
        "田中さんはコーヒーが好きなんだって",
        invocation_state={SCOPE_KEY: MemoToolScope(store, origin, "ja")},
    )

    assert str(result).strip() == FINAL_ANSWER
    with sqlite3.connect(db_path) as plain:
        rows = plain.execute(
            "SELECT name, content, priority, tags, channel_id, user_id, message_ts FROM memos"
        ).fetchall()
    assert rows == [
        (
            "tanaka-coffee",
            "田中さんはコーヒーが好き",
            3,
            '["田中"]',
            "C123",
            "U456",
            "1700000000.000100",
        )
    ]
    # the model was offered the six tools, and saw the tool's confirmation before answering
    offered = {spec["name"] for spec in model.requests[0][1] or []}
    assert offered == {t.tool_name for t in MEMO_TOOLS}
    tool_result = model.requests[1][0][-1]["content"][0]["toolResult"]
    assert tool_result["status"] == "success"
    assert tool_result["content"][0]["text"].startswith("メモ「tanaka-coffee」を追加しました")
