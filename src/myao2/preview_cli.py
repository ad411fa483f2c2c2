"""``myao2 preview response|judgment|memory --channel C``: the exact prompt the bot would send now.

Reads the database only: neither Slack nor the model is reached.
"""

from __future__ import annotations

import argparse
import json
import sys

from myao2.composition import build_application
from myao2.config import Config
from myao2.domain.conversation import BotIdentity
from myao2.infrastructure import event_loop
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.preview import Preview, PreviewError, Previewer

EXIT_REFUSED = 2


def run_preview_command(config: Config, args: argparse.Namespace) -> int:
    """Print the preview `args` ask for; 0 on success, 2 when it cannot be made."""
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        clock = SystemClock()
        bot = stored_identity(SqlConversationStore(engine, clock))
        app = build_application(config, engine, clock, bot.user_id)
        preview = event_loop.run(Previewer(app, bot).preview(args.role, args.channel, args.thread, args.as_user))
    except PreviewError as exc:
        print(f"myao2 preview: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps(preview.to_json(), ensure_ascii=False, indent=2))
    else:
        print(describe(preview))
    return 0


def stored_identity(store: SqlConversationStore) -> BotIdentity:
    """Who the bot was when it last connected to Slack; refused if it never has with this database."""
    identity = store.identity()
    if identity is None:
        raise PreviewError("the bot has not connected to Slack with this database yet (run `myao2 run` once)")
    return identity


def describe(preview: Preview) -> str:
    """The preview for people: the system prompt, the query, the tools, then the token estimates."""
    where = preview.channel_id + (f" thread {preview.thread_ts}" if preview.thread_ts else "")
    prompt = preview.prompt
    if prompt is None:
        return f"No {preview.role} call is due for {where}: its memory has read everything stored there."
    parts = [
        f"===== {preview.role} prompt for {where} =====",
        "===== system prompt =====",
        prompt.system,
        "===== query =====",
        prompt.query,
        f"===== tools ({len(prompt.tools)}) =====",
    ]
    for tool in prompt.tools:
        parts.append(f"--- {tool['name']}: {tool['description']}")
        parts.append(json.dumps(tool["parameters"], ensure_ascii=False, indent=2))
    parts.append("===== estimated tokens =====")
    width = max(len(section.name) for section in preview.sections)
    for section in preview.sections:
        budget = f" of {section.budget}" if section.budget is not None else ""
        parts.append(f"{section.name:<{width}}  {section.tokens:>6}{budget}")
    return "\n".join(parts)
