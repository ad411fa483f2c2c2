"""``myao2 search`` and ``myao2 index sync|rebuild``: the bot's search, from a person's own view.

``--json`` prints the ranked ids, so an evaluation can drive the very search path the
bot's tools use. A search waits for no embedding backlog (see `SearchIndex.catch_up`);
``myao2 index sync`` works one off, with a progress bar on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TextIO

from myao2.application.context import format_message
from myao2.application.search import MemoHit, MessageHit, Search, SearchError, parse_before
from myao2.config import Config, ConfigError
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.search.setup import open_index

BAR_WIDTH = 30
WAITING_COUNTED = 10_000
"""The most documents waiting to be embedded a search counts, to say how many (a million may wait after an upgrade)."""

_ERRORS = {
    "blank_query": "the query is empty",
    "query_too_long": "the query is too long (at most {limit} characters)",
    "bad_limit": "--limit must be from 1 to {limit}",
    "unknown_channel": "no such channel",
}


def run_search_command(config: Config, args: argparse.Namespace) -> int:
    """`myao2 search` or `myao2 index ...`; 0 on success, 1 when the search is refused."""
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        memos = SqlMemoStore(engine, SystemClock())
        conversations = SqlConversationStore(engine)
        index = open_index(engine, config.search, memos, conversations)
        if args.command == "index" and args.index_command == "rebuild":
            count = index.rebuild(ProgressBar(sys.stderr))
            print(f"Re-indexed {count} documents.")
            return 0
        if args.command == "index":
            count = index.sync(ProgressBar(sys.stderr))
            print(f"Indexed {count} documents.")
            return 0
        status = _search(config, args, Search(index, memos, conversations))
        waiting = index.pending(at_most=WAITING_COUNTED)
        if waiting:
            counted = f"{waiting} or more" if waiting >= WAITING_COUNTED else str(waiting)
            print(
                f"myao2 search: {counted} documents wait to be embedded (found meanwhile by their keywords and any "
                "former vector); the running bot embeds them, or `myao2 index sync`",
                file=sys.stderr,
            )
        return status
    except SearchError as error:
        print(f"myao2 search: {_ERRORS[error.code].format(**error.params)}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()


def _search(config: Config, args: argparse.Namespace, search: Search) -> int:
    tz = config.persona.tzinfo
    before = _parse_before(args.before, config)
    channel = search.channel_named(args.channel, None) if args.channel else None
    memo_hits = [] if args.messages or channel else search.memos(args.query, None, before, args.limit)
    message_hits = [] if args.memos else search.messages(args.query, None, before, channel, args.limit)
    if args.json:
        print(json.dumps({"memos": [_memo_data(h) for h in memo_hits], "messages": [_message_data(h) for h in message_hits]}, ensure_ascii=False, indent=2))
        return 0
    if not args.messages and not channel:
        print("Memos:" if memo_hits else "No memos found.")
        for hit in memo_hits:
            print(f"  {hit.score:.3f}  {hit.memo.name}: {' '.join(hit.memo.content.split())}")
    if not args.memos:
        print("Messages:" if message_hits else "No messages found.")
        for hit in message_hits:
            name = hit.channel.name if hit.channel else hit.message.channel_id
            print(f"  {hit.score:.3f}  #{name} {format_message(hit.message, tz, {})}")
    return 0


def _parse_before(value: str | None, config: Config) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_before(value, config.persona.tzinfo)
    except SearchError:
        raise ConfigError(f"--before: not an ISO date or time (that UTC can hold): {value!r}") from None


def _memo_data(hit: MemoHit) -> dict[str, object]:
    return {"id": hit.memo.id, "name": hit.memo.name, "score": round(hit.score, 6), "content": hit.memo.content}


def _message_data(hit: MessageHit) -> dict[str, object]:
    message = hit.message
    return {
        "channel": message.channel_id,
        "ts": message.ts,
        "score": round(hit.score, 6),
        "user": message.user_name,
        "posted_at": message.posted_at.isoformat(),
        "text": message.text,
    }


class ProgressBar:
    """`[#####.....] 120/400 indexed` on one line of `stream`, redrawn as indexing goes on."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, done: int, total: int) -> None:
        filled = BAR_WIDTH * done // max(total, 1)
        self._stream.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} indexed")
        if done >= total:
            self._stream.write("\n")
        self._stream.flush()
