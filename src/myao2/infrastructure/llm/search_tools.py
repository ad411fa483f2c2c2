"""The search tools: `search_memo` over the memo notebook and `recall` over past messages, digests and memories.

Each call finds its `SearchToolScope` in the agent's invocation state
(`invocation_state={"search_scope": scope}`): the reader (what the conversation may
see) and the time cutoff (the message being answered), so a search never shows
another private conversation nor anything said after that message.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any

from strands import tool
from strands.types.tools import ToolContext

from myao2.application.search import MAX_LIMIT, MAX_QUERY_LENGTH, Search, SearchError, parse_before
from myao2.infrastructure.llm import search_messages as say

SEARCH_KEY = "search_scope"


@dataclass(frozen=True)
class SearchToolScope:
    """What one conversation's searches may see: `reader` (its channel id) and nothing after `cutoff`."""

    search: Search
    reader: str | None
    cutoff: datetime | None
    language: str
    timezone: tzinfo


@tool(context=True)
async def search_memo(query: str, limit: int = 5, *, tool_context: ToolContext) -> str | dict[str, Any]:
    """Search your memos by meaning and by keyword, in Japanese or English. Use it before
    answering about people or the past, and before add_memo, to find a memo on the same
    subject (then update it with edit_memo instead of adding a duplicate).

    Args:
        query: What you are looking for, e.g. "what Tanaka likes to eat" or "会議の曜日".
        limit: How many memos to return, from 1 to 20.
    """
    scope: SearchToolScope = tool_context.invocation_state[SEARCH_KEY]
    try:
        hits = await asyncio.to_thread(scope.search.memos, query, scope.reader, scope.cutoff, limit)
    except SearchError as error:
        return _refused(error, scope)
    return say.memo_hits_message(hits, scope.language)


@tool(context=True)
async def recall(
    query: str,
    limit: int = 5,
    channel: str | None = None,
    before: str | None = None,
    *,
    tool_context: ToolContext,
) -> str | dict[str, Any]:
    """Search past messages by meaning and by keyword, in Japanese or English: what someone
    said weeks ago, what was decided, when something happened. Each message found comes
    with the two messages before and after it, their authors and times. Old messages are
    kept only as dated digests and memories, which are searched too.

    Args:
        query: What you are looking for, e.g. "where Alice went on holiday".
        limit: How many messages to return, from 1 to 20.
        channel: Only this channel (its name, e.g. "general", or its id).
        before: Only messages posted before this date or time (ISO 8601, e.g. "2026-01-31").
    """
    scope: SearchToolScope = tool_context.invocation_state[SEARCH_KEY]
    try:
        cutoff = _earlier(scope.cutoff, _parse_before(before, scope.timezone))
        channel_id = None
        if channel is not None and channel.strip():
            channel_id = await asyncio.to_thread(scope.search.channel_named, channel, scope.reader)
        hits = await asyncio.to_thread(scope.search.messages, query, scope.reader, cutoff, channel_id, limit)
        notes = await asyncio.to_thread(scope.search.notes, query, scope.reader, cutoff, channel_id, limit)
    except SearchError as error:
        return _refused(error, scope)
    return say.recall_message(hits, notes, scope.language, scope.timezone)


def _parse_before(before: str | None, zone: tzinfo) -> datetime | None:
    """An ISO date or time (one without a time zone is read in the persona's), in UTC; None when not given."""
    if before is None or not before.strip():
        return None
    return parse_before(before, zone)


def _earlier(first: datetime | None, second: datetime | None) -> datetime | None:
    moments = [m.astimezone(timezone.utc) for m in (first, second) if m is not None]
    return min(moments) if moments else None


def _refused(error: SearchError, scope: SearchToolScope) -> dict[str, Any]:
    return {"status": "error", "content": [{"text": say.error_message(error, scope.language)}]}


def _publish_bounds() -> None:
    """Show the bounds in the schemas the model sees (enforced, and worded, by `validate`)."""
    for search_tool in (search_memo, recall):
        spec = copy.deepcopy(search_tool.tool_spec)
        properties = spec["inputSchema"]["json"]["properties"]
        properties["query"].update({"minLength": 1, "maxLength": MAX_QUERY_LENGTH})
        properties["limit"].update({"minimum": 1, "maximum": MAX_LIMIT})
        search_tool.tool_spec = spec


_publish_bounds()

SEARCH_TOOLS = [search_memo, recall]
