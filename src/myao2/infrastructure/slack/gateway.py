"""The Slack Web API as the bot's `ChatPlatform`: posting, reactions, people, channels and history."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry import HttpRequest, HttpResponse, RetryState
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, History, Person
from myao2.domain.ports import ConversationClosed, ConversationHidden
from myao2.infrastructure.slack import translate

logger = logging.getLogger(__name__)

T = TypeVar("T")

RATE_LIMIT_RETRIES = 5
CONNECTION_RETRIES = 2
PAGE_SIZE = 200
MICROSECOND = Decimal("0.000001")
WEB_API_TIMEOUT_SECONDS = 30  # slack_sdk's default
MEMBER_CHANNEL_TYPES = "public_channel,private_channel,mpim,im"
RETRY_DELAYS = (0.5, 1.0, 2.0)
"""Waits (seconds, with jitter) before retrying a Web API call that failed for a passing reason."""
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"})
CLOSED_ERRORS = frozenset(
    {"is_archived", "channel_is_archived", "channel_not_found", "not_in_channel", "restricted_action",
     "restricted_action_read_only_channel", "restricted_action_thread_locked",
     "restricted_action_non_threadable_channel", "restricted_action_thread_only_channel", "thread_not_found"}
)
"""Errors of a post meaning the conversation takes none from the bot now (`ConversationClosed`): archived, gone, the
bot out of it, a workspace or channel setting (read-only, a locked thread) keeping the bot from posting there, or the
thread gone (its parent deleted before it had a reply: the person took the message answered back)."""
ANSWER_EVENT = "myao2_answer"
"""The message metadata event type that marks a post as the bot's answer to a message."""
NOT_RESENT = frozenset({"chat.postMessage", "chat.startStream", "chat.appendStream", "chat.stopStream"})
"""Web API methods whose every call shows something more (a post, a stream, its text, its end): the client never
sends one again after its connection failed once it may have reached Slack (see `make_web_client`)."""
CALL_FAILURES = (SlackClientError, aiohttp.ClientError, TimeoutError)
"""What a failed Web API call raises; for a call sent, whether Slack acted is known only when it answered."""
OUTSIDER = frozenset({"outsider"})
"""The ids naming the organisation of someone read as of another: a guest of the workspace (`translate.is_guest`),
or someone Slack will not show the bot (users.info's `user_not_visible`) or does not know (`user_not_found`), as
someone of another organisation may be hidden from it (the safe side). None is the bot's."""
AUTH_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"})
BOT_SCOPES = (
    "app_mentions:read, chat:write, reactions:write, users:read, "
    "channels:read, groups:read, im:read, mpim:read, "
    "channels:history, groups:history, im:history, mpim:history"
)


MARKDOWN_TEXT_LIMIT = 12_000
"""The most characters of `markdown_text` one Web API call takes (Slack answers msg_too_long beyond)."""


def message_text(text: str) -> dict[str, str]:
    """The argument carrying a bot message's `text` (chat.postMessage, chat.update): `markdown_text`, standard
    Markdown as a stream renders it, so an answer shows alike however it is published; a text longer than that
    takes (an answer may run to 39,000 characters) as `text`, Slack's mrkdwn, which a message keeps 40,000 of."""
    return {"markdown_text": text} if len(text) <= MARKDOWN_TEXT_LIMIT else {"text": text}


def answer_metadata(answering: str) -> dict[str, Any]:
    """The message metadata that marks a post as the bot's answer to message `answering`."""
    return {"event_type": ANSWER_EVENT, "event_payload": {"answers": answering}}


class SlackAuthError(Exception):
    """Slack refused the bot token; the message tells what to set (and never contains the token)."""


