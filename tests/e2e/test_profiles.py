"""People's profiles end to end: the memory job learns facts from what people say, and prompts show
them where they may be seen: a fact learnt in a DM stays in that DM."""

from __future__ import annotations

import json

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess, wait_until
from tests.e2e.test_memory import ALICE_DM, answer_prompts, memory_bot  # noqa: F401 (a fixture)
from tests.e2e.test_mentions import replies_in
from tests.fakes.slack_server import FakeSlack


def facts(bot: BotProcess, user_id: str) -> dict[str, tuple[str | None, int]]:
    """The person's facts: text -> (the conversation it is private to, confirmations)."""
    rows = bot.rows("SELECT facts FROM profiles WHERE user_id = :user_id", user_id=user_id)
    row = rows[0] if rows else None
    return {} if row is None else {f["text"]: (f["audience"], f["confirmations"]) for f in json.loads(row[0])}


@ON_BOTH_DATABASES
def test_the_speakers_profiles_reach_the_prompt_and_a_dm_fact_stays_in_the_dm(
    memory_bot: BotProcess, slack: FakeSlack, llm  # noqa: F811
) -> None:
    bot = memory_bot.start()
    slack.post_message(GENERAL, ALICE, "I like spicy ramen")
    slack.post_message(GENERAL, BOB, "I like green tea")
    slack.post_message(ALICE_DM, ALICE, "I like canary-dm-cake, but keep it between us")
    wait_until(lambda: "likes canary-dm-cake" in facts(bot, ALICE), what="Alice's facts learnt")
    slack.post_message(GENERAL, ALICE, "I like spicy ramen")  # said again: a confirmation
    wait_until(
        lambda: facts(bot, ALICE)["likes spicy ramen"][1] == 1, what="the fact confirmed"
    )
    assert facts(bot, ALICE)["likes canary-dm-cake"] == (ALICE_DM, 0)
    assert facts(bot, ALICE)["likes spicy ramen"] == (None, 1)
    assert facts(bot, BOB) == {"likes green tea": (None, 0)}

    parent = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> lunch ideas for the two of us?")
    slack.wait_for(lambda: len(replies_in(slack, parent)) >= 1, what="the answer in the channel")
    prompt = next(p for p in answer_prompts(llm) if "lunch ideas" in p)
    assert "- Bob: likes green tea" in prompt
    assert "- Alice: likes spicy ramen" in prompt  # Alice spoke in the channel's recent messages
    assert "canary" not in prompt  # nothing learnt in the DM

    slack.post_message(ALICE_DM, ALICE, "what do I like?")
    slack.wait_for(lambda: len([p for p in slack.posted if p["channel"] == ALICE_DM]) >= 2, what="the DM answer")
    dm_prompt = next(p for p in answer_prompts(llm) if "what do I like?" in p)
    assert "- Alice: likes canary-dm-cake" in dm_prompt and "- Alice: likes spicy ramen" in dm_prompt
    assert "- Bob:" not in dm_prompt  # Bob is not in this conversation
    assert bot.stop() == 0
