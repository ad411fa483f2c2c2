"""``myao2 mcp``: the memo notebook served to other AI agents over MCP (stdio, or streamable HTTP).

Writes go through the notebook service as actor ``mcp``, so the bot's rules, privacy and
revision history hold; a pinned memo (a person's rule) is refused unless the server runs
with ``--allow-pinned``. The client sees what the whole workspace may read and, started
with ``--conversation C``, that conversation's own memos too, exactly as a prompt in C
would (the domain's visibility rule decides); then, like the bot's tools in C, it may not
change a memo that C shares with a wider audience. The database is shared with the running bot
(WAL, busy timeout): the bot sees a change at its next prompt. Like the bot, the server keeps
the search index up to date in the background (an `IndexWorker`).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import quote

from pydantic import Field

from myao2.application.memo_markdown import render_memo
from myao2.application.notebook import DEFAULT_PRIORITY, Actor, Notebook
from myao2.application.search import SearchError
from myao2.cli import inert
from myao2.composition import Application, build_application
from myao2.config import Config
from myao2.domain.conversation import BotIdentity, clean_text
from myao2.domain.memo import MAX_LIST_OFFSET, Memo, MemoError, MemoRevision, lookup_name
from myao2.domain.ports import ConversationStore
from myao2.domain.visibility import (
    WORKSPACE,
    WORKSPACE_VIEW,
    Audience,
    Reader,
    can_write,
    named_audience,
    readable_audiences,
)
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.llm.memo_messages import error_message
from myao2.infrastructure.search.setup import IndexWorker
from myao2.listening import listening_socket
from myao2.preview import PreviewError, Previewer

T = TypeVar("T")

SERVER_NAME = "myao2-notebook"
MEMO_URI = "memo://notebook/{name}"
INSTRUCTIONS = (
    "The notebook of myao2, a Slack bot: short memos (name, one-line content, priority 1-5, up to 3 tags, "
    "an optional longer detail) about the people and happenings of a Slack workspace. The bot reads them "
    "in every reply. Check with list_memo or search_memo before adding, and edit a memo rather than "
    "adding a second one on the same subject. Every change is kept as a revision: memo_history shows them, "
    "and restore_memo brings back a removed memo."
)


# The tools' argument types (module level: the SDK reads the annotations from here).
Name = Annotated[str, Field(description="the memo's exact name, as list_memo shows it")]
Priority = Annotated[int, Field(ge=1, le=5, description="5 always remember, 4 important, 3 useful, 2 minor, 1 temporary")]
Tags = Annotated[list[str] | None, Field(description="up to 3 short tags; reuse existing ones (list_memo_tags)")]


@dataclass(frozen=True)
class Scope:
    """What the client may see and write: the workspace's memos, and a conversation's when given."""

    conversation: str | None = None
    allow_pinned: bool = False

    def reader(self, conversations: ConversationStore) -> Reader:
        """The reader the visibility rule is asked about: the conversation as `conversations` keeps it now."""
        if self.conversation is None:
            return WORKSPACE_VIEW
        return Reader.of(self.conversation, conversations.get_channel(self.conversation))

    @property
    def audience(self) -> Audience:
        """Where a new memo is kept."""
        return Audience(self.conversation) if self.conversation else WORKSPACE

    @property
    def writer(self) -> Audience | None:
        """Who the visibility rule is asked about for a change: the conversation, as for the bot's tools
        there (what the client read of it must not reach a wider audience); else a person's own view."""
        return Audience(self.conversation) if self.conversation else None


