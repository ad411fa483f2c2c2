"""Profiles of people: facts the bot learnt from what each person said.

A fact carries a confidence (0 to 1), how many later messages confirmed it, the
conversation it was learnt in, the day, and the audience of that conversation:
a fact learnt in a DM or a private channel is shown only there. Like long-term
memory, a profile only grows: a new fact may supersede older ones of the same
audience (kept, hidden from prompts), and nothing is rewritten. A fact confident
enough and confirmed often enough is a candidate for a memo, which only a person
can make of it (`myao2 profile promote`).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date

from myao2.domain.visibility import Audience, Reader, can_read_from, heard_now, narrowest

CANDIDATE_CONFIDENCE = 0.9
CANDIDATE_CONFIRMATIONS = 3


@dataclass(frozen=True)
class Fact:
    """Something learnt about a person, where and when, and how sure the bot is of it."""

    id: int
    text: str
    confidence: float
    confirmations: int
    """How many later messages confirmed it (0 when it was said once)."""
    conversation_id: str
    """The conversation it was learnt in."""
    audience: Audience
    learned_on: date
    source_ts: tuple[str, ...]
    superseded_by: int | None = None
    memo_id: int | None = None
    """The memo a person made of it (then no longer a candidate)."""
    heard_in: tuple[str, ...] = ()
    """The conversations whose words the model had in sight when it learnt it (it may mix people and
    channels up): the fact is kept only for the narrowest of their audiences."""

    @property
    def active(self) -> bool:
        return self.superseded_by is None

    @property
    def is_candidate(self) -> bool:
        """Whether a person may want it as a memo: sure, confirmed often, not yet promoted."""
        return (
            self.active
            and self.memo_id is None
            and self.confidence >= CANDIDATE_CONFIDENCE
            and self.confirmations >= CANDIDATE_CONFIRMATIONS
        )


@dataclass(frozen=True)
class NewFact:
    """A fact the model proposes: its text, confidence, source messages and the ids it contradicts."""

    text: str
    confidence: float
    source_ts: tuple[str, ...]
    supersedes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Confirmation:
    """The model's word that messages confirm a known fact, with its confidence now."""

    fact_id: int
    confidence: float
    source_ts: tuple[str, ...]


