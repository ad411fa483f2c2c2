"""The playground's conversations and people, with ids Slack never gives (Slack's are upper-case letters and digits)."""

from __future__ import annotations

import unicodedata

from myao2.domain.conversation import Channel, ChannelKind

PREFIX = "play:"
"""Starts every playground id: a colon and lower case never occur in a Slack id."""

ROOMS: tuple[Channel, ...] = (
    Channel(f"{PREFIX}general", "general", ChannelKind.PUBLIC),
    Channel(f"{PREFIX}random", "random", ChannelKind.PUBLIC),
    Channel(f"{PREFIX}secret", "secret", ChannelKind.PRIVATE),
    Channel(f"{PREFIX}dm", "dm", ChannelKind.IM),
)
"""A few local channels, one of them private, and a DM with the bot."""

BOT_USER_ID = f"{PREFIX}bot"
MAX_NAME_LENGTH = 40


def room(conversation_id: str) -> Channel | None:
    """The playground conversation with this id, or None."""
    return next((channel for channel in ROOMS if channel.id == conversation_id), None)


def person_id(name: str) -> str:
    """The user id of whoever speaks under `name` in the playground (the same name, the same person)."""
    return PREFIX + clean_name(name).casefold()


def person_name(user_id: str) -> str:
    """The name behind a playground user id."""
    return user_id.removeprefix(PREFIX)


def clean_name(name: str) -> str:
    """`name` as people are told apart by it: NFKC-normalised, spaces squeezed."""
    return " ".join(unicodedata.normalize("NFKC", name).split())
