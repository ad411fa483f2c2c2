"""CPU instructions the event loop spends on one streamed model call: the HTTP request and the stream's chunks.

Run from the repository root (needs valgrind: ``apt-get install valgrind``)::

    .venv/bin/python bench/model_call_cost.py [--calls N] [--transport aiohttp|httpx] [--src DIR ...]

In one process under ``valgrind --tool=callgrind``, against the fake model in a process of its own (not
counted), the response role's model as the bot builds it (`ModelClients`) streams a reply of six chunks (its
role, three pieces of text, its end, its usage) to a prompt like a busy channel's (a long system prompt, 30
messages, five tools):

* client call: the client's ``chat.completions.create`` with the request strands makes, its chunks read as
  strands reads them;
* model stream: strands' model stream (`SpecCountingModel.stream`): the request made from strands' messages,
  the call, the chunks made strands' events.

``--transport httpx`` counts the SDK's default transport (httpx's own) in place of the bot's (aiohttp). Garbage
collection is off while counting and hash randomisation fixed. ``--src`` counts another source tree (e.g. a
checkout of main) beside this one's, for A/B figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import callgrind  # noqa: E402

STAGES = ("client call", "model stream")

# os.getppid() (called nowhere else) marks the end of each stage, where callgrind writes out what it counted so far.
SCRIPT = """
import asyncio, gc, os, subprocess, sys
from myao2.config import AgentConfig, AgentsConfig
from myao2.infrastructure.llm.agents import ModelClients, load_model_libraries

CALLS, TRANSPORT = int(sys.argv[1]), sys.argv[2]
SYSTEM = "あなたは猫が好きなボットのみゃおです。" * 120
MESSAGES = [
    {"role": "user", "content": [{"text": f"アリス: ラーメンの話 {i}: 昨日の店は替え玉が無料で、スープも濃厚だった"}]}
    for i in range(30)
]
TOOLS = [
    {"name": f"tool_{i}", "description": "メモを探す。" * 10,
     "inputSchema": {"json": {"type": "object", "properties": {"query": {"type": "string", "description": "言葉"}},
                              "required": ["query"]}}}
    for i in range(5)
]


async def call(client, request):
    response = await client.chat.completions.create(**request)
    async for event in response:  # as strands reads them
        if not getattr(event, "choices", None):
            continue
        choice = event.choices[0]
        getattr(choice.delta, "reasoning_content", None)
        getattr(choice.delta, "reasoning", None)
        choice.delta.content
        choice.delta.tool_calls
        if choice.finish_reason:
            break
    async for event in response:
        pass
    assert event.usage


async def stream(model):
    async for _ in model.stream(MESSAGES, TOOLS, SYSTEM):
        pass


async def main():
    fake = subprocess.Popen([sys.executable, "-m", "tests.fakes.openai_server", "--text", "Sure, here you go!"],
                            stdout=subprocess.PIPE, text=True)
    base_url = fake.stdout.readline().strip()
    config = AgentConfig(model_id="fake", client_args={"base_url": base_url, "api_key": "sk-x"})
    clients = ModelClients(AgentsConfig(response=config))
    load_model_libraries().result()
    await clients.load()
    model = clients.model("response")
    if TRANSPORT == "httpx":
        import openai
        from myao2.infrastructure.llm.chat_client import LeanChatClient
        model._custom_client = LeanChatClient(openai.AsyncOpenAI(**config.client_args).with_options(
            max_retries=config.max_retries, timeout=config.timeout_seconds))
    client = model._custom_client
    request = model.format_request(MESSAGES, TOOLS, SYSTEM)
    for _ in range(10):  # first calls: connections, caches
        await call(client, dict(request))
        await stream(model)
    gc.collect()
    gc.disable()
    os.getppid()
    for _ in range(CALLS):
        await call(client, dict(request))
    os.getppid()
    for _ in range(CALLS):
        await stream(model)
    os.getppid()
    await clients.close()
    fake.terminate()
    fake.wait()


asyncio.run(main())
"""


def measure(src: Path, folder: Path, calls: int, transport: str) -> list[int]:
    """Each stage's instructions per call with the bot's modules from `src`."""
    env = callgrind.tree_env(src)
    counted = callgrind.parts(SCRIPT, [str(calls), transport], folder, len(STAGES) + 1, env=env, cwd=ROOT)
    return [count // calls for count in counted[1:]]  # part 1: start-up and warm-up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="calls counted per stage (default 20)")
    parser.add_argument("--transport", choices=("aiohttp", "httpx"), default="aiohttp",
                        help="the SDK's HTTP transport: the bot's (aiohttp) or its default (httpx)")
    return callgrind.compare(
        parser, argv, lambda tree, folder, args: measure(tree, folder, args.calls, args.transport), STAGES,
        "per call (K)", 1e3,
    )


if __name__ == "__main__":
    raise SystemExit(main())