class NotebookTools:
    """The operations the MCP tools and resources offer, over the application's stores."""

    def __init__(self, app: Application, scope: Scope, bot: BotIdentity | None) -> None:
        self._app = app
        self._scope = scope
        self._bot = bot
        self._notebook = Notebook(app.memos, Actor.MCP, allow_pinned=scope.allow_pinned)

    def list(self, tag: str | None, min_priority: int, removed: bool, offset: int, limit: int) -> dict[str, Any]:
        reader = self._reader()
        page = self._app.memos.list(
            reader, tag=tag, min_priority=min_priority, removed=removed, offset=offset, limit=limit
        )
        pinned = self._pinned(reader)
        return {
            "memos": [self._summary(memo, pinned) for memo in page.memos],
            "offset": page.offset,
            "total": page.total,
        }

    def get(self, name: str) -> dict[str, Any]:
        reader = self._reader()
        return self._data(self._seen(name, reader), self._pinned(reader))

    def markdown(self, name: str) -> str:
        """The memo as `myao2 memo export` writes it."""
        reader = self._reader()
        memo = self._seen(name, reader)
        return render_memo(memo, pinned=memo.name in self._pinned(reader))

    def names(self) -> list[str]:
        return [memo.name for memo in self._app.memos.list(self._reader()).memos]

    def search(self, query: str, limit: int) -> dict[str, Any]:
        reader = self._reader()
        try:
            hits = self._app.search.memos(query, reader.conversation_id, None, limit)
        except SearchError as exc:
            raise ToolRefusal(f"the search was refused ({exc.code})") from None
        pinned = self._pinned(reader)
        return {"memos": [{**self._summary(hit.memo, pinned), "score": round(hit.score, 4)} for hit in hits]}

    def tags(self) -> dict[str, Any]:
        usages = self._app.memos.tags(self._reader())
        return {"tags": [{"tag": u.tag, "count": u.count, "last_updated": u.last_updated.isoformat()} for u in usages]}

    def add(self, name: str, content: str, priority: int, tags: list[str] | None, detail: str | None) -> dict[str, Any]:
        reader = self._reader()
        memo = self._notebook.add(name, content, priority, tags, detail, audience=self._scope.audience, reader=reader)
        return self._data(memo, self._pinned(reader))

    def edit(self, name: str, **changes: Any) -> dict[str, Any]:
        reader = self._reader()
        seen = self._writable(name, reader)
        memo = self._notebook.edit(seen.name, audience=seen.audience, reader=reader, **changes)
        return self._data(memo, self._pinned(reader))

    def remove(self, name: str) -> dict[str, Any]:
        seen = self._writable(name, self._reader())
        memo = self._notebook.remove(seen.name, audience=seen.audience)
        return {"removed": memo.name, "revision": memo.revision}

    def restore(self, name: str) -> dict[str, Any]:
        """The removed memo `name` means for this client, refused (`wider_audience`) as `_writable` refuses a change."""
        reader = self._reader()
        memo = self._notebook.restore(lookup_name(name), reader=reader, writer=self._scope.writer)
        return self._data(memo, self._pinned(reader))

    def history(self, name: str) -> dict[str, Any]:
        name = lookup_name(name)
        reader = self._reader()
        revisions = self._nearest(reader, lambda audience: self._app.memos.history(name, audience=audience, reader=reader))
        return {"revisions": [_revision(r) for r in revisions]}

    async def preview(self, role: str, channel: str, thread: str | None, as_user: str | None) -> dict[str, Any]:
        if self._bot is None:
            raise ToolRefusal("the bot had not connected to Slack with this database when this server started")
        try:
            shown = await Previewer(self._app, self._bot).preview(
                role, channel, thread, as_user, self._reader()
            )
        except PreviewError as exc:
            raise ToolRefusal(str(exc)) from None
        return _printable(shown.to_json())

    def _reader(self) -> Reader:
        """What this client reads, its conversation as stored now (`Scope.reader`): looked up once per tool call."""
        return self._scope.reader(self._app.conversations)

    def _seen(self, name: str, reader: Reader) -> Memo:
        """The live memo `name` means for this client, as `reader` (a name no memo could bear: an unknown memo)."""
        return self._app.memos.get(lookup_name(name), reader)

    def _writable(self, name: str, reader: Reader) -> Memo:
        """The live memo `name` means for this client, as `reader`, refused (`wider_audience`) if this client may not
        change it, as the bot's tools in its conversation may not."""
        seen = self._seen(name, reader)
        if not can_write(self._scope.writer, seen.audience):
            raise MemoError("wider_audience", name=seen.name)
        return seen

    def _nearest(self, reader: Reader, work: Callable[[Audience], T]) -> T:
        """`work` for the nearest audience this client reads where it is not refused (as a name
        means a conversation's own memo before the workspace's); else the first refusal."""
        refusal: MemoError | None = None
        for audience in readable_audiences(reader):
            try:
                return work(audience)
            except MemoError as exc:
                refusal = refusal or exc
        assert refusal is not None
        raise refusal

    def _pinned(self, reader: Reader) -> set[str]:
        return {memo.name for memo in self._app.memos.pinned(reader)}

    @staticmethod
    def _summary(memo: Memo, pinned: set[str]) -> dict[str, Any]:
        return {
            "name": memo.name,
            "content": memo.content,
            "priority": memo.priority,
            "tags": list(memo.tags),
            "has_detail": bool(memo.detail),
            "kept_for": memo.audience.conversation_id or "workspace",
            "pinned": memo.name in pinned,
            "updated_at": memo.updated_at.isoformat(),
            "revision": memo.revision,
        }

    def _data(self, memo: Memo, pinned: set[str]) -> dict[str, Any]:
        return {**self._summary(memo, pinned), "detail": memo.detail, "created_at": memo.created_at.isoformat()}


