"""Slack payloads to domain objects: the one place that reads Slack's message shapes.

Every text that enters here leaves as `clean_text`: a payload may carry lone
surrogates or NUL, which must never stop a store write or a prompt.
"""

from __future__ import annotations

from typing import Any

from myao2.domain.conversation import Channel, ChannelKind, Message, Person, clean_text, mentions_in

_KIND_BY_EVENT_CHANNEL_TYPE = {
    "channel": ChannelKind.PUBLIC,
    "group": ChannelKind.PRIVATE,
    "im": ChannelKind.IM,
    "mpim": ChannelKind.MPIM,
}

# Message subtypes that carry something a person (or another bot) said.
SPOKEN_SUBTYPES = frozenset({None, "thread_broadcast", "bot_message", "file_share", "me_message"})


def author_of(raw: dict[str, Any]) -> str | None:
    """The user id (or, for integrations, the bot id) that posted a raw message."""
    return raw.get("user") or raw.get("bot_id")


def posted_name(raw: dict[str, Any]) -> str | None:
    """The name a message carries itself (integrations and bots post under their own name)."""
    name = raw.get("username") or (raw.get("bot_profile") or {}).get("name")
    return clean_text(name) if name else None


def is_from_bot(raw: dict[str, Any]) -> bool:
    return bool(raw.get("bot_id")) or raw.get("subtype") == "bot_message"


def text_of(raw: dict[str, Any]) -> str:
    """The message text, with the names of shared files when there is no text."""
    text = raw.get("text") or ""
    files = [f.get("name") or f.get("title") or "file" for f in raw.get("files") or []]
    if files:
        text = (text + "\n" if text else "") + " ".join(f"[file: {name}]" for name in files)
    return clean_text(text)


def as_sent(raw: dict[str, Any]) -> str:
    """The bot's message text as it was sent: Slack shows `&`, `<` and `>` escaped (`&amp;`, `&lt;`, `&gt;`)."""
    text = str(raw.get("text") or "")
    return clean_text(text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def to_message(raw: dict[str, Any], channel_id: str, user_name: str) -> Message:
    """A stored-form message from a Slack message payload (event or history item)."""
    ts = raw["ts"]
    thread_ts = raw.get("thread_ts")
    text = text_of(raw)
    return Message(
        channel_id=channel_id,
        ts=ts,
        user_id=author_of(raw),
        text=text,
        user_name=clean_text(user_name),
        is_bot=is_from_bot(raw),
        thread_ts=thread_ts if thread_ts and thread_ts != ts else None,
        mentions=mentions_in(text),
    )


def kind_from_event(channel_type: str | None) -> ChannelKind | None:
    """The channel kind named by an event's `channel_type`, if it names one."""
    return _KIND_BY_EVENT_CHANNEL_TYPE.get(channel_type or "")


def to_channel(info: dict[str, Any]) -> Channel:
    """A channel from a `conversations.info` / `users.conversations` item.

    A channel shared with another organisation (`is_ext_shared`, or still pending as
    `is_pending_ext_shared`), public or private, is `SHARED`: people of another
    organisation read it. A DM or group DM with them stays one, `ext_shared`.
    """
    ext_shared = bool(info.get("is_ext_shared") or info.get("is_pending_ext_shared"))
    if info.get("is_im"):
        kind = ChannelKind.IM
    elif info.get("is_mpim"):
        kind = ChannelKind.MPIM
    elif ext_shared:
        kind = ChannelKind.SHARED
    elif info.get("is_private") or info.get("is_group"):
        kind = ChannelKind.PRIVATE
    else:
        kind = ChannelKind.PUBLIC
    name = info.get("name") or info.get("user") or info["id"]
    return Channel(
        id=info["id"],
        name=clean_text(name),
        kind=kind,
        is_member=info.get("is_member", True) is not False,
        ext_shared=ext_shared and kind in (ChannelKind.IM, ChannelKind.MPIM),
    )


def organisation_ids(user: dict[str, Any]) -> frozenset[str]:
    """The ids naming the organisation of a `users.info` user: their workspace (team) and, in an Enterprise Grid
    organisation, its id, which its workspaces share.

    Slack tells someone of another organisation (Slack Connect) only by these: none is the bot's
    (`bot_organisation_ids`)."""
    return _ids(user.get("team_id"), (user.get("enterprise_user") or {}).get("enterprise_id"))


def is_guest(user: dict[str, Any]) -> bool:
    """Whether a `users.info` user is a guest of their workspace (multi- or single-channel): they read only the
    channels they are invited to, though Slack names their organisation as the workspace's."""
    return bool(user.get("is_restricted") or user.get("is_ultra_restricted"))


def bot_organisation_ids(auth: dict[str, Any]) -> frozenset[str]:
    """The ids naming the bot's organisation, from its `auth.test` answer (as `organisation_ids`)."""
    return _ids(auth.get("team_id"), auth.get("enterprise_id"))


def _ids(*ids: object) -> frozenset[str]:
    return frozenset(i for i in ids if isinstance(i, str) and i)


def to_person(user: dict[str, Any]) -> Person:
    """A person from a `users.info` user: display name, else real name, else user name."""
    profile = user.get("profile") or {}
    name = (
        profile.get("display_name")
        or profile.get("real_name")
        or user.get("real_name")
        or user.get("name")
        or user["id"]
    )
    return Person(user_id=user["id"], display_name=clean_text(name), is_bot=bool(user.get("is_bot")))
