"""``myao2 memory show`` (what the bot remembers, everywhere or as one conversation may see it; with
``--user U`` what it learnt about that person) and ``myao2 memory forget --user U`` (for people who ask
to be forgotten)."""

from __future__ import annotations

import argparse
import json
import sys

from myao2.config import Config
from myao2.domain.memory import Digest, Memory, Scope, bullet_line, digest_line, seen_in
from myao2.domain.visibility import Reader, can_read_from, not_public, shows_its_own
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.forget import forget_person
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.profile_cli import fact_json, fact_line

TERMS = {"long": "long-term", "short": "short-term"}


def run_memory_command(config: Config, args: argparse.Namespace) -> int:
    """Run `myao2 memory show` or `forget`; 0 on success, 1 when a forget is not confirmed."""
    if args.memory_command == "forget":
        return _forget(config, args.user, args.yes)
    if args.user is not None:
        return _show_profile(config, args.user, args.channel, args.json)
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        store = SqlMemoryStore(engine, SystemClock())
        memories = store.all()
        digests = store.digests(args.channel)
        if args.channel is not None:
            channels = SqlConversationStore(engine).channels()
            stored = next((c for c in channels if c.id == args.channel), None)
            memories = seen_in(memories, args.channel, args.thread, not_public(channels), stored)
            reader = Reader.of(args.channel, stored)
            digests = [d for d in digests if can_read_from(reader, d.audience, d.channel_id, stored)]
            if stored is not None and not shows_its_own(stored):
                print(
                    f"myao2 memory: the bot is no longer in {args.channel} (left or removed from it): what it remembers"
                    " of it is kept for when it joins again, and `myao2 memory show` without --channel shows it",
                    file=sys.stderr,
                )
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps([*(_json(m) for m in memories), *(_digest_json(d) for d in digests)], ensure_ascii=False, indent=2))
    elif not memories and not digests:
        print("Nothing remembered yet.")
    else:
        print("\n\n".join([*(_text(m) for m in memories), *_digests_text(digests)]))
    return 0


def _show_profile(config: Config, user_id: str, channel: str | None, as_json: bool) -> int:
    """Print the facts learnt about `user_id` (with `channel`: those its prompts may show)."""
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        profile = SqlProfileStore(engine, SystemClock()).get(user_id)
        conversations = SqlConversationStore(engine)
        person = conversations.people([user_id]).get(user_id)
        channels = conversations.channels()
        reader = None if channel is None else Reader.of(channel, next((c for c in channels if c.id == channel), None))
    finally:
        engine.dispose()
    facts = profile.readable(reader, not_public(channels)) if profile is not None else ()
    name = person.display_name if person is not None else user_id
    if as_json:
        print(json.dumps({"user": user_id, "name": name, "facts": [fact_json(f) for f in facts]}, ensure_ascii=False, indent=2))
        return 0
    if not facts:
        print(f"Nothing learnt about {user_id} yet.")
        return 0
    print(f"== {name} ({user_id}) ==")
    for fact in facts:
        print(fact_line(fact))
    return 0


def _forget(config: Config, user_id: str, confirmed: bool) -> int:
    if not confirmed:
        try:
            answer = input(
                f"Delete every message of {user_id}, their profile, the memos taken from them and the notes made "
                "from their words? "
                "This cannot be undone. [y/N] "
            )
        except EOFError:  # nobody to answer (a script, no terminal): a no
            print("\nNothing deleted. (No answer came: --yes confirms without asking.)")
            return 1
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing deleted.")
            return 1
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        forgotten = forget_person(engine, user_id)
    finally:
        engine.dispose()
    print(
        f"Forgot {user_id}: {forgotten.messages} message(s), {forgotten.memos} memo(s), "
        f"{forgotten.notes} memory note(s), {forgotten.facts} profile fact(s) deleted."
    )
    return 0


def _title(memory: Memory) -> str:
    scope = memory.scope
    if scope.channel_id is None:
        where = "workspace"
    elif scope.thread_ts is None:
        where = f"{memory.label or scope.channel_id} ({scope.channel_id})"
    else:
        where = f"thread {scope.thread_ts} in {memory.label or scope.channel_id} ({scope.channel_id})"
    private = "" if memory.audience.is_workspace else ", private to this conversation"
    return f"== {where}: {TERMS[memory.term.value]}{private} =="


def _text(memory: Memory) -> str:
    lines = [_title(memory)]
    lines += [f"{bullet_line(b)}  (ts {', '.join(b.source_ts)})" for b in memory.active] or ["(empty)"]
    superseded = len(memory.bullets) - len(memory.active)
    if superseded:
        lines.append(f"({superseded} superseded note{'s' if superseded != 1 else ''} kept, not shown)")
    return "\n".join(lines)


def _json(memory: Memory) -> dict[str, object]:
    return {
        "scope": memory.scope.key,
        "term": memory.term.value,
        "label": memory.label,
        "private_to": memory.audience.conversation_id,
        "updated_at": memory.updated_at.isoformat() if memory.updated_at else None,
        "bullets": [
            {
                "id": b.id,
                "day": b.day.isoformat(),
                "text": b.text,
                "ts": list(b.source_ts),
                "superseded_by": b.superseded_by,
            }
            for b in memory.bullets
        ],
    }


def _digests_text(digests: list[Digest]) -> list[str]:
    """One block per conversation: its digests of past days, oldest first."""
    blocks: dict[str, list[str]] = {}
    for digest in digests:
        private = "" if digest.audience.is_workspace else ", private to this conversation"
        title = f"== {digest.label or digest.channel_id} ({digest.channel_id}): digests of past days{private} =="
        blocks.setdefault(title, [title]).append(f"{digest_line(digest)}  ({digest.stage.value})")
    return ["\n".join(lines) for lines in blocks.values()]


def _digest_json(digest: Digest) -> dict[str, object]:
    return {
        "scope": Scope(digest.channel_id).key,
        "term": "digest",
        "label": digest.label,
        "private_to": digest.audience.conversation_id,
        "day": digest.day.isoformat(),
        "stage": digest.stage.value,
        "lines": list(digest.lines),
    }
