"""Promoting a profile fact to a memo: never automatic, a person's decision (`myao2 profile promote`)."""

from __future__ import annotations

from myao2.application.notebook import Notebook
from myao2.domain.memo import Memo, numbered_name
from myao2.domain.ports import ProfileStore

PROMOTED_PRIORITY = 5


class PromotionRefused(Exception):
    """The fact cannot be promoted; the message says why."""


def promote(
    profiles: ProfileStore, notebook: Notebook, user_id: str, fact_id: int, display_name: str, name: str | None = None
) -> Memo:
    """Make candidate fact `fact_id` of `user_id` a priority-5 memo kept for the fact's audience, and mark it
    promoted. The memo is named `name`, or "<display name>-<fact id>"; its content names the person.

    Raises PromotionRefused for an unknown person or fact or a fact that is not a candidate, and
    MemoError when the notebook refuses the memo (nothing is changed then).
    """
    profile = profiles.get(user_id)
    if profile is None:
        raise PromotionRefused(f"no profile of {user_id}")
    fact = profile.fact(fact_id)
    if fact is None:
        raise PromotionRefused(f"{user_id} has no fact {fact_id}")
    if not fact.is_candidate:
        raise PromotionRefused(
            f"fact {fact_id} of {user_id} is not a candidate (confidence {fact.confidence:.2f}, "
            f"confirmed {fact.confirmations} times{', superseded' if not fact.active else ''}"
            f"{', already promoted' if fact.memo_id is not None else ''})"
        )
    memo = notebook.add(
        name or numbered_name(display_name, fact_id),
        f"{display_name}: {fact.text}",
        PROMOTED_PRIORITY,
        audience=fact.audience,
    )
    profiles.save([profile.promoted(fact_id, memo.id)])
    return memo
