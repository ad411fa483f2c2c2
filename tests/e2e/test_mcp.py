"""`myao2 mcp` as a subprocess, driven by the MCP SDK's own client over stdio and over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import MemoDraft, Origin
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.e2e.conftest import ALICE, CLI_SECONDS, GENERAL, ROOT, START_SECONDS, BotProcess, free_port, held_port, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes import PROXY_VARIABLES
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack

TOKEN = "mcp-test-token-0123456789"
DM = "DALICE"
EXPECTED_TOOLS = {
    "list_memo", "get_memo", "search_memo", "list_memo_tags", "add_memo", "edit_memo",
    "remove_memo", "restore_memo", "memo_history", "preview",
}  # fmt: skip


class Notebook:
    """A config and database for `myao2` commands, with no Slack and no model anywhere."""

    def __init__(self, tmp_path: Path) -> None:
        self.database = tmp_path / "memory.db"
        self.config_path = tmp_path / "config.yaml"
        self.listen_on(free_port())
        self.env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        self.env.update(PYTHONPATH=str(ROOT / "src"), MYAO2_MCP_TOKEN=TOKEN)

    def listen_on(self, port: int) -> None:
        """Write the config, with `mcp.port` set to `port`."""
        self.port = port
        config = {
            "persona": {"name": "myao", "language": "en", "timezone": "UTC"},
            "memory": {"database_path": str(self.database)},
            "mcp": {"port": port, "token": "${MYAO2_MCP_TOKEN:-}"},
        }
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    def myao2(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "myao2", *argv, "--config", str(self.config_path)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
        )

    def stdio(self, *options: str) -> StdioServerParameters:
        argv = ["-m", "myao2", "mcp", *options, "--config", str(self.config_path)]
        return StdioServerParameters(command=sys.executable, args=argv, env=self.env)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.database) as db:
            return db.execute(sql).fetchall()

    def store(self, channel: Channel) -> None:
        """Store `channel` as the bot stores a conversation it is in (one never stored reads nothing of the
        workspace)."""
        engine = open_database(f"sqlite:///{self.database}")
        try:
            SqlConversationStore(engine, SystemClock()).save_channel(channel)
        finally:
            engine.dispose()


@pytest.fixture
def notebook(tmp_path: Path) -> Notebook:
    book = Notebook(tmp_path)
    made = book.myao2("memo", "list")  # creates the database
    assert made.returncode == 0, made.stderr
    return book


@pytest.fixture
def http_server(notebook: Notebook) -> Iterator[str]:
    process = _serve_http(notebook) or _serve_http(notebook) or _serve_http(notebook)
    assert process is not None, "the ports picked were all taken"
    try:
        yield f"http://127.0.0.1:{notebook.port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=15)


def _serve_http(notebook: Notebook) -> subprocess.Popen[str] | None:
    """`myao2 mcp --http` serving the notebook on a port picked free; None if another process took that port before
    the server could bind it."""
    notebook.listen_on(free_port())
    process = subprocess.Popen(
        [sys.executable, "-m", "myao2", "mcp", "--http", "--config", str(notebook.config_path)],
        env=notebook.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{notebook.port}/mcp"
    wait_until(lambda: _serving(url) or process.poll() is not None, timeout=START_SECONDS, what="the MCP server to listen")
    if process.poll() is None:
        return process
    error = process.stderr.read() if process.stderr else ""
    assert f"myao2: mcp.port: port {notebook.port} is already in use" in error, error
    return None


def _serving(url: str) -> bool:
    """Whether the MCP server answers at `url` (refusing a request without its token), not some other server."""
    try:
        return httpx2.get(url, timeout=1).status_code == 401
    except httpx2.TransportError:
        return False


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def the_memo_story(client: Client, notebook: Notebook) -> None:
    """List the tools, add a memo, see it in SQLite and `myao2 memo list`, edit it, see its history,
    remove it, restore it."""
    assert {tool.name for tool in (await client.list_tools()).tools} == EXPECTED_TOOLS

    added = data(await client.call_tool("add_memo", {"name": "bob-tea", "content": "Bob drinks green tea", "tags": ["drinks"]}))
    assert added["kept_for"] == "workspace" and added["revision"] == 1
    assert notebook.rows("SELECT name, content, visibility FROM memos") == [("bob-tea", "Bob drinks green tea", "workspace")]
    listed = await asyncio.to_thread(notebook.myao2, "memo", "list")
    assert "bob-tea" in listed.stdout and "Bob drinks green tea" in listed.stdout

    edited = data(await client.call_tool("edit_memo", {"memo_name": "bob-tea", "content": "Bob drinks oolong tea", "priority": 4}))
    assert (edited["content"], edited["priority"], edited["tags"]) == ("Bob drinks oolong tea", 4, ["drinks"])
    history = data(await client.call_tool("memo_history", {"memo_name": "bob-tea"}))["revisions"]
    assert [(r["action"], r["actor"]) for r in history] == [("add", "user:mcp"), ("edit", "user:mcp")]
    assert history[1]["before"]["content"] == "Bob drinks green tea"

    data(await client.call_tool("remove_memo", {"memo_name": "bob-tea"}))
    assert notebook.rows("SELECT removed_at IS NOT NULL FROM memos") == [(1,)]
    restored = data(await client.call_tool("restore_memo", {"memo_name": "bob-tea"}))
    assert restored["content"] == "Bob drinks oolong tea"
    assert notebook.rows("SELECT removed_at FROM memos") == [(None,)]

    markdown = await client.read_resource("memo://notebook/bob-tea")
    assert "name: bob-tea" in markdown.contents[0].text and "Bob drinks oolong tea" in markdown.contents[0].text


def test_stdio_server_adds_edits_removes_and_restores_memos(notebook: Notebook) -> None:
    async def session() -> None:
        async with Client(notebook.stdio()) as client:
            await the_memo_story(client, notebook)

    asyncio.run(session())


def test_http_server_needs_the_token_and_then_serves_the_same_notebook(notebook: Notebook, http_server: str) -> None:
    refused = httpx2.post(
        http_server,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert refused.status_code == 401
    wrong = httpx2.post(http_server, json={}, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401

    async def session() -> None:
        async with http_client(http_server, TOKEN) as client:
            await the_memo_story(client, notebook)

    asyncio.run(session())


def test_http_with_its_port_in_use_exits_2_with_one_line_naming_mcp_port(notebook: Notebook) -> None:
    with held_port() as port:
        notebook.listen_on(port)
        result = notebook.myao2("mcp", "--http")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"myao2: mcp.port: port {port} is already in use"]


def test_http_without_a_token_configured_refuses_to_start_naming_the_key(notebook: Notebook) -> None:
    notebook.env.pop("MYAO2_MCP_TOKEN")
    started = notebook.myao2("mcp", "--http")
    assert started.returncode == 2 and "mcp.token" in started.stderr and "Traceback" not in started.stderr


def test_a_dm_memo_is_seen_only_when_started_for_that_dm_and_pinned_memos_need_allow_pinned(
    notebook: Notebook,
) -> None:
    notebook.store(Channel(DM, "alice", ChannelKind.IM))
    assert notebook.myao2("memo", "add", "gift", "--content", "Alice hides a gift for Bob", "--conversation", DM).returncode == 0
    assert notebook.myao2("memo", "add", "lunch", "--content", "Lunch is at noon").returncode == 0
    assert notebook.myao2("memo", "pin", "lunch").returncode == 0
    assert notebook.myao2("memo", "add", "tea", "--content", "Bob drinks oolong tea").returncode == 0
    assert notebook.myao2("memo", "remove", "tea").returncode == 0

    async def session() -> None:
        async with Client(notebook.stdio()) as client:
            shown = data(await client.call_tool("list_memo", {}))
            assert [m["name"] for m in shown["memos"]] == ["lunch"] and shown["memos"][0]["pinned"]
            hidden = await client.call_tool("get_memo", {"memo_name": "gift"})
            assert hidden.is_error and "gift" in hidden.content[0].text and "Alice" not in hidden.content[0].text
            pinned = await client.call_tool("edit_memo", {"memo_name": "lunch", "content": "Lunch is at one"})
            assert pinned.is_error and "--allow-pinned" in pinned.content[0].text
            bad = await client.call_tool("add_memo", {"name": "x", "content": "y", "priority": 9})
            assert bad.is_error
        async with Client(notebook.stdio("--conversation", DM, "--allow-pinned")) as client:
            names = {m["name"]: m["kept_for"] for m in data(await client.call_tool("list_memo", {}))["memos"]}
            assert names == {"gift": DM, "lunch": "workspace"}
            wider = await client.call_tool("edit_memo", {"memo_name": "lunch", "content": "Lunch is where the gift is"})
            assert wider.is_error and "seen more widely" in wider.content[0].text  # as the bot's tools in the DM
            gone = await client.call_tool("remove_memo", {"memo_name": "lunch"})
            assert gone.is_error and "seen more widely" in gone.content[0].text
            back = await client.call_tool("restore_memo", {"memo_name": "tea"})
            assert back.is_error and "seen more widely" in back.content[0].text, back.content[0].text
            assert not (await client.call_tool("remove_memo", {"memo_name": "gift"})).is_error
            assert data(await client.call_tool("restore_memo", {"memo_name": "gift"}))["kept_for"] == DM  # its own
            added = data(await client.call_tool("add_memo", {"name": "card", "content": "Bob wants a card"}))
            assert added["kept_for"] == DM
        async with Client(notebook.stdio("--allow-pinned")) as client:
            data(await client.call_tool("edit_memo", {"memo_name": "lunch", "content": "Lunch is at one"}))

    asyncio.run(session())
    assert notebook.rows("SELECT name, content, removed_at IS NOT NULL FROM memos ORDER BY name") == [
        ("card", "Bob wants a card", False),
        ("gift", "Alice hides a gift for Bob", False),
        ("lunch", "Lunch is at one", False),
        ("tea", "Bob drinks oolong tea", True),
    ]
    assert notebook.rows("SELECT count(*) FROM memos WHERE name = 'x'") == [(0,)]


def test_a_memo_added_while_the_bot_runs_is_in_its_next_prompt(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "myao2", "mcp", "--config", str(bot.config_path)],
        env=bot.environment(),
    )

    async def add() -> None:
        async with Client(params) as client:
            data(await client.call_tool("add_memo", {"name": "standup", "content": "Standup is at 9:30", "priority": 5}))

    asyncio.run(add())
    llm.script(Text("At 9:30!"))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> when is standup?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the answer")
    assert "standup (priority 5" in prompt_text(llm.requests[0]) and "Standup is at 9:30" in prompt_text(llm.requests[0])
    assert bot.stop() == 0


def test_texts_another_process_changes_while_only_the_server_runs_are_embedded_in_the_background(notebook: Notebook) -> None:
    """A search embeds a few changed texts itself and leaves the rest to the background: the server runs it, as the bot does."""
    count = 40  # more than a search embeds itself (SEARCH_EMBED_LIMIT)

    def unembedded() -> int:
        return notebook.rows("SELECT count(*) FROM search_docs WHERE vector IS NULL")[0][0]

    async def session() -> None:
        async with Client(notebook.stdio()) as client:
            data(await client.call_tool("search_memo", {"query": "anything"}))  # the server is up, its index idle
            engine = open_database(f"sqlite:///{notebook.database}")
            try:  # as the bot would, in a process of its own
                memos = SqlMemoStore(engine, SystemClock())
                for number in range(count):
                    memos.add(MemoDraft.create(f"note{number}", f"note number {number}", 3), Origin(None), "test")
            finally:
                engine.dispose()
            found = data(await client.call_tool("search_memo", {"query": "note number 7", "limit": 1}))["memos"]
            assert [memo["name"] for memo in found] == ["note7"]
            assert notebook.rows("SELECT count(*) FROM search_docs WHERE kind = 'memo'") == [(count,)]
            await asyncio.to_thread(wait_until, lambda: unembedded() == 0, 120.0, "the server to embed the memos")

    asyncio.run(session())
    assert notebook.rows("SELECT count(*) FROM search_queue") == [(0,)]
