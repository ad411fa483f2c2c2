"""What the application needs from the outside world, as Protocols."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import date, datetime
from typing import Protocol

from myao2.domain.activity import JudgmentOutcome, ModelCall, ReplyKind
from myao2.domain.conversation import BotIdentity, Channel, ChannelChanges, ChannelKind, History, Message, Person
from myao2.domain.judgment import ConversationKey
from myao2.domain.memory import Digest, Memory, PromptMemories, Scope, Term
from myao2.domain.profile import Profile
from myao2.domain.answers import PendingAnswer, Unfinished
from myao2.domain.memo import (
    Memo,
    MemoChanges,
    MemoDraft,
    MemoPage,
    MemoRevision,
    Origin,
    TagUsage,
)
from myao2.domain.visibility import Audience, Reader


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class MemoStore(Protocol):
    """Memos with their rules enforced atomically; every change writes one revision.

    `channel_id` scopes reads to what a conversation may see, and `origin` scopes a
    change to the conversation making it; None is a person's own view of every memo,
    where `audience` picks among memos of one name kept for different audiences.
    A name means, in a conversation, its own memo before the workspace's. An edit,
    removal or restore from a conversation of a memo seen more widely than it is refused
    (`wider_audience`); a change that lost a race with another writer is refused
    (`changed_meanwhile`). Refusals raise `MemoError`.
    """

    def add(self, draft: MemoDraft, origin: Origin, actor: str) -> Memo: ...

    def edit(
        self,
        name: str,
        changes: MemoChanges,
        origin: Origin | None,
        actor: str,
        *,
        audience: Audience | None = None,
        keep_pins: bool = False,
        revision: int | None = None,
        reader: Reader | None = None,
    ) -> Memo:
        """Change a memo; `keep_pins` refuses a pinned one even from a person's own view, and `revision` (the one
        the change was made from) one changed since (`changed_meanwhile`). From a person's own view made for
        conversation `reader` (when given), a new name and tags are bounded by what that conversation reads."""
        ...

    def remove(
        self,
        name: str,
        origin: Origin | None,
        actor: str,
        *,
        audience: Audience | None = None,
        keep_pins: bool = False,
    ) -> Memo: ...

    def restore(
        self,
        name: str,
        actor: str,
        *,
        origin: Origin | None = None,
        audience: Audience | None = None,
        reader: Reader | None = None,
    ) -> Memo:
        """Bring back the most recently removed memo `name` (kept for `audience`, if given) that the conversation
        of `origin`, else `reader`, may read (neither: a person's own view, which reads every memo)."""
        ...

    def narrow(self, channel_id: str, actor: str) -> list[Memo]:
        """Memos taken in `channel_id` for the workspace become that conversation's own.

        For a channel that became private or was shared outside the workspace; removed
        memos too, so a restore cannot widen one again. Each writes a revision; a live
        memo whose name the conversation already uses gets a numbered name. Returns them.
        """
        ...

    def get(self, name: str, reader: Reader | None, *, audience: Audience | None = None) -> Memo: ...

    def list(
        self,
        reader: Reader | None,
        *,
        tag: str | None = None,
        min_priority: int = 1,
        offset: int = 0,
        limit: int | None = None,
        removed: bool = False,
    ) -> MemoPage: ...

    def tags(self, reader: Reader | None) -> list[TagUsage]: ...

    def for_prompt(
        self, reader: Reader | None, *, min_priority: int, important: int, recent: int
    ) -> tuple[tuple[Memo, ...], tuple[Memo, ...], tuple[Memo, ...]]:
        """What a prompt in conversation `reader` shows of the memos it may see, read at once: the pinned ones (its rules),
        oldest pin first; those of the first `important` by priority (then newest first) of at least `min_priority`
        that are not pinned, in that order; and the newest `recent` of the others."""
        ...

    def history(self, name: str, *, audience: Audience | None = None, reader: Reader | None = None) -> list[MemoRevision]:
        """The revisions of the memos that have borne `name`, of those kept for `audience` and that conversation
        `reader` may read (when given), oldest first."""
        ...

    def pin(self, name: str, actor: str, *, audience: Audience | None = None) -> Memo:
        """Make a memo a rule: shown in every prompt that may see it, changed by no conversation."""
        ...

    def unpin(self, name: str, actor: str, *, audience: Audience | None = None) -> Memo: ...

    def pinned(self, reader: Reader | None) -> list[Memo]:
        """The pinned memos conversation `reader` may see (None: a person's own view), oldest pin first."""
        ...


class MemoryStore(Protocol):
    """The memories the memory job keeps, one per (scope, term); synchronous, run in a thread."""

    def get(self, scope: Scope, term: Term) -> Memory | None: ...

    def save(self, memories: Sequence[Memory], *, heard: bool = False, read_at: datetime | None = None) -> None:
        """Store these memories in one transaction: all of them or none.

        A stored memory's audience is never widened (one narrowed meanwhile stays narrowed). With
        `heard` (made from messages just read), a bullet not stored yet that cites a message no longer
        stored (its author forgotten meanwhile), or one edited since `read_at` (when the memories and the
        messages were read: the bullet may hold its old words), is left out.
        """
        ...

    def channels(self, term: Term) -> list[Memory]:
        """Every channel's memory of `term`."""
        ...

    def for_prompt(self, keys: Collection[tuple[Scope, Term]], news: Term | None) -> PromptMemories:
        """What a prompt shows of the memories, read at once: those stored under `keys` and, with `news`, every
        channel's memory of that term with the channel it is about; and the conversations not public (who may be
        shown what their bullets heard)."""
        ...

    def all(self) -> list[Memory]: ...

    def digests(self, channel_id: str | None = None) -> list[Digest]:
        """The digests of one conversation (or of all), by conversation then day."""
        ...

    def delete_digest(self, channel_id: str, day: date) -> None:
        """Delete the digest of that conversation and day, if any."""
        ...

    def save_digest(self, digest: Digest) -> None:
        """Store a day's digest, replacing the one of that conversation and day (never widening its audience)."""
        ...

    def narrow(self, channel_id: str) -> bool:
        """The channel stopped being the workspace's: what was absorbed from it becomes its own,
        and the workspace memory is dropped, to be made again without it. True when something was
        still kept for the workspace; nothing changes otherwise."""
        ...


class ProfileStore(Protocol):
    """The profiles of people the memory job keeps, one per person; synchronous, run in a thread."""

    def get(self, user_id: str) -> Profile | None: ...

    def many(self, user_ids: Iterable[str]) -> dict[str, Profile]:
        """The stored profiles of these people, by user id, each fact as narrow as the conversations it was
        learnt or heard in are now (`Profile.heard_by_readers`: a channel turned private whose narrowing has not
        reached it yet)."""
        ...

    def save(self, profiles: Sequence[Profile], *, heard: bool = False, read_at: datetime | None = None) -> None:
        """Store these profiles in one transaction: all of them or none; a fact stored for a conversation
        alone stays so (a save never widens what `narrow` did), and a fact not stored yet is kept only as wide
        as the conversations it was learnt or heard in are now. With `heard` (what was learnt from their
        messages), the profile of a person none of whose messages is stored any more (forgotten meanwhile)
        is left out, and a fact not stored as it is now loses the messages it cites that are deleted, or
        edited since `read_at` (when the profiles and the messages were read): it may hold their old words."""
        ...

    def narrow(self, channel_id: str) -> None:
        """The workspace facts learnt in the channel, or citing one of its messages, become its own."""
        ...

    def all(self) -> list[Profile]: ...


class ConversationStore(Protocol):
    """What the bot has seen in Slack: channels, people and messages (synchronous; run in a thread)."""

    def save_message(self, message: Message) -> bool:
        """Store a message unless one with its (channel, ts) is stored; True when it was new.

        A stored message changes only through `edit_message`, `delete_message` and
        `reconcile`, so a history fetched before an edit or a deletion cannot undo it.
        """
        ...

    def save_messages(self, messages: Sequence[Message]) -> None:
        """`save_message` for each of `messages`, all in one transaction; unlike it, tells not which were new."""
        ...

    def edit_message(self, channel_id: str, ts: str, text: str) -> bool:
        """Change a stored message's text; False if no such message is stored. A changed text is something new
        to judge: a judgment made on the message (as its conversation's newest) no longer stands."""
        ...

    def delete_message(self, channel_id: str, ts: str) -> None:
        """Delete a message for good: it is never stored again, whoever fetched it earlier.

        The digest made from it (of its day) goes too; an edit drops it as well, to be made again. A claim of it
        whose answer has not begun to show (`begin_showing`) is settled unanswered: the person took it back.
        """
        ...

    def reconcile(self, history: History, fetched_at: datetime) -> list[Message]:
        """Make the stored messages match a history fetch started at `fetched_at`; returns the new ones.

        New messages are stored, changed texts updated (an edit recorded after
        `fetched_at` wins) and the messages the fetch shows to be deleted deleted.
        """
        ...

    def thread_messages(self, channel_id: str, thread_ts: str, limit: int) -> list[Message]:
        """The newest `limit` messages of a thread (parent included), oldest first."""
        ...

    def channel_messages(self, channel_id: str, limit: int, since: datetime | None = None) -> list[Message]:
        """The newest `limit` top-level messages of a channel posted after `since`, oldest first."""
        ...

    def one_connection(self) -> AbstractContextManager[None]:
        """Within it (in this thread), the reads and writes of every store over this one's database share one
        connection: for a trip to a worker thread that reads many (a prompt's messages, memos, memories and
        profiles), or writes and reads (a claim and its channel). Each read still sees what was committed before
        it, and each write is committed as it would be on a connection of its own."""
        ...

    def writes_together(self) -> AbstractContextManager[None]:
        """Within it (in this thread), the writes of this store share one transaction, committed once at its end
        or not at all (if it raises, or the process dies first): for writes a crash must never part."""
        ...

    def messages_since(self, channel_id: str, since: datetime) -> list[Message]:
        """Every message of the channel (threads included) posted after `since`, oldest first."""
        ...

    def changes(self) -> dict[str, ChannelChanges]:
        """Per stored channel with messages (not one the bot has left): its newest message ts and newest edit."""
        ...

    def changed_messages(self, channel_id: str, after_ts: str, edited_after: datetime | None) -> list[Message]:
        """Messages of the channel (threads included) newer than `after_ts` or edited after `edited_after`
        (None: ever edited), oldest first."""
        ...

    def message_keys_before(self, before: datetime) -> list[tuple[str, str, str | None]]:
        """(channel id, ts, thread ts) of every stored message posted before `before`, by channel then posting order."""
        ...

    def messages_between(self, channel_id: str, start: datetime, end: datetime) -> list[Message]:
        """Every message of the channel (threads included) posted from `start` until before `end`, oldest first."""
        ...

    def active_threads(self, channel_id: str, since: datetime, user_id: str) -> set[str]:
        """The threads of a channel that `user_id` took part in and that have a message posted after `since`."""
        ...

    def replied_threads(self, since: datetime) -> list[tuple[str, str]]:
        """(channel id, thread ts) of the threads with a reply posted after `since`, the latest replied first."""
        ...

    def expire_messages(self, channel_id: str, ts: Sequence[str]) -> None:
        """Delete these messages' text for good (retention), keeping who said them when; none is stored again. The
        end and the tasks kept for an answer to one of them (`keep_ending`, `keep_tasks`) go too."""
        ...

    def newest_by_author(self) -> dict[tuple[str, str], str]:
        """(user id, channel id) -> the ts of that person's newest message there, for every person's
        (not a bot's) messages."""
        ...

    def messages_by(self, user_id: str, channel_ids: Iterable[str], after_ts: str, limit: int) -> list[Message]:
        """The oldest `limit` messages of `user_id` in these channels newer than `after_ts`, oldest first."""
        ...

    def save_channel(self, channel: Channel, as_of: datetime | None = None) -> None:
        """Store what Slack says of a channel, whether the bot is a member included.

        With `as_of` (when Slack said it), what was recorded since then stands: a leaving, a kind set by an
        event (a channel turned private while Slack was answering stays private), a newer lookup.
        """
        ...

    def set_channel_kind(self, channel_id: str, kind: ChannelKind) -> None:
        """Change the kind of a stored channel (it became private, or shared outside the workspace)."""
        ...

    def leave_channel(self, channel_id: str) -> None:
        """The bot left the channel or was removed: it is no longer judged nor caught up on.

        It counts as joined again once `save_channel` stores it as a member.
        """
        ...

    def channel_deleted(self, channel_id: str) -> None:
        """Slack deleted the channel: it counts as left for good, and is not asked about again."""
        ...

    def leave_channels_except(self, channel_ids: Iterable[str], as_of: datetime) -> None:
        """Every stored channel but these (all the bot was a member of at `as_of`) counts as left.

        A channel stored since `as_of` (say, just joined) is left alone.
        """
        ...

    def get_channel(self, channel_id: str) -> Channel | None: ...

    def channels(self) -> list[Channel]:
        """Every stored channel, those the bot has left included."""
        ...

    def active_channels(self, since: datetime) -> list[Channel]:
        """Stored channels the bot is a member of with a message posted after `since`."""
        ...

    def save_person(self, person: Person) -> None: ...

    def people(self, user_ids: Iterable[str] | None = None) -> dict[str, Person]:
        """Everyone stored, or only those of `user_ids` who are."""
        ...

    def save_identity(self, identity: BotIdentity) -> None:
        """Remember who the bot is in Slack, for what runs without Slack."""
        ...

    def identity(self) -> BotIdentity | None:
        """Who the bot was when it last connected; None if it never has."""
        ...

    def claim(
        self, channel_id: str, ts: str, retry_at: datetime | None = None, *, holder: str | None = None
    ) -> bool:
        """Mark a message as taken up for an answer; True only for the first claim (of any replica), and never for a
        message deleted (`delete_message`: its event may come after its deletion's).

        With `retry_at` the claim also starts the answer's first attempt: until it is
        settled, the answer is due again from `retry_at` on, for `holder` (the replica
        answering, see `LeaseStore`), and for the others once `holder`'s lease expired.
        """
        ...

    def next_attempt(
        self, channel_id: str, ts: str, attempts: int, retry_at: datetime, *, holder: str | None = None
    ) -> bool:
        """Start attempt `attempts + 1` at an unsettled answer for `holder`, due again from `retry_at`.

        False when the answer is settled, or another attempt started since `attempts` was read.
        """
        ...

    def release(self, channel_id: str, ts: str, now: datetime) -> None:
        """An attempt abandoned unfinished (at shutdown): not counted, and due again at `now` for any replica."""
        ...

    def holds(self, channel_id: str, ts: str, holder: str | None) -> bool:
        """Whether the answer is unsettled and still `holder`'s (not taken over by another replica meanwhile)."""
        ...

    def begin_showing(self, channel_id: str, ts: str, *, holder: str | None = None, inside: bool = False) -> bool:
        """An attempt is about to show the answer (its first words go to Slack next), before Slack tells its ts.

        False, and nothing recorded, when the answer is settled or no longer `holder`'s; with `inside` (it was
        written from what a conversation of the workspace reads), also when the conversation is no longer stored
        as one (`Reader.of`: shared outside since, say). The tasks an earlier attempt kept (`keep_tasks`) are
        dropped: they are of a stream this one does not show in.
        """
        ...

    def start_answer(self, channel_id: str, ts: str, answer_ts: str, *, holder: str | None = None) -> bool:
        """The answer shows as `answer_ts` but is still being written (streamed); not settled yet.

        False, and nothing recorded, when the answer is settled or no longer `holder`'s.
        """
        ...

    def unfinished_answer(self, channel_id: str, ts: str) -> Unfinished | None:
        """How far an answer that was never settled got (the bot stopped, or an attempt failed, meanwhile); None
        when it is settled (or the message was never claimed)."""
        ...

    def note_unheard_start(self, channel_id: str, ts: str, digest: str, *, holder: str | None = None) -> bool:
        """A call starting to show the answer went unanswered, and its message was not found at once: `digest`
        (`words_digest`) tells it by what the call was sent, for the next attempt (`Unfinished.unheard_start`).

        False, and nothing recorded, when the answer is settled or no longer `holder`'s.
        """
        ...

    def keep_ending(self, channel_id: str, ts: str, answer_ts: str, ending: str, *, holder: str | None = None) -> bool:
        """Stream `answer_ts` of the answer, left open (its end failed for a passing reason), lacks `ending`: the
        next attempt ends it with that (`Unfinished.ending`); kept until the answer is settled.

        False, and nothing recorded, when the answer is settled, no longer `holder`'s, or shows as another message.
        """
        ...

    def keep_tasks(self, channel_id: str, ts: str, tasks: dict[str, str], *, holder: str | None = None) -> bool:
        """The answer's stream shows `tasks` still running (call id to title; empty: none), kept until the answer is
        settled or another attempt begins to show it: the next attempt ending that stream marks them failed
        (`Unfinished.tasks`). False, and nothing recorded, when the answer is settled or no longer `holder`'s."""
        ...

    def showing_unheard_beside(self, channel_id: str, ts: str, thread_ts: str | None) -> set[str | None]:
        """The holders (None: nobody's) of the unsettled answers to messages other than `ts` in thread `thread_ts`
        (None: the channel's top level) that began to show with no ts recorded yet: a stream of theirs may be
        about to be recorded (another replica's, just started), or its ts never heard, as this one's may be."""
        ...

    def known_answers(self, channel_id: str, ts: Iterable[str]) -> set[str]:
        """Which of these messages are recorded as answers (settled or not) of messages of the channel."""
        ...

    def settle(self, channel_id: str, ts: str, answer_ts: str | None, *, holder: str | None = None) -> bool:
        """The answer is in Slack as `answer_ts` (None: given up, the conversation takes no post): the message is
        never taken up again.

        False, and nothing recorded, when the answer is no longer `holder`'s (another replica took it over).
        """
        ...

    def due_answers(self, now: datetime, since: datetime, *, holder: str | None = None) -> list[PendingAnswer]:
        """Answers to messages posted after `since` that are unsettled and due at `now`, oldest first.

        Only those `holder` may take up: its own, nobody's, and those of replicas gone (lease expired).
        """
        ...

    def next_due(self, now: datetime, since: datetime, *, holder: str | None = None) -> datetime | None:
        """When the next unsettled answer to a message posted after `since` that `holder` may take up falls due,
        after `now`; None: none will."""
        ...

    def claimed(self, channel_id: str, ts: Iterable[str]) -> set[str]:
        """Which of these messages were taken up for an answer."""
        ...

    def unclaimed_mentions(self, user_id: str, since: datetime, until: datetime) -> list[Message]:
        """Messages posted after `since` and by `until` that mention `user_id` (or are in a DM with it) and were
        never claimed.

        Channels the bot has left are left out.
        """
        ...


class AutonomyStore(Protocol):
    """What joining conversations unasked keeps in the shared database, so that a restart or another replica
    taking over picks up where it was (synchronous; run in a thread)."""

    def unjudged(self, channel_ids: Collection[str], since: datetime, now: datetime) -> list[Message]:
        """The newest message of each conversation of these channels with one posted after `since`, unless a
        judgment on that message stands at `now`; oldest first.

        A conversation is a thread, or a channel's top-level flow; the flow only when its newest
        message started no thread with a reply (answered there).
        """
        ...

    def is_newest(self, key: ConversationKey, ts: str) -> bool:
        """Whether message `ts` is the newest of conversation `key`, as `unjudged` tells it: still stored, nothing
        newer there, nor (in a top-level flow) a reply in its thread."""
        ...

    def counts_since(self, channel_ids: Collection[str], since: datetime) -> dict[str, int]:
        """How many messages each of these channels has posted after `since` (channels with none left out)."""
        ...

    def stand(self, key: ConversationKey, newest: Message, until: datetime, now: datetime) -> bool:
        """A judgment on `newest`, the newest message of conversation `key` as it was judged, stands until `until`
        (it replaces the conversation's last one); those no longer standing at `now` are forgotten.

        False, and nothing stands, when the message no longer reads as judged (edited meanwhile, or deleted):
        its new text is to be judged."""
        ...

    def drop(self, key: ConversationKey) -> None:
        """The conversation's judgment no longer stands: it is judged afresh."""
        ...

    def unasked_posts(self, since: datetime) -> dict[str, list[datetime]]:
        """When the bot posted unasked (as the activity log recorded it) after `since`, per channel, oldest first."""
        ...


class LeaseStore(Protocol):
    """Leases shared by the bot's replicas: each names something one replica does at a time.

    A replica's own lease is named after it and says it is alive; the claims it holds
    (see `ConversationStore.claim`) are retaken by another replica only once it expired.
    """

    def take(self, name: str, holder: str, now: datetime, until: datetime) -> bool:
        """Take (or keep) lease `name` for `holder` until `until`; False while another holder's is unexpired."""
        ...

    def renew(self, holder: str, now: datetime, until: datetime) -> set[str]:
        """Extend every unexpired lease of `holder` until `until`; forget the expired leases of every holder.

        Returns the replicas whose own lease it forgot: they are gone (one may have lived too briefly for
        anyone to have seen it alive).
        """
        ...

    def alive(self, now: datetime) -> set[str]:
        """The replicas whose own lease is unexpired at `now`."""
        ...

    def release(self, holder: str) -> None:
        """Give up every lease of `holder`, and the unsettled claims it holds, for another replica to take."""
        ...


class ConversationHidden(Exception):
    """The chat platform does not show a conversation to the bot: a private one it is not in, or one deleted."""


class ConversationClosed(Exception):
    """The chat platform takes no post from the bot in a conversation: archived, deleted, or the bot is out of it."""


class ChatPlatform(Protocol):
    """The chat service the bot lives in (Slack), as the use cases need it."""

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        """Post a message; returns its ts.

        With `answering` (the ts of the message answered) the post is marked as its
        answer, and a post that fails is retried only while `answer_ts` finds none.
        """
        ...

    async def answer_ts(self, channel_id: str, ts: str, thread_ts: str | None) -> str | None:
        """The ts of the bot's answer to message `ts`, posted in `thread_ts` (None: the channel), if any."""
        ...

    async def unmarked_posts(self, channel_id: str, ts: str, thread_ts: str | None) -> dict[str, str]:
        """The bot's messages after message `ts` in `thread_ts` (None: the channel) that are marked as no message's
        answer, oldest first, ts to text: among them a streamed answer whose ts the bot never heard."""
        ...

    async def react(self, channel_id: str, ts: str, emoji: str) -> None: ...

    async def person(self, user_id: str) -> Person:
        """Who a user id is (cached, refreshed now and then)."""
        ...

    async def channel(self, channel_id: str) -> Channel:
        """A conversation as the platform describes it now; `ConversationHidden` if it does not show it to the bot."""
        ...

    async def member_channels(self) -> list[Channel]:
        """Every conversation the bot is a member of."""
        ...

    async def fetch_history(self, channel_id: str, oldest: str, limit: int) -> History:
        """Messages posted after `oldest`, thread replies included, oldest first, at most `limit`."""
        ...

    async def fetch_thread(self, channel_id: str, thread_ts: str, oldest: str, limit: int) -> History:
        """The replies of one thread posted after `oldest`, oldest first, at most `limit` (the newest)."""
        ...


class ActivityLog(Protocol):
    """Records what the bot does, for `myao2 stats`: counts and timings, never text."""

    def model_call(self, call: ModelCall, at: datetime) -> None: ...

    def judgment(self, channel_id: str, outcome: JudgmentOutcome, confidence: float, at: datetime) -> None: ...

    def reply(
        self, channel_id: str, kind: ReplyKind, at: datetime, calls: Sequence[tuple[ModelCall, datetime]] = ()
    ) -> None:
        """A post of the bot's, with the model calls made for it (each with its time), in one transaction."""
        ...
