"""Search end to end: the model calls search_memo and recall in the real bot process, on SQLite and PostgreSQL."""

from __future__ import annotations

import time

from datetime import date

from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess
from tests.e2e.test_mentions import replies_in
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

SECRET_ROOM = "GSECRET"
PLANS = "CPLANS"
WEEK = 7 * 24 * 3600

pytestmark = ON_BOTH_DATABASES


def tool_results(request: dict) -> list[str]:
    """The tool results the model was shown in a request."""
    return [m["content"] if isinstance(m["content"], str) else str(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def seed(bot: BotProcess, memos: list[tuple[str, str]] = (), messages: list[tuple[str, str, str, float]] = ()) -> None:
    """Store memos and messages (channel, user name, text, seconds ago) before the bot starts."""
    engine = open_database(bot.database_url)
    memo_store = SqlMemoStore(engine, SystemClock())
    for name, content in memos:
        memo_store.add(MemoDraft.create(name, content, 3), Origin(GENERAL, user_id=ALICE), "test")
    conversations = SqlConversationStore(engine)
    conversations.save_channel(Channel(GENERAL, "general", ChannelKind.PUBLIC))
    conversations.save_channel(Channel(SECRET_ROOM, "secret-room", ChannelKind.PRIVATE))
    now = time.time()
    for channel, user, text, ago in messages:
        conversations.save_message(Message(channel, f"{now - ago:.6f}", None, text, user))
    engine.dispose()


def test_the_model_finds_a_memo_with_search_memo_and_answers(bot: BotProcess, slack: FakeSlack, llm) -> None:
    seed(
        bot,
        memos=[
            ("alice-drink", "Alice drinks green tea every afternoon"),
            ("bob-drink", "Bob only drinks espresso"),
            ("alice-pet", "Alice has two cats"),
            ("office-move", "The office moves to Osaka in spring"),
        ],
    )
    bot.start()
    llm.script(
        ToolCalls([ToolCall("search_memo", {"query": "Alice's favourite beverage"})]),
        Text("You love green tea, Alice!"),
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what do I like to drink?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    assert [p["text"] for p in replies_in(slack, ts)] == ["You love green tea, Alice!"]
    results = tool_results(llm.requests[1])
    assert len(results) == 1
    lines = results[0].splitlines()
    assert lines[1].startswith("- alice-drink") and "green tea" in lines[1]
    assert bot.stop() == 0


def test_recall_finds_a_japanese_message_from_weeks_ago_by_paraphrase(bot: BotProcess, slack: FakeSlack, llm) -> None:
    seed(
        bot,
        messages=[
            (GENERAL, "Bob", "週末は家族で北海道へスキー旅行に行ってきたよ", 3 * WEEK),
            (GENERAL, "Alice", "来週の会議は水曜日に変更になりました", 3 * WEEK - 60),
            (GENERAL, "Bob", "新しいノートパソコンを買った", 2 * WEEK),
            (GENERAL, "Alice", "昨日のランチはカレーだった", WEEK),
        ],
    )
    bot.start()
    llm.script(
        ToolCalls([ToolCall("recall", {"query": "ボブが冬休みに出かけた旅先"})]),
        Text("Bob went skiing in Hokkaido!"),
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> where did Bob travel a few weeks ago?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    result = tool_results(llm.requests[1])[0]
    matches = [line for line in result.splitlines() if line.startswith("  → ")]
    # Found among the hits (the next message, embedded with it, may come first)
    assert any("北海道へスキー旅行" in match for match in matches[:2])
    assert bot.stop() == 0


def test_recall_never_finds_a_private_channel_message_from_a_public_channel(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(SECRET_ROOM, "secret-room", is_private=True, members=[ALICE, BOB])
    seed(
        bot,
        messages=[
            (SECRET_ROOM, "Alice", "秘密のプロジェクトの名前はフェニックスに決まった", WEEK),
            (GENERAL, "Bob", "プロジェクトの進み具合はどう？", WEEK - 60),
        ],
    )
    bot.start()
    llm.script(
        ToolCalls([ToolCall("recall", {"query": "秘密のプロジェクトの名前"})]),
        Text("I don't know of any secret project."),
        ToolCalls([ToolCall("recall", {"query": "秘密のプロジェクトの名前"})]),
        Text("It's Phoenix."),
    )
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> what is the secret project called?")
    slack.wait_for(lambda: replies_in(slack, public), what="the public reply")
    public_result = tool_results(llm.requests[1])[0]
    assert "フェニックス" not in public_result
    assert "プロジェクトの進み具合" in public_result

    secret = slack.post_message(SECRET_ROOM, ALICE, f"<@{slack.bot_user_id}> what was the project called again?")
    slack.wait_for(lambda: replies_in(slack, secret), what="the private reply")
    assert "フェニックス" in tool_results(llm.requests[3])[0]  # the same search inside the room finds it
    assert bot.stop() == 0


def test_recall_ranks_the_workspace_memory_elsewhere_only_by_what_may_be_read_there_while_not_narrowed_yet(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    # As after a crash between storing #plans as private and narrowing its memories (reconcile leaves a workspace
    # memory alone when nothing it cites was said in #plans): the workspace memory and the index still hold what
    # #plans said. A recall in #general ranked that memory first for those words, showing only #general's bullet.
    slack.add_channel(PLANS, "plans", is_private=True, members=[ALICE, BOB])
    engine = open_database(bot.database_url)
    conversations = SqlConversationStore(engine)
    conversations.save_channel(Channel(GENERAL, "general", ChannelKind.PUBLIC))
    conversations.save_channel(Channel(PLANS, "plans", ChannelKind.PUBLIC))  # public when the memories were made
    now = time.time()
    day = date.fromtimestamp(now - WEEK)
    said = [f"{now - WEEK + minute * 60:.6f}" for minute in range(3)]
    SqlMemoryStore(engine, SystemClock()).save(
        [
            Memory(
                Scope(),
                Term.LONG,
                WORKSPACE,
                (
                    Bullet(1, "canary-plans the rocket launch moves to Friday", day, (said[0],), heard_in=(PLANS,)),
                    Bullet(2, "Alice likes green tea", day, (said[1],), heard_in=(GENERAL,)),
                ),
            ),
            Memory(
                Scope(GENERAL),
                Term.LONG,
                WORKSPACE,
                (Bullet(1, "Bob builds rocket models", day, (said[2],), heard_in=(GENERAL,)),),
                label="#general",
            ),
        ]
    )
    conversations.set_channel_kind(PLANS, ChannelKind.PRIVATE)
    engine.dispose()
    bot.start()
    recall = ToolCalls([ToolCall("recall", {"query": "canary-plans rocket launch"})])
    llm.script(recall, Text("Bob builds rockets."), recall, Text("On Friday."))

    general = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> any news on the rocket launch?")
    slack.wait_for(lambda: replies_in(slack, general), what="the reply in #general")
    found = tool_results(llm.requests[1])[0]
    assert "canary-plans" not in found
    assert found.index("Bob builds rocket models") < found.index("Alice likes green tea")

    plans = slack.post_message(PLANS, ALICE, f"<@{slack.bot_user_id}> any news on the rocket launch?")
    slack.wait_for(lambda: replies_in(slack, plans), what="the reply in #plans")
    found = tool_results(llm.requests[3])[0]
    assert found.index("canary-plans the rocket launch moves to Friday") < found.index("Bob builds rocket models")
    assert bot.stop() == 0
