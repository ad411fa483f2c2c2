"""Broadcast mentions in the bot's own text notify nobody unless allowed."""

from __future__ import annotations

import pytest

from myao2.domain.conversation import neutralise_broadcasts

ZWSP = "\u200b"


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("<!channel> lunch!", f"@{ZWSP}channel lunch!"),
        ("<!here|here> and <!everyone>", f"@{ZWSP}here and @{ZWSP}everyone"),
        ("<!subteam^S0123ABC|@devs> look", f"@{ZWSP}devs look"),
        ("<!subteam^S0123ABC> look", f"@{ZWSP}team look"),
        ("<!group>", f"@{ZWSP}group"),
        ("plain @channel and @here!", f"plain @{ZWSP}channel and @{ZWSP}here!"),
        # Markdown's emphasis: the underscores are markup, the rendered text is a plain broadcast.
        ("_@here_ and __@channel__", f"_@{ZWSP}here_ and __@{ZWSP}channel__"),
    ],
)
def test_broadcasts_are_made_plain_text_that_notifies_nobody(text: str, safe: str) -> None:
    assert neutralise_broadcasts(text) == safe


@pytest.mark.parametrize(
    "text",
    [
        "hi <@U123> and <#C123|general>",
        "mail me at bob@here.example or team@channel.io",
        "<!date^1392734382^{date}|Feb 18>",
        "<https://example.com|a link>",
    ],
)
def test_everything_else_is_left_alone(text: str) -> None:
    assert neutralise_broadcasts(text) == text


def test_neutralising_twice_changes_nothing_more() -> None:
    once = neutralise_broadcasts("<!channel> @here")
    assert neutralise_broadcasts(once) == once
