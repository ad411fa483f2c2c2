"""Who may read what: the one visibility rule for everything the bot keeps or shows.

Every piece of stored text (a memo, a message, a summary, a digest, a profile fact,
a search hit) belongs to an audience: the whole workspace, or one conversation.
Text from a public channel belongs to the workspace; text from a private channel,
a DM, a group DM or a channel shared outside the workspace belongs to that
conversation alone. A reader is a conversation (what a prompt, a tool result or a
refusal there may contain: a `Reader`) or a person's own view (`None`: the command
line, which sees everything). A channel shared outside the workspace (Slack Connect) reads only what is its own:
people of another organisation hear it; so does a conversation never stored, as nothing says who reads it. What
was said in a conversation the bot has left or been removed from is shown in no conversation until it joins again,
and what was said in one never stored counts as not public (`can_read_conversation`). Every reader of stored text
asks this module, and nothing else.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, replace

from myao2.domain.conversation import Channel, ChannelKind


@dataclass(frozen=True)
class Audience:
    """Who may read a piece of text: the workspace (`conversation_id` None) or one conversation."""

    conversation_id: str | None = None

    @classmethod
    def of(cls, channel_id: str | None, private: bool) -> Audience:
        """The audience of what is said in a conversation: its own if private, else the workspace's."""
        return cls(channel_id if private and channel_id else None)

    @property
    def is_workspace(self) -> bool:
        return self.conversation_id is None


WORKSPACE = Audience()

WORKSPACE_NAME = "workspace"
"""What a person writes to name the workspace where a conversation's id is asked for (`named_audience`)."""


def named_audience(name: str) -> Audience:
    """The audience a person names where a conversation's id is asked for (a `--conversation` option, a memo
    file's `conversation:`): `WORKSPACE_NAME` the workspace, any other word that conversation."""
    return WORKSPACE if name == WORKSPACE_NAME else Audience(name)


@dataclass(frozen=True)
class Reader:
    """A conversation stored text may be shown in (a prompt, a tool result, a refusal there).

    `outside` when people of another organisation read it (a channel shared outside the workspace, Slack Connect):
    it reads only what is its own (`readable_audiences`), nothing kept for the workspace and nothing said in another
    conversation, so that the bot tells outsiders nothing internal.
    """

    conversation_id: str
    outside: bool = False

    @classmethod
    def of(cls, conversation_id: str, stored: Channel | None) -> Reader:
        """Conversation `conversation_id` as a reader, `stored` it as the conversation store keeps it: outside for a
        channel shared outside the workspace and for a DM or group DM with people of another organisation
        (`Channel.ext_shared`); for one never stored (None: only an MCP client or a command names one) too, since
        nothing says who reads it (the safe side: it reads its own, nothing)."""
        outside = stored is None or stored.kind is ChannelKind.SHARED or stored.ext_shared
        return cls(conversation_id, outside)


WORKSPACE_VIEW = Reader("")
"""A reader that is no conversation: it sees what the whole workspace may read and nothing of any
conversation's own (e.g. an MCP client started without a conversation). No conversation has its id."""


def can_read(reader: Reader | None, audience: Audience) -> bool:
    """Whether text kept for `audience` may be shown in conversation `reader` (None: a person's own view)."""
    return reader is None or audience in readable_audiences(reader)


def can_read_from(
    reader: Reader | None,
    audience: Audience,
    said_in: str | None,
    stored: Channel | None = None,
    heard: Iterable[Audience] = (),
) -> bool:
    """Whether text kept for `audience`, taken from what was said in conversation `said_in` (None: of no one
    conversation, as the workspace memory; `stored` it as stored, None: never stored), may be shown in conversation
    `reader` (None: a person's own view, which sees everything).

    As `can_read`, and only when `reader` may read what was said in `said_in` (`can_read_conversation`), whatever
    audience the text still has (its narrowing may not have reached it yet). Nor does text written with the words
    of conversations in sight whose audiences now (`heard`) `reader` may not read: what a channel since turned
    private said, in the workspace memory or a profile, before the narrowing reaches it.
    """
    if reader is None:
        return True
    if not all(can_read(reader, a) for a in (audience, *heard)):
        return False
    return said_in is None or can_read_conversation(reader, said_in, stored)


