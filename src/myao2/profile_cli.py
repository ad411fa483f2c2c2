"""``myao2 profile candidates`` (facts sure and confirmed enough to become memos) and
``myao2 profile promote USER FACT_ID`` (a person makes one a priority-5 memo)."""

from __future__ import annotations

import argparse
import json
import sys

from myao2.application.notebook import Actor, Notebook
from myao2.application.promotion import PromotionRefused, promote
from myao2.config import Config
from myao2.domain.memo import MemoError
from myao2.domain.profile import Fact
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.memo_cli import describe_error

EXIT_REFUSED = 2


def run_profile_command(config: Config, args: argparse.Namespace) -> int:
    """Run `myao2 profile candidates` or `promote`; 0 on success, 2 when a promotion is refused."""
    engine = open_database(config.memory.sqlalchemy_url)
    clock = SystemClock()
    try:
        profiles = SqlProfileStore(engine, clock)
        names = {p.user_id: p.display_name for p in SqlConversationStore(engine, clock).people().values()}
        if args.profile_command == "candidates":
            _candidates(profiles, names, args.json)
            return 0
        notebook = Notebook(SqlMemoStore(engine, clock), Actor.CLI)
        try:
            memo = promote(
                profiles, notebook, args.user, args.fact_id, names.get(args.user, args.user), args.name
            )
        except PromotionRefused as exc:
            print(f"myao2 profile: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        except MemoError as exc:
            print(f"myao2 profile: {describe_error(exc)}", file=sys.stderr)
            return EXIT_REFUSED
        print(f"Promoted: memo {memo.name!r} (priority {memo.priority}): {memo.content}")
        return 0
    finally:
        engine.dispose()


def _candidates(profiles: SqlProfileStore, names: dict[str, str], as_json: bool) -> None:
    found = [(profile.user_id, fact) for profile in profiles.all() for fact in profile.facts if fact.is_candidate]
    if as_json:
        listed = [{"user": user_id, "name": names.get(user_id, user_id), **fact_json(fact)} for user_id, fact in found]
        print(json.dumps(listed, ensure_ascii=False, indent=2))
        return
    if not found:
        print("No candidates.")
        return
    for user_id, fact in found:
        print(f"{user_id} ({names.get(user_id, user_id)}) fact {fact_line(fact)}")


def fact_line(fact: Fact) -> str:
    """A fact as the command line shows it: id, text, confidence, confirmations, where and when it was learnt."""
    private = f", private to {fact.audience.conversation_id}" if not fact.audience.is_workspace else ""
    return (
        f"{fact.id}: {fact.text}  [confidence {fact.confidence:.2f}, confirmed {fact.confirmations} times, "
        f"learnt {fact.learned_on.isoformat()} in {fact.conversation_id}{private}]"
    )


def fact_json(fact: Fact) -> dict[str, object]:
    """A fact for `--json` output."""
    return {
        "fact_id": fact.id,
        "text": fact.text,
        "confidence": fact.confidence,
        "confirmations": fact.confirmations,
        "conversation": fact.conversation_id,
        "private_to": fact.audience.conversation_id,
        "learned_on": fact.learned_on.isoformat(),
        "memo_id": fact.memo_id,
    }
