"""Retention end to end, the bot's clock moved forward: digests on day 3, condensed on day 7, raw text gone on day 15,
and what was said on day 0 still recalled through its digest; a private channel's canary never leaves it."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import create_engine

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.memory_model import digest, is_digest_request, is_memory_request, remember
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack
from tests.unit.test_retention import rows_holding

SECRET_ROOM = "GSECRET"
DAY = 24 * 3600
FACT = "the spare key is under the blue flowerpot"
CANARY = "canary-secret"
MEMO = "the wifi password is on the fridge"


def responder(request: dict[str, Any]):  # type: ignore[no-untyped-def]
    if is_memory_request(request):
        return remember(request)
    if is_digest_request(request):
        return digest(request)
    if any(m["role"] == "tool" for m in request["messages"]):
        return Text("Found it.")
    asked = request["messages"][-1]["content"]
    asked = asked if isinstance(asked, str) else str(asked)
    if "where is the spare key?" in asked:
        return ToolCalls([ToolCall("recall", {"query": "where the spare key is"})])
    if "please note the wifi" in asked:
        return ToolCalls([ToolCall("add_memo", {"name": "wifi", "content": MEMO, "priority": 3})])
    if "any party plans?" in asked:
        return ToolCalls([ToolCall("recall", {"query": "surprise party for Bob"})])
    return Text("Sure thing.")


def rows(bot: BotProcess, sql: str, **params: Any) -> list[tuple]:
    return bot.rows(sql, **params)


def digests(bot: BotProcess, channel: str) -> list[tuple[str, str, list]]:
    return rows(bot, "SELECT day, stage, lines FROM digests WHERE channel_id = :channel ORDER BY day", channel=channel)


def tables_holding(bot: BotProcess, text: str) -> set[str]:
    """The tables any row of which holds `text`."""
    engine = create_engine(bot.database_url)
    try:
        return set(rows_holding(engine, text))
    finally:
        engine.dispose()


class Days:
    """The bot's clock, moved forward a whole number of days, and messages posted at that time.

    Day 0 begins at the next midnight (UTC, the persona's time zone) and the bot's clock starts an hour into it:
    a test run across a real midnight would have its day 0's messages on two days, and its day boundaries move.
    """

    def __init__(self, bot: BotProcess, slack: FakeSlack) -> None:
        self.bot = bot
        self.slack = slack
        now = time.time()
        self.day_0 = (now // DAY + 1) * DAY
        """When day 0 begins, in the bot's time (Unix seconds)."""
        self._base = self.day_0 + 3600 - now
        self.shift = self._base
        bot.shift_clock(self.shift)

    def move_to(self, day: int) -> None:
        self.shift = self._base + day * DAY
        self.bot.shift_clock(self.shift)

    def post(self, channel: str, user: str, text: str) -> str:
        return self.slack.post_message(channel, user, text, ts=f"{time.time() + self.shift:.6f}")


def ask(days: Days, slack: FakeSlack, llm, question: str) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """Mention the bot in #general; returns the prompt it answered from and the tool results it saw."""
    seen = len(llm.requests)
    ts = days.post(GENERAL, ALICE, f"<@{slack.bot_user_id}> {question}")
    slack.wait_for(lambda: replies_in(slack, ts), what=f"the answer to {question!r}")
    requests = [
        r
        for r in llm.requests[seen:]
        if question in prompt_text(r) and not is_memory_request(r) and not is_digest_request(r)
    ]
    results = [
        m["content"] if isinstance(m["content"], str) else str(m["content"])
        for m in requests[-1]["messages"]
        if m["role"] == "tool"
    ]
    return prompt_text(requests[0]), results


def only_the_secret_room_saw_the_canary(llm) -> None:  # type: ignore[no-untyped-def]
    for request in llm.requests:
        text = prompt_text(request)
        if CANARY in text:
            assert (is_memory_request(request) and "Scope: #secret-room" in text) or (
                is_digest_request(request) and "Conversation: #secret-room" in text
            ), text


@ON_BOTH_DATABASES
def test_a_fact_from_day_0_is_recalled_on_day_15_from_its_digest_after_the_raw_text_is_gone(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(SECRET_ROOM, "secret-room", is_private=True, members=[ALICE, BOB])
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.5
    days = Days(bot, slack)
    bot.start()

    days.post(GENERAL, BOB, FACT)
    days.post(SECRET_ROOM, ALICE, f"{CANARY} surprise party for Bob on Friday")
    ask(days, slack, llm, "please note the wifi password")
    assert rows(bot, "SELECT content FROM memos") == [(MEMO,)]
    wait_until(
        lambda: len(rows(bot, "SELECT scope FROM memories WHERE scope LIKE 'channel:%' AND term = 'long'")) == 2,
        what="the memory job to read day 0",
    )
    assert digests(bot, GENERAL) == []

    days.move_to(3)
    wait_until(lambda: digests(bot, GENERAL) and digests(bot, SECRET_ROOM), what="the digests of day 0")
    [(day0, stage, lines)] = digests(bot, GENERAL)
    assert stage == "digest" and f"digest: {FACT}" in lines
    assert rows(bot, "SELECT audience FROM digests WHERE channel_id = :channel", channel=SECRET_ROOM) == [(SECRET_ROOM,)]
    prompt, results = ask(days, slack, llm, "any party plans?")
    assert f"- [{day0}] digest: {FACT}" in prompt  # the channel's digest reaches its prompt
    assert results and CANARY not in results[0]
    assert rows(bot, "SELECT count(*) FROM messages WHERE text = :text", text=FACT) == [(1,)]

    days.move_to(7)
    wait_until(lambda: digests(bot, GENERAL)[0][1] == "condensed", what="the digest of day 0 to be condensed")
    assert f"condensed: {FACT}" in digests(bot, GENERAL)[0][2]
    assert rows(bot, "SELECT count(*) FROM messages WHERE text = :text", text=FACT) == [(1,)]

    days.move_to(15)
    day_1 = f"{days.day_0 + DAY:.6f}"
    # Each channel's old days are deleted in a step of their own (#secret-room's after its digest): all are awaited.
    wait_until(lambda: rows(bot, "SELECT count(*) FROM messages WHERE ts < :ts", ts=day_1) == [(0,)] and not rows(
        bot, "SELECT kind FROM search_docs WHERE text LIKE '%blue flowerpot%' AND kind = 'message'"
    ), what="the raw text of day 0 to be deleted in both channels, from the search index too")
    assert "messages" not in tables_holding(bot, "blue flowerpot")
    assert not tables_holding(bot, CANARY) & {"messages"}

    assert rows(bot, "SELECT content FROM memos WHERE removed_at IS NULL") == [(MEMO,)]  # memos stay
    prompt, results = ask(days, slack, llm, "where is the spare key?")
    assert f"- [{day0}] condensed: {FACT}" in prompt  # digests still reach the prompt
    [result] = results
    assert f"- [{day0}] condensed: {FACT}" in result  # recall finds it through the digest, with its date
    assert digests(bot, GENERAL)[0][0] == day0

    _, results = ask(days, slack, llm, "any party plans?")
    assert results and CANARY not in results[0]
    only_the_secret_room_saw_the_canary(llm)
    assert bot.stop() == 0


PLANS = "CPLANS"
PLAN = "canary-plans surprise party for Bob on Friday"


def test_a_channel_turned_private_takes_its_memories_and_digests_out_of_every_other_conversation(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.5
    days = Days(bot, slack)
    bot.start()

    days.post(GENERAL, BOB, FACT)
    wait_until(  # read before anything of #plans: #general's memory never had its words in sight
        lambda: rows(bot, "SELECT scope FROM memories WHERE scope = :scope AND term = 'long'", scope=f"channel:{GENERAL}"),
        what="#general's memory",
    )
    days.post(PLANS, ALICE, PLAN)
    days.move_to(3)
    wait_until(lambda: digests(bot, PLANS) and digests(bot, GENERAL), what="the digests of day 0")
    wait_until(
        lambda: any("canary-plans" in bullets for (bullets,) in rows(bot, "SELECT bullets FROM memories WHERE scope = 'workspace'")),
        what="the workspace memory to hold what #plans said",
    )
    prompt, results = ask(days, slack, llm, "any party plans?")
    assert "canary-plans" in prompt  # while #plans is public, #general sees its news...
    assert "canary-plans" in results[0]  # ...and recall finds its digest

    slack.convert_to_private(PLANS)
    wait_until(lambda: rows(bot, "SELECT audience FROM digests WHERE channel_id = :channel", channel=PLANS) == [(PLANS,)], what="the digest narrowed")
    assert {a for (a,) in rows(bot, "SELECT audience FROM memories WHERE scope LIKE :scope", scope=f"channel:{PLANS}")} == {PLANS}
    wait_until(
        lambda: (workspace := rows(bot, "SELECT bullets FROM memories WHERE scope = 'workspace' AND term = 'long'"))
        and "canary-plans" not in workspace[0][0]
        and "blue flowerpot" in workspace[0][0],
        what="the workspace memory made again from #general alone",
    )
    seen = len(llm.requests)
    prompt, results = ask(days, slack, llm, "any party plans?")
    assert "canary-plans" not in prompt and "canary-plans" not in results[0]
    for request in llm.requests[seen:]:
        if not (is_memory_request(request) or is_digest_request(request)):
            assert "canary-plans" not in prompt_text(request)
    assert bot.stop() == 0
