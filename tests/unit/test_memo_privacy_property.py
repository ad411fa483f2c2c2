"""Adds, edits, removals and restores from public, private and DM conversations, interleaved
at random: after every step, nothing a conversation is shown (a tool result, a refusal, the
memos of its prompt) holds text of a memo it may not see, and the revision log replays.

Every text written carries a token of the audience it was said to: `xWSx` for the
workspace (a public channel), `xD1x` for the DM D1, and so on. A token of an audience a
conversation cannot read must never appear in what that conversation is shown.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from strands.types.events import ToolResultEvent

from myao2.application.context import Budget, ContextBuilder, Persona
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import MemoError, Origin
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm import memo_messages as say
from myao2.infrastructure.llm.memo_tools import (
    SCOPE_KEY,
    MemoToolScope,
    add_memo,
    edit_memo,
    remove_memo,
)
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.memo_log import assert_log_replays
from tests.sqlite import MigratedCopy

CONVERSATIONS = {
    "C1": (Origin("C1", channel_private=False, user_id="U1"), ChannelKind.PUBLIC),
    "C2": (Origin("C2", channel_private=False, user_id="U2"), ChannelKind.PUBLIC),
    "G1": (Origin("G1", channel_private=True, user_id="U1"), ChannelKind.PRIVATE),
    "D1": (Origin("D1", channel_private=True, user_id="U1"), ChannelKind.IM),
    "D2": (Origin("D2", channel_private=True, user_id="U2"), ChannelKind.IM),
    "X1": (Origin.of(Channel("X1", "partners", ChannelKind.SHARED), "U3", None), ChannelKind.SHARED),
}
PRIVATE_KEYS = ["G1", "D1", "D2", "X1"]
TOKEN = re.compile(r"x(WS|G1|D1|D2|X1)x")
SHARED_NAMES = ["plans", "lunch"]
PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))

conversation = st.sampled_from(sorted(CONVERSATIONS))
field = st.sampled_from(["content", "detail", "tags", "new_name", "priority"])
number = st.integers(0, 2)


def key_of(origin: Origin) -> str:
    """The token key of what is said in `origin`: its own if private, else the workspace's."""
    return origin.channel_id if origin.channel_private and origin.channel_id else "WS"


def readable_keys(channel_id: str) -> set[str]:
    """What a conversation may read: its own, and the workspace's unless shared outside it (Slack Connect)."""
    return {channel_id} if CONVERSATIONS[channel_id][1] is ChannelKind.SHARED else {"WS", channel_id}


class PrivacyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.database = MigratedCopy()
        self.store = SqlMemoStore(self.database.engine, SystemClock())
        self.contexts = ContextBuilder(
            self.store, SystemClock(), PERSONA, bot_user_id="UBOT", budget=Budget(4000, 1000), marks=prompt_marks("en")
        )
        self.renderer = PromptRenderer("en")
        self.loop = asyncio.new_event_loop()
        self.written = 0

    def teardown(self) -> None:
        self.loop.close()
        self.database.close()

    # -- names and texts ------------------------------------------------------

    def text(self, origin: Origin) -> str:
        self.written += 1
        return f"x{key_of(origin)}x{self.written}"

    @staticmethod
    def names(channel_id: str) -> list[str]:
        """Names a conversation may use: shared ones, and ones only ever used in one audience."""
        return SHARED_NAMES + [f"x{key_of(CONVERSATIONS[channel_id][0])}x-n{i}" for i in range(3)]

    # -- steps ------------------------------------------------------------------

    @rule(where=conversation, which=number, tagged=st.booleans())
    def add(self, where: str, which: int, tagged: bool) -> None:
        origin = CONVERSATIONS[where][0]
        name = self.names(where)[which]
        tags = [f"x{key_of(origin)}x-t{which}"] if tagged else []
        self.tool(add_memo, where, name=name, content=self.text(origin), priority=4, tags=tags)

    @rule(where=conversation, which=number, what=field)
    def edit(self, where: str, which: int, what: str) -> None:
        origin = CONVERSATIONS[where][0]
        value: Any = {
            "content": self.text(origin),
            "detail": self.text(origin),
            "tags": [self.text(origin)],
            "new_name": self.text(origin),
            "priority": 5,
        }[what]
        name = self.names(where)[which]
        self.tool(edit_memo, where, memo_name=name, **{what: value})

    @rule(where=conversation, which=number)
    def remove(self, where: str, which: int) -> None:
        self.tool(remove_memo, where, memo_name=self.names(where)[which])

    @rule(where=conversation, which=number)
    def restore(self, where: str, which: int) -> None:
        origin = CONVERSATIONS[where][0]
        try:
            memo = self.store.restore(self.names(where)[which], "test", origin=origin)
            shown = say.memo_message(memo, "en")
        except MemoError as error:
            shown = say.error_message(error, "en")
        self.assert_may_see(where, shown)

    def tool(self, memo_tool: Any, where: str, **tool_input: Any) -> None:
        origin = CONVERSATIONS[where][0]
        tool_use = {"toolUseId": "t", "name": memo_tool.tool_name, "input": tool_input}
        state = {"agent": None, SCOPE_KEY: MemoToolScope(self.store, origin, "en")}

        async def run() -> Any:
            return [event async for event in memo_tool.stream(tool_use, state)][-1]

        event = self.loop.run_until_complete(run())
        assert isinstance(event, ToolResultEvent)
        self.assert_may_see(where, event.tool_result["content"][0]["text"])

    # -- checks -------------------------------------------------------------------

    def assert_may_see(self, channel_id: str, shown: str) -> None:
        leaked = set(TOKEN.findall(shown)) - readable_keys(channel_id)
        assert not leaked, f"{channel_id} was shown text of {leaked}: {shown!r}"

    @invariant()
    def every_conversation_sees_only_what_it_may(self) -> None:
        for channel_id, (origin, kind) in CONVERSATIONS.items():
            page = self.store.list(origin.reader, limit=50)
            self.assert_may_see(channel_id, say.page_message(page, None, "en"))
            for memo in page.memos:
                self.assert_may_see(channel_id, say.memo_message(memo, "en"))
            self.assert_may_see(channel_id, say.tags_message(self.store.tags(origin.reader), "en"))
            for name in SHARED_NAMES + [self.names(k)[0] for k in PRIVATE_KEYS if k != channel_id]:
                try:
                    shown = say.memo_message(self.store.get(name, origin.reader), "en")
                except MemoError as error:
                    shown = say.error_message(error, "en")
                # the name asked about is the asker's own text: whatever it says beyond it counts
                self.assert_may_see(channel_id, shown.replace(name, "<asked>"))
            context = self.loop.run_until_complete(self.contexts.build(Channel(channel_id, channel_id, kind), []))
            self.assert_may_see(channel_id, self.renderer.render("response", "query", context))

    @invariant()
    def the_revision_log_replays_to_the_rows(self) -> None:
        assert_log_replays(self.store)


TestPrivacyMachine = PrivacyMachine.TestCase
TestPrivacyMachine.settings = settings(
    max_examples=15,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