class ToolRefusal(Exception):
    """A tool call refused with a message for the client."""


def _revision(revision: MemoRevision) -> dict[str, Any]:
    return {
        "action": revision.action.value,
        "actor": revision.actor,
        "at": revision.at.isoformat(),
        "before": revision.before,
        "after": revision.after,
    }


def memo_uri(name: str) -> str:
    """The resource URI of a memo's Markdown view."""
    return MEMO_URI.format(name=quote(name, safe=""))


def build_server(  # type: ignore[no-untyped-def]
    app: Application, scope: Scope, bot: BotIdentity | None, token: str | None, host: str, port: int
):
    """The MCP server over `app`'s notebook, as the bot `bot` (None: never connected, no previews).

    With `token`, HTTP requests must carry it as a bearer token.
    """
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.server.mcpserver.resources.templates import ResourceSecurity
    from mcp.types import Resource

    tools = NotebookTools(app, scope, bot)

    async def call(work: Callable[[], T], refused: type[Exception] = ToolError) -> T:
        """Run a store operation off the event loop; a refusal becomes the tool's (or resource's) error message."""
        try:
            return await asyncio.to_thread(work)
        except MemoError as exc:
            raise refused(_refused(exc)) from None
        except ToolRefusal as exc:
            raise refused(str(exc)) from None

    class StaticToken:
        """Accepts the one configured bearer token."""

        async def verify_token(self, presented: str) -> AccessToken | None:
            if token and hmac.compare_digest(presented.encode(), token.encode()):
                return AccessToken(token=presented, client_id="myao2-mcp", scopes=[])
            return None

    class NotebookServer(MCPServer):  # type: ignore[type-arg]
        async def list_resources(self) -> list[Resource]:
            names = await call(tools.names)
            return [
                Resource(uri=memo_uri(name), name=name, mime_type="text/markdown", description=f"The memo {name!r}")
                for name in names
            ]

    base_url = f"http://{host}:{port}"
    server = NotebookServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        token_verifier=StaticToken() if token else None,
        auth=AuthSettings(issuer_url=base_url, resource_server_url=None) if token else None,
        log_level="WARNING",
    )

    @server.tool(description="List memos, most important and most recently updated first.")
    async def list_memo(
        tag: Annotated[str | None, Field(description="only memos with this tag")] = None,
        min_priority: Annotated[int, Field(ge=1, le=5, description="only memos of at least this priority")] = 1,
        removed: Annotated[bool, Field(description="list removed memos instead (restore_memo brings one back)")] = False,
        offset: Annotated[int, Field(ge=0, le=MAX_LIST_OFFSET, description="memos to skip, for the next page")] = 0,
        limit: Annotated[int, Field(ge=1, le=100, description="memos per page")] = 20,
    ) -> dict[str, Any]:
        return await call(lambda: tools.list(tag, min_priority, removed, offset, limit))

    @server.tool(description="Read one memo in full, its detail included.")
    async def get_memo(memo_name: Name) -> dict[str, Any]:
        return await call(lambda: tools.get(memo_name))

    @server.tool(description="Find memos by meaning (in Japanese or English), best match first.")
    async def search_memo(
        query: Annotated[str, Field(description="what to look for, in a few words")],
        limit: Annotated[int, Field(ge=1, le=20, description="most memos to return")] = 5,
    ) -> dict[str, Any]:
        return await call(lambda: tools.search(query, limit))

    @server.tool(description="The tags in use, with how many memos bear each.")
    async def list_memo_tags() -> dict[str, Any]:
        return await call(tools.tags)

    @server.tool(
        description=(
            "Add a memo. Name the person it is about in the content (e.g. 'Alice loves spicy ramen'); keep the "
            "content to one line (at most 500 characters) and put longer facts in detail. Refused when the name "
            "is taken: edit that memo instead."
        )
    )
    async def add_memo(
        name: Annotated[str, Field(description="a short, unique name, e.g. alice-ramen")],
        content: Annotated[str, Field(description="the fact itself, one line")],
        priority: Priority = DEFAULT_PRIORITY,
        tags: Tags = None,
        detail: Annotated[str | None, Field(description="longer notes, shown only on request")] = None,
    ) -> dict[str, Any]:
        return await call(lambda: tools.add(name, content, priority, tags, detail))

    @server.tool(
        description=(
            "Change a memo: only the fields given change. An empty detail clears it; an empty tag list removes "
            "the tags. Give the revision you read, so that a change the bot made since is not overwritten unseen. "
            "A pinned memo (a rule a person set) is refused unless the server allows it; so is a "
            "workspace memo when the server was started for one conversation."
        )
    )
    async def edit_memo(
        memo_name: Name,
        content: Annotated[str | None, Field(description="the new content")] = None,
        priority: Annotated[int | None, Field(ge=1, le=5, description="the new priority")] = None,
        tags: Tags = None,
        detail: Annotated[str | None, Field(description="the new detail")] = None,
        new_name: Annotated[str | None, Field(description="rename the memo")] = None,
        revision: Annotated[
            int | None, Field(description="the revision you read (get_memo, list_memo): refused if changed since")
        ] = None,
    ) -> dict[str, Any]:
        changes = {
            "content": content, "priority": priority, "tags": tags, "detail": detail, "new_name": new_name,
            "revision": revision,
        }
        return await call(lambda: tools.edit(memo_name, **changes))

    @server.tool(
        description=(
            "Remove a memo that is no longer true or useful; restore_memo brings it back. Refused as edit_memo is: "
            "a pinned memo unless the server allows it, a workspace memo when it was started for one conversation."
        )
    )
    async def remove_memo(memo_name: Name) -> dict[str, Any]:
        return await call(lambda: tools.remove(memo_name))

    @server.tool(description="Bring back the most recently removed memo of that name.")
    async def restore_memo(memo_name: Name) -> dict[str, Any]:
        return await call(lambda: tools.restore(memo_name))

    @server.tool(description="Every change of a memo, oldest first: who made it, when, and the state before and after.")
    async def memo_history(memo_name: Name) -> dict[str, Any]:
        return await call(lambda: tools.history(memo_name))

    @server.tool(
        description=(
            "The exact prompt the bot would send its model now for a conversation, from its database: the system "
            "prompt, the query, the tools with their JSON schemas, and estimated tokens per section with their budgets. "
            "Refused where the prompt shows what this server does not (a conversation's own memos or notes)."
        )
    )
    async def preview(
        role: Annotated[
            Literal["response", "judgment", "memory"],
            Field(description="response: its answer; judgment: whether to join unasked; memory: its next memory update"),
        ],
        channel: Annotated[str, Field(description="the Slack channel id, e.g. C0123")],
        thread: Annotated[str | None, Field(description="a thread's ts (default: the channel's top-level flow)")] = None,
        as_user: Annotated[str | None, Field(description="answer this user's latest message (response only)")] = None,
    ) -> dict[str, Any]:
        # as ids are stored (a lone surrogate, from JSON escaping half an emoji, or a NUL, no database takes)
        channel = clean_text(channel)
        thread, as_user = (None if text is None else clean_text(text) for text in (thread, as_user))
        try:
            return await tools.preview(role, channel, thread, as_user)
        except ToolRefusal as exc:
            raise ToolError(str(exc)) from None

    @server.resource(
        MEMO_URI,
        name="memo",
        description="A memo as Markdown",
        mime_type="text/markdown",
        security=ResourceSecurity(exempt_params={"name"}),  # a memo's name, not a path
    )
    async def memo_markdown(name: str) -> str:
        return await call(lambda: tools.markdown(name), ResourceError)

    return server