@dataclass(frozen=True)
class Profile:
    """One person's facts, and up to which message ts each audience's messages were read."""

    user_id: str
    facts: tuple[Fact, ...] = ()
    read_up_to: Mapping[str, str] = field(default_factory=dict)
    """Audience key (see `audience_key`) -> the newest ts read from that audience."""
    last_fact_id: int = 0
    """The highest fact id given out: a fact dropped since does not free its id (`myao2 profile promote` names a
    fact by the id a listing showed)."""

    def readable(self, reader: Reader | None, not_public: Container[str]) -> tuple[Fact, ...]:
        """The active facts conversation `reader` may see (None: a person's own view), oldest first: kept for an
        audience it reads, and learnt with the words in sight of conversations it may read all of (`can_read_from`,
        `not_public` the ids of those that keep to themselves now), as a memory's bullets are shown: a channel shared
        outside since reads no fact its narrowing made its own that was heard in another channel too."""
        return tuple(
            f
            for f in self.facts
            if f.active and can_read_from(reader, f.audience, None, heard=heard_now((f.conversation_id, *f.heard_in), not_public))
        )

    def of(self, audience: Audience) -> tuple[Fact, ...]:
        """The active facts learnt in `audience`: the only ones a model call about `audience` sees or changes."""
        return tuple(f for f in self.facts if f.active and f.audience == audience)

    def fact(self, fact_id: int) -> Fact | None:
        return next((f for f in self.facts if f.id == fact_id), None)

    def learn(
        self,
        audience: Audience,
        new: Sequence[tuple[NewFact, str, date]],
        confirmations: Sequence[Confirmation],
        heard_in: tuple[str, ...] = (),
    ) -> Profile:
        """This profile with `new` facts (each with its conversation and day) learnt in `audience` by a call
        that had the words of conversations `heard_in` in sight, and `confirmations` applied.

        Only active facts of the same audience may be confirmed or superseded, so
        nothing said in one conversation changes what another sees. A confirmation
        counts each source message once; unknown ids are ignored.
        """
        facts = {f.id: f for f in self.facts}
        own = {f.id for f in self.of(audience)}
        for confirmation in confirmations:
            fact = facts.get(confirmation.fact_id)
            if fact is None or fact.id not in own:
                continue
            fresh = tuple(ts for ts in dict.fromkeys(confirmation.source_ts) if ts not in fact.source_ts)
            if fresh:
                facts[fact.id] = replace(
                    fact,
                    confirmations=fact.confirmations + len(fresh),
                    confidence=_clamp(confirmation.confidence),
                    source_ts=fact.source_ts + fresh,
                )
        last_id = max(self.last_fact_id, max(facts, default=0))
        for offset, (draft, conversation_id, day) in enumerate(new, start=1):
            fact_id = last_id + offset
            for old in draft.supersedes:
                if old in own and facts[old].active:
                    facts[old] = replace(facts[old], superseded_by=fact_id)
            facts[fact_id] = Fact(
                fact_id,
                draft.text,
                _clamp(draft.confidence),
                0,
                conversation_id,
                audience,
                day,
                draft.source_ts,
                heard_in=heard_in,
            )
        return replace(self, facts=tuple(facts[i] for i in sorted(facts)), last_fact_id=last_id + len(new))

    def read(self, audience: Audience, ts: str) -> Profile:
        """This profile having read `audience`'s messages up to `ts`."""
        return replace(self, read_up_to={**self.read_up_to, audience_key(audience): ts})

    def narrowed(self, channel_id: str, said_there: Container[str]) -> Profile:
        """This profile once conversation `channel_id` stopped being the workspace's: the facts learnt there,
        citing any message ts in `said_there` (its messages) or learnt with its words in sight are kept for
        the narrowest of their audience and the channel's (`visibility.narrowest`): a workspace fact becomes
        the channel's own; one already another conversation's is dropped (no one may read both)."""
        own = Audience(channel_id)

        def there(fact: Fact) -> bool:
            return (
                fact.conversation_id == channel_id
                or channel_id in fact.heard_in
                or any(ts in said_there for ts in fact.source_ts)
            )

        facts = []
        for fact in self.facts:
            audience = narrowest((fact.audience, own)) if there(fact) else fact.audience
            if audience is not None:
                facts.append(replace(fact, audience=audience))
        return replace(self, facts=tuple(facts))

    def without_sources(self, ts: Collection[str]) -> Profile:
        """This profile without the facts learnt from any of the messages `ts` (deleted or edited in Slack), and
        with confirmations by them no longer counted. A fact superseded only by one dropped is active again."""
        facts = []
        dropped = set()
        for fact in self.facts:
            learnt_from = fact.source_ts[: len(fact.source_ts) - fact.confirmations]
            if any(t in ts for t in learnt_from):
                dropped.add(fact.id)
                continue
            confirmed_by = tuple(t for t in fact.source_ts[len(learnt_from) :] if t not in ts)
            facts.append(replace(fact, source_ts=learnt_from + confirmed_by, confirmations=len(confirmed_by)))
        facts = [replace(f, superseded_by=None) if f.superseded_by in dropped else f for f in facts]
        return replace(self, facts=tuple(facts))

    def heard_by_readers(self, not_public: Container[str], fact_ids: Container[int]) -> Profile:
        """This profile with facts `fact_ids` kept only for the narrowest of their audience and those of the
        conversations they were learnt or heard in (`not_public`: the ids of those that keep to themselves), as
        `narrowed` keeps them: dropped where that is two conversations. A fact superseded only by one dropped is
        active again."""
        facts, dropped, changed = [], set(), False
        for fact in self.facts:
            if fact.id in fact_ids:
                heard = heard_now((fact.conversation_id, *fact.heard_in), not_public)
                audience = narrowest((fact.audience, *heard))
                if audience is None:
                    dropped.add(fact.id)
                    continue
                if audience != fact.audience:
                    fact, changed = replace(fact, audience=audience), True
            facts.append(fact)
        if not (dropped or changed):
            return self
        facts = [replace(f, superseded_by=None) if f.superseded_by in dropped else f for f in facts]
        return replace(self, facts=tuple(facts))

    def kept_as_narrow_as(self, stored: Profile) -> Profile:
        """This profile with no fact kept for a wider audience than in `stored` (what a racing `narrowed` did)."""
        narrower = {f.id: f.audience for f in stored.facts if not f.audience.is_workspace}
        return replace(
            self,
            facts=tuple(
                replace(f, audience=narrower[f.id]) if f.audience.is_workspace and f.id in narrower else f
                for f in self.facts
            ),
        )

    def promoted(self, fact_id: int, memo_id: int | None) -> Profile:
        """This profile with fact `fact_id` marked as made into memo `memo_id`."""
        return replace(self, facts=tuple(replace(f, memo_id=memo_id) if f.id == fact_id else f for f in self.facts))


def audience_key(audience: Audience) -> str:
    """A text key for an audience: "" for the workspace, else its conversation id."""
    return audience.conversation_id or ""


def _clamp(confidence: float) -> float:
    return min(1.0, max(0.0, float(confidence)))
