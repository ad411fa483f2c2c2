"""The playground's conversations and people, with ids Slack never gives (Slack's are upper-case letters and digits)."""

from __future__ import annotations

import re
import unicodedata

from myao2.domain.conversation import Channel, ChannelKind

PREFIX = "play-"
"""Starts every playground id: lower case and "-" never occur in a Slack id.

No ":" in the ids: stored keys (memory scopes "thread:C1:ts", ...) use it as a separator.
"""

ROOMS: tuple[Channel, ...] = (
    Channel(f"{PREFIX}general", "general", ChannelKind.PUBLIC),
    Channel(f"{PREFIX}random", "random", ChannelKind.PUBLIC),
    Channel(f"{PREFIX}secret", "secret", ChannelKind.PRIVATE),
    Channel(f"{PREFIX}dm", "dm", ChannelKind.IM),
)
"""A few local channels, one of them private, and a DM with the bot."""

BOT_USER_ID = f"{PREFIX}bot"
PERSON_PREFIX = f"{PREFIX}user-"
"""Starts the id of every person in the playground, so nobody's can be the bot's."""
UNSAFE = re.compile(r"[^\w.-]")
MAX_NAME_LENGTH = 40


def room(conversation_id: str) -> Channel | None:
    """The playground conversation with this id, or None."""
    return next((channel for channel in ROOMS if channel.id == conversation_id), None)


def person_id(name: str) -> str:
    """The user id of whoever speaks under `name` in the playground (the same name, the same person).

    Letters, digits, "_", "." and "-" are kept, in lower case; anything else becomes "_".
    """
    return PERSON_PREFIX + UNSAFE.sub("_", clean_name(name).casefold())


def person_name(user_id: str) -> str:
    """The name behind a playground user id."""
    return user_id.removeprefix(PERSON_PREFIX)


def clean_name(name: str) -> str:
    """`name` as people are told apart by it: NFKC-normalised, spaces squeezed."""
    return " ".join(unicodedata.normalize("NFKC", name).split())