def _printable(preview: dict[str, Any]) -> dict[str, Any]:
    """A preview's prompt with its control characters as their pictures (`inert`), as the command line prints it:
    what people said in Slack is stored as written, and a terminal client (Claude Code) prints tool results."""
    return {**preview, **{part: inert(preview[part]) for part in ("system", "query") if preview[part] is not None}}


def _refused(error: MemoError) -> str:
    message = error_message(error, "en")
    if error.code == "pinned":
        return message + " (This server was started without --allow-pinned.)"
    return message


def run_mcp_command(config: Config, args: argparse.Namespace) -> int:
    """Serve the notebook until the client goes (stdio) or the process is stopped (HTTP); 0 then."""
    token, listening = None, None
    if args.http:
        config.require("mcp.token")
        token = config.mcp.token.strip()
        listening = listening_socket(config.mcp.host, config.mcp.port, "mcp.port", "mcp.host")
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        clock = SystemClock()
        bot = SqlConversationStore(engine, clock).identity()
        app = build_application(config, engine, clock, bot.user_id if bot else "")
        scope = scope_of(args)
        server = build_server(app, scope, bot, token, config.mcp.host, config.mcp.port)
        # Texts changed here, or by the bot while only this server runs, are embedded in the background, as the bot
        # does (one process's batch is never embedded by another); only the memos' vectors are loaded for searching.
        indexer = IndexWorker(app.index, engine, warm=["memo"])
        indexer.start()
        try:
            if listening is None:
                server.run("stdio")
                return 0
            print(f"myao2 mcp: serving on http://{config.mcp.host}:{config.mcp.port}/mcp", file=sys.stderr, flush=True)
            _serve_http(server, listening, config.mcp.host, config.mcp.port)
        finally:
            indexer.stop()
    finally:
        if listening is not None:
            listening.close()
        engine.dispose()
    return 0


def scope_of(args: argparse.Namespace) -> Scope:
    """The scope `myao2 mcp`'s options ask for (`--conversation workspace`, as the memo commands take it: none)."""
    audience = WORKSPACE if args.conversation is None else named_audience(args.conversation)
    return Scope(audience.conversation_id, args.allow_pinned)


def _serve_http(server, listening: socket.socket, host: str, port: int) -> None:  # type: ignore[no-untyped-def]
    """Serve `server` over streamable HTTP, as its `run("streamable-http")` does, but on `listening`, bound before
    (`listening_socket`): uvicorn, binding by itself, exits 3 with its own message when the port is in use."""
    import anyio
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level=server.settings.log_level.lower())
    anyio.run(uvicorn.Server(config).serve, [listening])
