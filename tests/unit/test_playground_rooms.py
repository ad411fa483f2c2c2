"""Playground ids: never a Slack id, never the bot's, and fit for every key the store builds from them."""

from __future__ import annotations

import re

from myao2.domain.memory import Scope
from myao2.infrastructure.playground.rooms import BOT_USER_ID, ROOMS, person_id

SLACK_ID = re.compile(r"[A-Z0-9]+")


def test_conversation_ids_are_not_slack_ids_and_make_memory_scopes() -> None:
    for channel in ROOMS:
        assert not SLACK_ID.fullmatch(channel.id)
        for scope in (Scope(channel.id), Scope(channel.id, "1700000000.000100")):
            assert Scope.from_key(scope.key) == scope


def test_a_person_is_told_apart_by_name_and_is_never_the_bot() -> None:
    assert person_id("Alice") == person_id(" alice ") == person_id("ＡＬＩＣＥ")
    assert person_id("Alice") != person_id("Bob")
    assert person_id("bot") != BOT_USER_ID
    assert ":" not in person_id("a:b c") and not SLACK_ID.fullmatch(person_id("U123"))
    assert person_id("みゃお") == "play-user-みゃお"
