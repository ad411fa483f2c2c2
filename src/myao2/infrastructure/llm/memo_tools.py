"""The six tools the model keeps its notebook of memos with.

Each call finds its `MemoToolScope` in the agent's invocation state
(`invocation_state={"memo_scope": scope}`), so concurrent conversations never share
one. The rules live in `myao2.domain.memo`; a refusal comes back to the model as an
error result worded in the scope's language, and the store is left unchanged.
Store calls are synchronous, so they run in a worker thread.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strands import tool
from strands.tools.decorator import DecoratedFunctionTool
from strands.types.tools import ToolContext

from myao2.domain.memo import (
    MAX_CONTENT_LENGTH,
    MAX_DETAIL_LENGTH,
    MAX_LIST_LIMIT,
    MAX_LIST_OFFSET,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_TAG_LENGTH,
    MAX_TAGS_PER_MEMO,
    MIN_PRIORITY,
    ChangeBudget,
    Memo,
    MemoChanges,
    MemoDraft,
    MemoError,
    Origin,
    lookup_name,
    validate_page,
)
from myao2.domain.ports import MemoStore
from myao2.infrastructure.llm import memo_messages as say

SCOPE_KEY = "memo_scope"


@dataclass(frozen=True)
class MemoToolScope:
    """What one conversation's tool calls work with.

    `origin.reader` limits what reads and changes can see, and `origin` what changes
    may write; it is recorded on added memos; `language` ('ja' or 'en') is the language of
    the tools' replies; `budget` counts the changes of one reply.
    """

    store: MemoStore
    origin: Origin
    language: str = say.DEFAULT_LANGUAGE
    budget: ChangeBudget = field(default_factory=ChangeBudget)


_Reply = str | dict[str, Any]


@tool(context=True)
async def add_memo(
    name: str,
    content: str,
    priority: int,
    tags: list[str] | None = None,
    *,
    tool_context: ToolContext,
) -> _Reply:
    """Save a new memo: a fact worth remembering, usually about a person (what they like,
    what they are working on, how they want to be treated) or about the workspace.

    Call list_memo_tags first and reuse its tags. If a memo on the same subject already
    exists, update it with edit_memo instead of adding a duplicate.

    Args:
        name: A short unique name for the memo, e.g. "tanaka-coffee" (one line, at most
            32 characters).
        content: The fact itself, in a sentence or two (about 50 characters, at most 500).
        priority: How much it matters, from 1 (trivia) to 5 (essential).
        tags: Up to 3 tags, e.g. a person's name or a topic. Reuse existing tags: there can be
            at most 20 different tags in all.
    """
    scope = _scope(tool_context)
    try:
        draft = MemoDraft.create(name, content, priority, tags)
        memo = await _change(scope, lambda: scope.store.add(draft, scope.origin, "tool:add_memo"))
    except MemoError as error:
        return _refused(error, scope)
    return say.added_message(memo, scope.language)


@tool(context=True)
async def edit_memo(
    memo_name: str,
    content: str | None = None,
    priority: int | None = None,
    tags: list[str] | None = None,
    detail: str | None = None,
    new_name: str | None = None,
    *,
    tool_context: ToolContext,
) -> _Reply:
    """Change an existing memo. When what you know has changed or grown, update the memo
    rather than adding another one. Give only what changes; omitted fields stay as they are.

    Args:
        memo_name: The current name of the memo.
        content: The new content (at most 500 characters).
        priority: The new priority, from 1 (trivia) to 5 (essential).
        tags: The new tags, replacing the current ones (up to 3); an empty list removes them all.
        detail: Longer notes, shown only by get_memo (at most 4000 characters); an empty
            string clears them.
        new_name: A new name for the memo.
    """
    scope = _scope(tool_context)
    try:
        changes = MemoChanges.create(
            content=content, priority=priority, tags=tags, detail=detail, new_name=new_name
        )
        name = lookup_name(memo_name)
        memo = await _change(scope, lambda: scope.store.edit(name, changes, scope.origin, "tool:edit_memo"))
    except MemoError as error:
        return _refused(error, scope)
    return say.edited_message(memo, scope.language)


@tool(context=True)
async def remove_memo(memo_name: str, *, tool_context: ToolContext) -> _Reply:
    """Remove a memo that is wrong, obsolete or useless. A person can still restore it.

    Args:
        memo_name: The name of the memo to remove.
    """
    scope = _scope(tool_context)
    try:
        name = lookup_name(memo_name)
        memo = await _change(scope, lambda: scope.store.remove(name, scope.origin, "tool:remove_memo"))
    except MemoError as error:
        return _refused(error, scope)
    return say.removed_message(memo, scope.language)


@tool(context=True)
async def list_memo(
    tag: str | None = None,
    offset: int = 0,
    limit: int = 10,
    *,
    tool_context: ToolContext,
) -> _Reply:
    """List memos, the most important and most recently updated first. Use it before
    answering about what you know or remember, and to find a memo's exact name.
    Memos marked as having a detail can be read in full with get_memo.

    Args:
        tag: Only list memos with this tag.
        offset: How many memos to skip, to see the next page.
        limit: How many memos to list, from 1 to 50.
    """
    scope = _scope(tool_context)
    wanted = tag.strip() if tag is not None and tag.strip() else None
    try:
        offset, limit = validate_page(offset, limit)
        page = await asyncio.to_thread(
            scope.store.list, scope.origin.reader, tag=wanted, offset=offset, limit=limit
        )
    except MemoError as error:
        return _refused(error, scope)
    return say.page_message(page, wanted, scope.language)


@tool(context=True)
async def get_memo(memo_name: str, *, tool_context: ToolContext) -> _Reply:
    """Read one memo in full: content, detail, priority, tags and dates. Use it when a
    listed memo has a detail that matters to your answer, or before editing it.

    Args:
        memo_name: The name of the memo.
    """
    scope = _scope(tool_context)
    try:
        memo = await asyncio.to_thread(
            scope.store.get, lookup_name(memo_name), scope.origin.reader
        )
    except MemoError as error:
        return _refused(error, scope)
    return say.memo_message(memo, scope.language)


@tool(context=True)
async def list_memo_tags(*, tool_context: ToolContext) -> _Reply:
    """List the tags in use, each with how many memos carry it and when one last changed,
    most used first. Check it before adding or tagging a memo, and reuse these tags
    rather than inventing near-duplicates.
    """
    scope = _scope(tool_context)
    usages = await asyncio.to_thread(scope.store.tags, scope.origin.reader)
    return say.tags_message(usages, scope.language)


def _scope(tool_context: ToolContext) -> MemoToolScope:
    scope: MemoToolScope = tool_context.invocation_state[SCOPE_KEY]
    return scope


async def _change(scope: MemoToolScope, write: Callable[[], Memo]) -> Memo:
    """Make one change of the reply's budget in a worker thread; a refused change costs nothing."""
    scope.budget.take()
    try:
        return await asyncio.to_thread(write)
    except BaseException:
        scope.budget.give_back()
        raise


