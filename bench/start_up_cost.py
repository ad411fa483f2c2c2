"""Start-up cost in CPU instructions: what `myao2 run` spends before it can answer, stage by stage.

Run from the repository root (needs valgrind: ``apt-get install valgrind``)::

    .venv/bin/python bench/start_up_cost.py [--src DIR ...]

Wall and CPU times of a start-up move by half or more on a machine other processes
load (``bench/mention_latency.py`` prints them: first answers 4.9-12 s after launch
at load 8-16 here); instructions executed do not move, so a change of a few percent shows. Each stage runs the bot's start-up code in order,
in one process under ``valgrind --tool=callgrind``, which writes out what
each stage counted as it ends:

* interpreter: Python starting, nothing imported;
* cli: ``myao2.cli`` (argument parsing);
* config: ``myao2.config`` imported and a config file read;
* bot modules: ``myao2.bot`` and everything it imports (Slack, the stores, SQLAlchemy), as ``cli.load_bot`` does;
* database: opening an SQLite database already at the newest migration (every start but the first), or with
  ``--new-database`` a new, empty one (the bot's first start);
* model libraries: `import_model_libraries` (openai, strands, the tools), which the bot runs in a thread;
* model clients: the models built (`ModelClients.load`'s building: the HTTP client, its TLS context).

Garbage collection is off, as it is while the bot starts (`myao2.start_up`); hash
randomisation is fixed: two copies of one tree counted the same to 0.1%. ``--src`` counts
another source tree (e.g. a checkout of main) beside this one's, for A/B figures.
Here 1,000 M instructions took about 0.5 s of CPU under load 9-10 (the 6.3 G of a
start-up, 3.1-4.1 s). Under callgrind a tree takes ~3 minutes of CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import callgrind  # noqa: E402

STAGES = ("interpreter", "cli", "config", "bot modules", "database", "model libraries", "model clients")

# The bot's start-up in its order (`cli.main`, `bot.run_bot`, `Bot.run`); os.getppid() (called nowhere else)
# marks the end of each stage, where callgrind writes out what it counted so far.
SCRIPT = """
import gc, os, sys
gc.disable()
os.getppid()
import myao2.cli
os.getppid()
from pathlib import Path
from myao2.config import load_config
config = load_config(Path(sys.argv[1]))
os.getppid()
load_bot = getattr(myao2.cli, "load_bot", None)  # as `myao2 run` imports the bot; older trees imported it plainly
load_bot() if load_bot else __import__("myao2.bot")
os.getppid()
from myao2.infrastructure.db.engine import open_database
open_database(config.memory.sqlalchemy_url)
os.getppid()
from myao2.infrastructure.llm.agents import import_model_libraries
import_model_libraries()
os.getppid()
from myao2.infrastructure.llm.agents import ModelClients
ModelClients(config.agents)._build_all()
os.getppid()
"""

CONFIG = """
slack: {{bot_token: xoxb-1, app_token: xapp-1, api_base_url: "http://127.0.0.1:9/api/"}}
agents:
  response: &agent {{model_id: m, client_args: {{api_key: sk-x, base_url: "https://127.0.0.1:9/v1"}}, max_retries: 2, timeout_seconds: 10}}
  judgment: *agent
  memory: *agent
persona: {{name: myao, language: ja, timezone: UTC}}
memory: {{database_path: {database}}}
"""

def measure(src: Path, folder: Path, new_database: bool) -> list[int]:
    """Each stage's instructions with the bot's modules from `src`, its database (made in `folder`) at the newest
    migration, or new if `new_database`."""
    # As installed: pip compiles the modules, and compiling is not start-up.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "myao2")], check=True)
    database, config = folder / "memory.db", folder / "config.yaml"
    config.write_text(CONFIG.format(database=database), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    if not new_database:
        subprocess.run([sys.executable, "-c", SCRIPT, str(config)], env=env, check=True)  # migrates: then at head
    return callgrind.parts(SCRIPT, [str(config)], folder, len(STAGES), env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-database", action="store_true", help="a new, empty database (the bot's first start)")
    return callgrind.compare(
        parser, argv, lambda tree, folder, args: measure(tree, folder, args.new_database), STAGES, "(M)", 1e6
    )


if __name__ == "__main__":
    raise SystemExit(main())