def make_web_client(
    token: str | None, base_url: str = "https://slack.com/api/", session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """A Web API client for `base_url` that waits out rate limits and retries failed connections.

    A call of `NOT_RESENT` is sent again only when its connection could not be opened: one that
    dropped may have dropped after Slack acted, and sent again it would post (or stream) twice.
    Its caller finds out what landed instead (`SlackGateway.post`, `SlackReplyPublisher`).

    Without `session`, slack_sdk opens a new session (and connection) for every call;
    pass one (see `web_session`) to keep connections alive between calls.
    """
    return AsyncWebClient(
        token=token,
        base_url=base_url.rstrip("/") + "/",  # urljoin drops a last segment without the slash
        session=session,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES),  # a 429: Slack did nothing
            _ConnectionRetry(max_retry_count=CONNECTION_RETRIES),
        ],
    )


class _ConnectionRetry(AsyncConnectionErrorRetryHandler):
    """slack_sdk's retry of a call whose connection failed, but for a call of `NOT_RESENT` that may have reached
    Slack: only a connection that was never opened is certain to have carried nothing."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if request.url.rsplit("/", 1)[-1] in NOT_RESENT and not isinstance(error, aiohttp.ClientConnectorError):
            return False
        return await super()._can_retry_async(state=state, request=request, response=response, error=error)


def web_session() -> aiohttp.ClientSession:
    """An HTTP session for `make_web_client`, with slack_sdk's per-call timeout; call inside the event loop.

    A connection that Slack closed while idle fails the next call with a connection
    error, which the client's retry handler retries (but for a call of `NOT_RESENT`).
    Calls carry the token: no cookie is kept, which spares every call the cookie jar's work.
    """
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=WEB_API_TIMEOUT_SECONDS), cookie_jar=aiohttp.DummyCookieJar()
    )


class SlackGateway:
    """`ChatPlatform` over an `AsyncWebClient`; people are cached for `ttl` seconds of `clock`."""

    def __init__(
        self, client: AsyncWebClient, ttl: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._clock = clock
        self._people: dict[str, tuple[float, Person]] = {}  # user id -> (expiry, person)
        self._lookups: dict[str, asyncio.Future[Person]] = {}
        self._bot_id: str | None = None
        self._organisation: frozenset[str] = frozenset()
        """The ids naming the bot's organisation (`translate.bot_organisation_ids`), once `auth` asked."""
        self._organisations: dict[str, frozenset[str]] = {}
        """Each person looked up, by user id: the ids naming their organisation (`translate.organisation_ids`)."""
        self._teams: dict[str, str] = {}
        """Each person looked up, by user id: their workspace (users.info's team_id)."""
        self._group_members: dict[str, list[str]] = {}
        """Each group DM asked about, by id: its people (they never change; whether one is a guest may)."""

    async def auth(self) -> BotIdentity:
        """Who the bot is (auth.test); raises `SlackAuthError` when the token is refused."""
        try:
            response = await self._client.auth_test()
        except SlackApiError as exc:
            error = error_code(exc)
            if error in AUTH_ERRORS:
                raise SlackAuthError(_auth_help(error)) from None
            raise
        self._bot_id = response.get("bot_id")
        self._organisation = translate.bot_organisation_ids(response.data)
        return BotIdentity(
            user_id=response["user_id"], bot_id=self._bot_id, team_id=response.get("team_id")
        )

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        """Post a message (`message_text`); an answer (`answering` set) is marked with metadata and retried safely.

        A post that failed may still have landed (a 5xx after Slack stored it), so an
        answer is posted again only while `answer_ts` does not find it; other posts are
        not retried.
        """
        arguments: dict[str, Any] = {"channel": channel_id, **message_text(text), "thread_ts": thread_ts}
        if answering is None:
            return (await self._client.chat_postMessage(**arguments))["ts"]
        arguments["metadata"] = answer_metadata(answering)

        async def send() -> str:
            return (await self._client.chat_postMessage(**arguments))["ts"]

        try:
            return await retrying(
                "chat.postMessage", send, landed=lambda: self.answer_ts(channel_id, answering, thread_ts)
            )
        except SlackApiError as exc:
            raise closed_or(exc) from None

    async def answer_ts(self, channel_id: str, ts: str, thread_ts: str | None) -> str | None:
        """The bot's post marked as the answer to `ts`, searched after `ts` in the thread or the channel."""
        async for raw in self._own_posts_after(channel_id, ts, thread_ts):
            if _answered(raw) == ts:
                return str(raw["ts"])
        return None

    async def posted_text(self, channel_id: str, ts: str, thread_ts: str | None) -> str | None:
        """The text of the bot's message `ts` in the thread `thread_ts` (None: the channel) as Slack shows it now;
        None when it is not there."""
        async for raw in self._own_posts_after(channel_id, _just_before(ts), thread_ts, through=ts):
            if raw["ts"] == ts:
                return translate.as_sent(raw)
        return None

    async def unmarked_posts(self, channel_id: str, ts: str, thread_ts: str | None) -> dict[str, str]:
        """The bot's posts after `ts` in the thread or the channel marked as no message's answer, oldest first, ts to
        text."""
        unmarked = [raw async for raw in self._own_posts_after(channel_id, ts, thread_ts) if _answered(raw) is None]
        return {str(raw["ts"]): translate.as_sent(raw) for raw in sorted(unmarked, key=lambda raw: Decimal(raw["ts"]))}

    async def _own_posts_after(
        self, channel_id: str, ts: str, thread_ts: str | None, *, through: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The bot's messages after `ts` (up to `through`, inclusive) in the thread `thread_ts` (None: the
        channel), with their metadata; `ConversationClosed` when Slack answers that the bot is out of the
        conversation or it is gone."""
        arguments: dict[str, Any] = {"channel": channel_id, "oldest": ts, "limit": PAGE_SIZE}
        if through is not None:
            arguments |= {"latest": through, "inclusive": True}
        if thread_ts:
            arguments["ts"] = thread_ts
            fetch = self._client.conversations_replies
        else:
            fetch = self._client.conversations_history
        try:
            response = await retrying("answer lookup", lambda: fetch(**arguments, include_all_metadata=True))
            async for page in pages(response):
                for raw in page["messages"]:
                    if raw.get("bot_id") == self._bot_id:
                        yield raw
        except SlackApiError as exc:  # the bot can read nothing there now: no answer can be posted either
            raise closed_or(exc) from None

    async def react(self, channel_id: str, ts: str, emoji: str) -> None:
        """Add a reaction; failures are only logged, a reaction being a courtesy."""
        try:
            await retrying(
                "reactions.add",
                lambda: self._client.reactions_add(channel=channel_id, timestamp=ts, name=emoji.strip(":")),
            )
        except SlackApiError as exc:
            error = error_code(exc)
            if error != "already_reacted":
                logger.warning("could not react :%s: to %s/%s: %s", emoji, channel_id, ts, error)
        except CALL_FAILURES as exc:
            logger.warning("could not react :%s: to %s/%s: %r", emoji, channel_id, ts, exc)

    async def person(self, user_id: str) -> Person:
        """Who a user id is; bot ids (B…), unknown users and those Slack will not show the bot are named by their id.

        Concurrent lookups of one id share a single users.info request.
        """
        if user_id.startswith("B"):
            return Person(user_id=user_id, display_name=user_id, is_bot=True)
        cached = self._people.get(user_id)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        lookup = self._lookups.get(user_id)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up(user_id))
            self._lookups[user_id] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(user_id, None))
        return await asyncio.shield(lookup)

    async def workspace_of(self, user_id: str) -> str | None:
        """The workspace (team id) person `user_id` belongs to, as users.info tells it; None when it does not."""
        await self.person(user_id)
        return self._teams.get(user_id)

    async def channel(self, channel_id: str) -> Channel:
        try:
            response = await retrying(
                "conversations.info", lambda: self._client.conversations_info(channel=channel_id)
            )
        except SlackApiError as exc:
            if error_code(exc) == "channel_not_found":  # Slack's answer for a private channel the bot is not in
                raise ConversationHidden(channel_id) from None
            raise
        return await self._to_channel(response["channel"])

    async def member_channels(self) -> list[Channel]:
        """Every unarchived conversation the bot is in; a DM is named after the other person."""
        response = await self._client.users_conversations(
            types=MEMBER_CHANNEL_TYPES, exclude_archived=True, limit=PAGE_SIZE
        )
        listed = [info async for page in pages(response) for info in page["channels"]]
        return [await self._to_channel(info, listed=True) for info in listed]

    async def fetch_history(self, channel_id: str, oldest: str, limit: int) -> History:
        """Spoken messages after `oldest`, the replies posted then in threads started earlier included.

        Oldest first, one per ts, the newest `limit` when there are more; the span
        returned in full shrinks to what was kept when messages were cut. Threads are
        found from their parents' `latest_reply` among the top-level messages of the
        history pages the span needs (the newest `PAGE_SIZE` at least: a quiet channel
        costs one call), and of each only the replies that may be kept are read.
        """
        listed = await self._top_level(channel_id, oldest, limit)
        in_span = [raw for raw in listed if Decimal(raw["ts"]) > Decimal(oldest)]
        raws = {raw["ts"]: raw for raw in in_span[:limit]}
        complete_after = oldest if len(in_span) <= limit else _just_before(in_span[limit - 1]["ts"])
        threads = sorted((raw for raw in listed if raw.get("reply_count")), key=_latest_reply, reverse=True)
        for parent in threads:
            if _latest_reply(parent) <= Decimal(complete_after):
                continue  # nothing to keep was posted there (a later reply counts at the next sync)
            replies, after = await self._newest_replies(channel_id, parent, complete_after, limit)
            raws.update((raw["ts"], raw) for raw in replies)
            complete_after = _cut(raws, limit, max(complete_after, after, key=Decimal))
        return await self._history(channel_id, raws, limit, complete_after, frozenset(raw["ts"] for raw in listed))

    async def fetch_thread(self, channel_id: str, thread_ts: str, oldest: str, limit: int) -> History:
        """The replies of thread `thread_ts` posted after `oldest`, oldest first, the newest `limit` when there are
        more, read as `fetch_history` reads a thread; a history of that thread alone (not of the top level). A thread
        Slack does not find (its parent and replies deleted) has no reply."""
        try:
            replies, after = await self._newest_replies(channel_id, {"ts": thread_ts}, oldest, limit)
        except SlackApiError as exc:
            if error_code(exc) != "thread_not_found":
                raise
            replies, after = [], oldest
        raws = {raw["ts"]: raw for raw in replies}
        complete_after = _cut(raws, limit, after)
        return await self._history(channel_id, raws, limit, complete_after, frozenset({thread_ts}), top_level=False)

    async def _history(
        self,
        channel_id: str,
        raws: dict[str, dict[str, Any]],
        limit: int,
        complete_after: str,
        threads: frozenset[str],
        top_level: bool = True,
    ) -> History:
        """The newest `limit` spoken messages of `raws` (ts to message), oldest first, named after their authors."""
        spoken = sorted(
            (raw for raw in raws.values() if raw.get("subtype") in translate.SPOKEN_SUBTYPES),
            key=lambda raw: Decimal(raw["ts"]),
        )[-limit:]
        user_ids = {raw["user"] for raw in spoken if raw.get("user")}
        people = {p.user_id: p for p in await asyncio.gather(*map(self.person, user_ids))}
        return History(
            channel_id=channel_id,
            messages=[translate.to_message(raw, channel_id, _author_name(raw, people)) for raw in spoken],
            complete_after=complete_after,
            threads=threads,
            top_level=top_level,
        )

    async def _top_level(self, channel_id: str, oldest: str, limit: int) -> list[dict[str, Any]]:
        """The channel's top-level messages, newest first, page by page until the span is read: those after `oldest`
        (up to one more than `limit`) and those before it on the pages read, whose `latest_reply` tells which
        threads have new replies."""
        found: list[dict[str, Any]] = []
        in_span = 0
        response = await retrying(
            "conversations.history",
            lambda: self._client.conversations_history(channel=channel_id, limit=PAGE_SIZE),
        )
        async for page in pages(response):
            for raw in page["messages"]:
                found.append(raw)
                in_span += Decimal(raw["ts"]) > Decimal(oldest)
            if in_span > limit or in_span < len(found):
                break
        return found

    async def _newest_replies(
        self, channel_id: str, parent: dict[str, Any], after: str, keep: int
    ) -> tuple[list[dict[str, Any]], str]:
        """The newest replies of thread `parent` posted after `after`, at most about `keep` of them, and the ts
        after which every reply was returned.

        conversations.replies lists a thread oldest first: when more than `keep` were
        posted after `after`, spans ending at the newest reply are read, each widened or
        narrowed from what the one before held, instead of the whole thread.
        """
        replies, more = await self._replies(channel_id, parent["ts"], after, None, keep)
        if not more:
            return replies, after
        bottom = Decimal(after)  # more than are still wanted were posted after it
        ceiling = _latest_reply(parent) + MICROSECOND  # every reply at or after it is read
        step = _span_of(keep, replies)
        newest: list[dict[str, Any]] = []
        complete_after: str | None = None
        top: str | None = None  # what is read is before it (None: up to now)
        while len(newest) < keep and ceiling - bottom > MICROSECOND:
            low = max(ceiling - step, (bottom + ceiling) / 2).quantize(MICROSECOND)
            wanted = keep - len(newest)
            found, more = await self._replies(channel_id, parent["ts"], f"{low:.6f}", top, wanted)
            if more:
                bottom, step = low, _span_of(wanted, found)
                continue
            newest = found + newest
            step = (ceiling - low) * (keep - len(newest)) / len(found) if found else (ceiling - low) * 2
            complete_after, top, ceiling = f"{low:.6f}", f"{low + MICROSECOND:.6f}", low + MICROSECOND
        if complete_after is None:  # the thread grew faster than it was read: read it whole
            replies, _ = await self._replies(channel_id, parent["ts"], after, None, None)
            return replies, after
        return newest, complete_after

    async def _replies(
        self, channel_id: str, thread_ts: str, after: str, before: str | None, keep: int | None
    ) -> tuple[list[dict[str, Any]], bool]:
        """The replies of thread `thread_ts` posted after `after` (and before `before`), oldest first, and whether
        there were more than `keep`: then only the first `keep` and one more are read."""
        arguments: dict[str, Any] = {"channel": channel_id, "ts": thread_ts, "oldest": after, "limit": PAGE_SIZE}
        if before is not None:
            arguments["latest"] = before
        found: list[dict[str, Any]] = []
        response = await retrying("conversations.replies", lambda: self._client.conversations_replies(**arguments))
        async for page in pages(response):
            found.extend(raw for raw in page["messages"] if raw["ts"] != thread_ts)
            if keep is not None and len(found) > keep:
                return found, True
        return found, False

    async def _look_up(self, user_id: str) -> Person:
        try:
            response = await retrying("users.info", lambda: self._client.users_info(user=user_id))
            user = response["user"]
            person = translate.to_person(user)
            self._organisations[user_id] = OUTSIDER if translate.is_guest(user) else translate.organisation_ids(user)
            if team := user.get("team_id"):
                self._teams[user_id] = team
        except SlackApiError as exc:
            error = error_code(exc)
            if error not in ("user_not_found", "user_not_visible"):
                raise
            person = Person(user_id=user_id, display_name=user_id)
            self._organisations[user_id] = OUTSIDER
        self._people[user_id] = (self._clock() + self._ttl, person)
        return person

    async def _to_channel(self, info: dict[str, Any], *, listed: bool = False) -> Channel:
        """`translate.to_channel`, a DM named after the other person; a DM or group DM with someone of another
        organisation is `ext_shared` whether or not `info` says it (a listing's item may carry few fields).
        `listed`: `info` is an item of the bot's conversations listing (see `_group_outside`)."""
        channel = translate.to_channel(info)
        if channel.kind is ChannelKind.IM and info.get("user"):
            other = await self.person(info["user"])
            outside = channel.ext_shared or self._of_another_organisation(other.user_id)
            channel = dataclasses.replace(channel, name=other.display_name, ext_shared=outside)
        elif channel.kind is ChannelKind.MPIM and not channel.ext_shared:
            channel = dataclasses.replace(channel, ext_shared=await self._group_outside(channel.id, listed))
        return channel

    async def _group_outside(self, channel_id: str, listed: bool) -> bool:
        """Whether someone of another organisation is in group DM `channel_id`, its people as looked up now (`person`:
        one turned into a guest counts once their lookup is refreshed); its members are asked once. When they cannot
        be read, the lookup fails, to be asked again; in a listing (`listed`), which one conversation must not stop,
        it is logged and not taken for one (what is stored of it stays so for good)."""
        if not self._organisation:
            return False
        try:
            members = self._group_members.get(channel_id)
            if members is None:
                response = await retrying(
                    "conversations.members",
                    lambda: self._client.conversations_members(channel=channel_id, limit=PAGE_SIZE),
                )
                members = [user_id async for page in pages(response) for user_id in page["members"]]
                self._group_members[channel_id] = members
            await asyncio.gather(*map(self.person, members))
        except CALL_FAILURES as exc:
            if not listed:
                raise
            logger.warning("the people of group DM %s could not be read: %s", channel_id, describe(exc))
            return False
        return any(map(self._of_another_organisation, members))

    def _of_another_organisation(self, user_id: str) -> bool:
        """Whether person `user_id` (looked up) is of an organisation other than the bot's: no id naming theirs
        names the bot's. Not when either is unknown (`auth` not asked, or the person not looked up)."""
        theirs = self._organisations.get(user_id, frozenset())
        return bool(theirs and self._organisation) and theirs.isdisjoint(self._organisation)


async def retrying(
    what: str,
    call: Callable[[], Awaitable[T]],
    landed: Callable[[], Awaitable[T | None]] | None = None,
) -> T:
    """`call()`, retried with backoff while it fails for a passing reason (5xx, 429, a dropped connection).

    A 429 waits at least its Retry-After. Before each retry, `landed()` may return
    what the failed call achieved after all, which is then returned instead.
    """
    delays = iter(RETRY_DELAYS)
    while True:
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - classified just below
            delay = next(delays, None)
            if delay is None or not transient(exc):
                raise
            wait = max(delay * random.uniform(0.8, 1.2), _retry_after(exc))
            logger.warning("Slack %s failed (%s); retrying in %.1f s", what, describe(exc), wait)
        await asyncio.sleep(wait)
        if landed is not None and (found := await landed()) is not None:
            return found


async def pages(response: AsyncSlackResponse) -> AsyncIterator[AsyncSlackResponse]:
    """The pages of a paginated answer, the first one included. A page whose cursor Slack gave before, which would
    lead round the same pages for ever, fails the reading (`SlackClientError`), as a page Slack did not answer
    does: what was read is not all there is."""
    followed: set[str] = set()
    async for page in response:
        cursor = (page.get("response_metadata") or {}).get("next_cursor") or page.get("next_cursor")
        if cursor in followed:
            raise SlackClientError(f"Slack {response.api_url.rsplit('/', 1)[-1]} gave a cursor it gave before")
        if cursor:
            followed.add(cursor)
        yield page


def transient(exc: Exception) -> bool:
    """A failure worth retrying: Slack overloaded or rate limiting, or the connection failed."""
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        return status >= 500 or status == 429 or error_code(exc) in TRANSIENT_ERRORS
    return isinstance(exc, CALL_FAILURES)


def _retry_after(exc: Exception) -> float:
    """The Retry-After of a 429, in seconds; 0 otherwise."""
    if isinstance(exc, SlackApiError) and exc.response.status_code == 429:
        try:
            return float(exc.response.headers.get("Retry-After", 1))
        except (TypeError, ValueError):
            return 1.0
    return 0.0


def describe(exc: BaseException) -> str:
    """One line about a failure, without a traceback."""
    if isinstance(exc, SlackApiError):
        code = error_code(exc)
        status = getattr(exc.response, "status_code", None) or getattr(exc.response, "status", None)
        return f"Slack answered {code or 'an error'} (HTTP {status})"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def closed_or(exc: SlackApiError) -> Exception:
    """`ConversationClosed` when `exc` says the conversation takes no post from the bot, else `exc`."""
    code = error_code(exc)
    return ConversationClosed(code) if code in CLOSED_ERRORS else exc


def error_code(exc: SlackApiError) -> str | None:
    """The Web API error code; None when the body was not JSON (an HTML error page)."""
    data = exc.response.data
    return data.get("error") if isinstance(data, dict) else None


def _answered(raw: dict[str, Any]) -> str | None:
    """The ts of the message a post is marked as the answer to (see `answer_metadata`), or None."""
    metadata = raw.get("metadata") or {}
    if metadata.get("event_type") != ANSWER_EVENT:
        return None
    answers = (metadata.get("event_payload") or {}).get("answers")
    return answers if isinstance(answers, str) else None


def _author_name(raw: dict[str, Any], people: dict[str, Person]) -> str:
    """A person's display name, else the name an integration posted under, else its id."""
    person = people.get(raw.get("user") or "")
    if person is not None:
        return person.display_name
    return translate.posted_name(raw) or translate.author_of(raw) or "unknown"


def _latest_reply(parent: dict[str, Any]) -> Decimal:
    """The ts of the newest reply of thread `parent`; now when Slack does not say (any reply may be new)."""
    latest = parent.get("latest_reply")
    return Decimal(latest) if latest else Decimal(f"{time.time():.6f}")


def _span_of(wanted: int, replies: list[dict[str, Any]]) -> Decimal:
    """About the time `wanted` replies take, posted as often as `replies` were (a little less, to read no more)."""
    span = Decimal(replies[-1]["ts"]) - Decimal(replies[0]["ts"])
    return max(span * wanted * Decimal("0.9") / len(replies), MICROSECOND)


def _cut(raws: dict[str, dict[str, Any]], limit: int, complete_after: str) -> str:
    """The ts after which all of `raws` that are kept were read: past the oldest kept when more than `limit` of them
    are spoken (only the newest `limit` are kept), else `complete_after`."""
    spoken = sorted(Decimal(ts) for ts, raw in raws.items() if raw.get("subtype") in translate.SPOKEN_SUBTYPES)
    if len(spoken) <= limit:
        return complete_after
    return max(complete_after, _just_before(f"{spoken[-limit]:.6f}"), key=Decimal)


def _just_before(ts: str) -> str:
    """The ts one microsecond before `ts`: a span starting after it includes `ts`."""
    return f"{Decimal(ts) - Decimal('0.000001'):.6f}"


def _auth_help(error: str) -> str:
    return (
        f"Slack refused the bot token ({error}). Set SLACK_BOT_TOKEN to the app's Bot User OAuth Token "
        "(xoxb-…, under OAuth & Permissions once the app is installed to the workspace) and "
        "SLACK_APP_TOKEN to an app-level token (xapp-…) with the connections:write scope; "
        "reinstall the app if it was uninstalled or the token revoked. "
        f"The bot token needs these scopes: {BOT_SCOPES}."
    )
