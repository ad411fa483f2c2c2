"""The bot process storing in PostgreSQL (`memory.database_url`) instead of its SQLite file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.conftest import ALICE, GENERAL, BotProcess, wait_until
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack
from tests.postgres import PostgresServer


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    with postgres.database(migrated=False) as url:  # the bot migrates it
        yield url


def rows(url: str, query: str) -> list[tuple[object, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()


def replies_to(slack: FakeSlack, ts: str) -> list[str]:
    return [p["text"] for p in slack.posted if p.get("thread_ts") == ts]


def ready(bot: BotProcess) -> dict:
    """/ready's JSON, also when it answers 503 (not ready yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}/ready", timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code != 503:
            raise
        return json.loads(error.read())


def test_a_mention_is_answered_once_and_its_memo_and_messages_are_stored_in_postgresql(
    bot: BotProcess, slack: FakeSlack, llm, database: str
) -> None:
    bot.settings["memory.database_url"] = database
    bot.start()
    assert wait_until(lambda: ready(bot)["ready"], what="/ready")

    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "alice-ramen", "content": "Alice loves ramen", "priority": 4, "tags": ["food"]})]),
        Text("Noted, you love ramen!"),
    )
    first = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> remember that I love ramen")
    slack.wait_for(lambda: replies_to(slack, first), what="the reply")
    assert replies_to(slack, first) == ["Noted, you love ramen!"]
    assert rows(database, "SELECT name, content, tags, channel_id, user_id FROM memos") == [
        ("alice-ramen", "Alice loves ramen", '["food"]', GENERAL, ALICE)
    ]
    assert wait_until(lambda: rows(database, "SELECT ts, answer_ts FROM claims WHERE settled_at IS NOT NULL"), what="the settled claim")
    assert bot.stop() == 0
    assert not (bot.tmp_path / "data").exists() and not bot.database.exists()  # nothing went to an SQLite file

    bot.start()  # the same database again: the first mention is not answered twice
    llm.script(Text("You love ramen."))
    second = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what do I love?")
    slack.wait_for(lambda: replies_to(slack, second), what="the second reply")
    assert "Alice loves ramen" in json.dumps(llm.requests[-1]["messages"], ensure_ascii=False)
    assert replies_to(slack, first) == ["Noted, you love ramen!"]
    assert replies_to(slack, second) == ["You love ramen."]
    stored = [t for (t,) in rows(database, "SELECT text FROM messages ORDER BY posted_at, ts")]
    assert stored[0].endswith("remember that I love ramen") and "Noted, you love ramen!" in stored
    assert bot.stop() == 0