def can_read_conversation(reader: Reader | None, conversation_id: str, stored: Channel | None) -> bool:
    """Whether what was said in conversation `conversation_id` may be shown in conversation `reader` (None: a
    person's own view, which sees everything), `stored` that conversation as stored (None: never stored): the one
    statement of this rule.

    Nothing of a conversation the bot has left or been removed from, until it joins again, its own included; what a
    conversation that keeps to itself said, only there; what a public channel said, where the workspace's text is
    read (`can_read`). One never stored counts as keeping to itself (the safe side): nothing it said reaches another
    conversation, whatever audience the text kept of it has.
    """
    if reader is None:
        return True
    own = conversation_id == reader.conversation_id
    if stored is None:
        return own
    return stored.is_member and (own or (not stored.is_private and can_read(reader, WORKSPACE)))


def may_know_of(reader: Reader | None, conversation: Channel) -> bool:
    """Whether conversation `reader` (None: a person's own view) may be told that `conversation` exists (a refusal
    naming it, say): where it could read what was said there, were the bot in it (`can_read_conversation`). Of one
    that keeps to itself, another conversation is told nothing: to it, it is as one the bot never saw."""
    return can_read_conversation(reader, conversation.id, replace(conversation, is_member=True))


def shows_its_own(conversation: Channel) -> bool:
    """Whether what was said in `conversation` may be shown there (`can_read_conversation`): not while the bot is
    out of it. What it remembers of it is kept for when it joins again."""
    return can_read_conversation(Reader.of(conversation.id, conversation), conversation.id, conversation)


def audience_of(conversation: Channel) -> Audience:
    """The audience of what is said in `conversation` (`ChannelKind.keeps_to_itself`)."""
    return Audience.of(conversation.id, conversation.is_private)


def not_public(channels: Iterable[Channel]) -> frozenset[str]:
    """The ids of those of `channels` that keep to themselves."""
    return frozenset(c.id for c in channels if c.is_private)


def heard_now(conversation_ids: Iterable[str], not_public: Container[str]) -> Iterator[Audience]:
    """The audiences now of conversations `conversation_ids`, `not_public` the ids of those that keep to themselves
    (`not_public`): the `heard` of `can_read_from` for text that records the conversations it heard."""
    return (Audience(c) if c in not_public else WORKSPACE for c in conversation_ids)


def readable_audiences(reader: Reader) -> tuple[Audience, ...]:
    """The audiences whose text conversation `reader` may see, nearest first: the one statement of this rule.

    Its own audience comes before the workspace: where a name is borne by a memo of
    each, the name means the conversation's own one there. A reader `outside` the
    workspace sees its own alone.
    """
    own = Audience(reader.conversation_id)
    return (own,) if reader.outside else (own, WORKSPACE)


def view_of(audience: Audience) -> tuple[Audience, ...]:
    """The audiences seen together with `audience` by its readers: itself, and the workspace.

    Limits that count what a conversation sees (names, tag kinds) apply to this set (for a channel shared outside,
    which sees its own alone, the stricter count).
    """
    return (WORKSPACE,) if audience.is_workspace else (audience, WORKSPACE)


def can_write(writer: Audience | None, audience: Audience) -> bool:
    """Whether a conversation whose audience is `writer` may change text kept for `audience`.

    Only when the result reaches exactly the people who heard the conversation: an
    edit from a DM of a workspace memo would carry the DM into every channel.
    `None` is a person's own view, which may change anything.
    """
    return writer is None or writer == audience


def feeds_workspace(audience: Audience) -> bool:
    """Whether text kept for `audience` may go into what the whole workspace reads (its memory)."""
    return audience.is_workspace


def shows_elsewhere(reader: Audience) -> bool:
    """Whether a conversation whose audience is `reader` is shown what happens in other channels.

    Only public channels are: a private conversation's prompt keeps to itself.
    """
    return reader.is_workspace


def narrowest(audiences: Iterable[Audience]) -> Audience | None:
    """The audience of text drawn from what was said to each of `audiences` (e.g. written by a model that
    read several conversations at once): the workspace when they all are it, else the one conversation
    among them; None when they are two conversations (nobody may read all of it)."""
    own = {a for a in audiences if not a.is_workspace}
    if len(own) > 1:
        return None
    return own.pop() if own else WORKSPACE


def may_hold(holder: Audience, heard: Iterable[Audience]) -> bool:
    """Whether text drawn from what was said to the `heard` audiences may be kept for `holder`: only when
    every reader of `holder` may read all of it."""
    audience = narrowest(heard)
    return audience is not None and (audience.is_workspace or audience == holder)