def _refused(error: MemoError, scope: MemoToolScope) -> dict[str, Any]:
    """An error result: strands hands it to the model with status "error"."""
    return {"status": "error", "content": [{"text": say.error_message(error, scope.language)}]}


def _publish_bounds(memo_tool: DecoratedFunctionTool[Any, Any], **bounds: dict[str, Any]) -> None:
    """Show the domain's bounds in the schema the model sees.

    They are left out of strands' own argument validation on purpose: the domain
    enforces them and words the refusal in the conversation's language.
    """
    spec = copy.deepcopy(memo_tool.tool_spec)
    properties = spec["inputSchema"]["json"]["properties"]
    for parameter, schema in bounds.items():
        properties[parameter].update(copy.deepcopy(schema))
    memo_tool.tool_spec = spec


_NAME = {"minLength": 1, "maxLength": MAX_NAME_LENGTH}
_CONTENT = {"minLength": 1, "maxLength": MAX_CONTENT_LENGTH}
_PRIORITY = {"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY}
_TAGS = {"maxItems": MAX_TAGS_PER_MEMO, "items": {"type": "string", "maxLength": MAX_TAG_LENGTH}}

_publish_bounds(
    add_memo,
    name=_NAME,
    content=_CONTENT,
    priority=_PRIORITY,
    tags=_TAGS,
)
_publish_bounds(
    edit_memo,
    content=_CONTENT,
    priority=_PRIORITY,
    tags=_TAGS,
    detail={"maxLength": MAX_DETAIL_LENGTH},
    new_name=_NAME,
)
_publish_bounds(
    list_memo, offset={"minimum": 0, "maximum": MAX_LIST_OFFSET}, limit={"minimum": 1, "maximum": MAX_LIST_LIMIT}
)

MEMO_TOOLS = [add_memo, edit_memo, remove_memo, list_memo, get_memo, list_memo_tags]
