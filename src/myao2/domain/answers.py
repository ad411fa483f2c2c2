"""How a mention whose answer failed is taken up again, and when the bot apologises instead."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from myao2.domain.conversation import Message


@dataclass(frozen=True)
class RetryPolicy:
    """Attempt n+1 may start `delays[n-1]` seconds after attempt n started (the last delay repeats).

    Each of the first `len(delays)` attempts tries to write an answer; later ones post
    the apology. An attempt that is interrupted (a crash, a deploy) counts too, so a
    message that kills the bot every time still gets its apology.
    """

    delays: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.delays or min(self.delays) <= 0:
            raise ValueError("retry delays must be positive, and at least one")

    def retry_at(self, started: datetime, attempt: int) -> datetime:
        """When the answer is taken up again if attempt `attempt` (1-based), started at `started`, fails."""
        return started + timedelta(seconds=self.delays[min(attempt, len(self.delays)) - 1])

    def apologises(self, attempt: int) -> bool:
        """Whether attempt `attempt` posts the apology instead of trying to answer."""
        return attempt > len(self.delays)


@dataclass(frozen=True)
class PendingAnswer:
    """A message taken up for an answer that is not settled, after `attempts` attempts."""

    message: Message
    attempts: int


@dataclass(frozen=True)
class Unfinished:
    """How far an unsettled answer got: `ts`, the message it shows as, once Slack told it; `showing`, whether an
    attempt began to show it (Slack may then hold a message of it whose ts the bot never heard); `unheard_start`,
    the `words_digest` of what a call starting it was sent that went unanswered (the message then shows just
    that), if one did; `ending`, the end stream `ts` lacks, when an attempt left it open (its stop failed); `tasks`,
    those its stream shows still running (call id to title), to be marked failed as it is ended."""

    ts: str | None
    showing: bool
    unheard_start: str | None = None
    ending: str | None = None
    tasks: dict[str, str] | None = None


def words_digest(text: str) -> str:
    """What tells a message by its text without keeping the text: a digest of it, spaces around it left out."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:32]
