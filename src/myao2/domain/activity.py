"""What the bot did, for operators: model calls, judgments, replies, and what the tokens cost."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from myao2.domain.judgment import Judgment


class CallOutcome(StrEnum):
    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"
    """Cut short by the bot before the model answered or failed: its task cancelled (the bot stopping), or its
    reply given up. Says nothing of whether the model is reachable."""


@dataclass(frozen=True)
class ModelCall:
    """One call to a model: by which agent role, how many tokens, how long, and how it ended.

    `detail` is the stop reason of a call that answered, the error's type (never its
    message, which may quote the prompt), or "cancelled" for a call cut short. A call that
    failed or was cut short has no usage: a provider reports it only at the end of its answer.
    """

    role: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_ms: int
    outcome: CallOutcome
    detail: str


class JudgmentOutcome(StrEnum):
    RESPOND = "respond"
    QUIET = "quiet"
    INVALID = "invalid"
    """The model answered, but not in the expected form: taken as "quiet"."""
    FAILED = "failed"
    """The model could not be reached."""


def judgment_outcome(judgment: Judgment | None) -> JudgmentOutcome:
    """The outcome of a judgment, or FAILED for None (the model could not be reached)."""
    if judgment is None:
        return JudgmentOutcome.FAILED
    if not judgment.valid:
        return JudgmentOutcome.INVALID
    return JudgmentOutcome.RESPOND if judgment.should_respond else JudgmentOutcome.QUIET


class ReplyKind(StrEnum):
    ANSWER = "answer"
    """To a mention or a DM."""
    UNASKED = "unasked"
    """The bot joined a conversation by itself."""


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, per million."""

    input_per_million: float
    output_per_million: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1_000_000
