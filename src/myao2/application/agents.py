"""What the use cases need from the language model, as Protocols."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from myao2.application.context import PromptContext
from myao2.application.reply_stream import ReplyStream
from myao2.domain.judgment import Judgment
from myao2.domain.memo import Origin


class ModelUnavailable(Exception):
    """The model could not answer, even after the bounded retries."""


class ReplyWriter(Protocol):
    async def write(self, context: PromptContext, origin: Origin) -> str:
        """A reply for the conversation in `context`; memo tools act within `origin`.

        Raises ModelUnavailable when the model keeps failing.
        """
        ...

    def stream(self, context: PromptContext, origin: Origin) -> ReplyStream:
        """The same reply as it is written: text deltas, tool calls, then `ReplyDone` last.

        Raises ModelUnavailable (while iterating) when the model keeps failing, also
        after some text was yielded.
        """
        ...


class Judge(Protocol):
    async def judge(self, context: PromptContext, elapsed: timedelta) -> Judgment:
        """Whether to join the conversation in `context`, quiet for `elapsed`.

        Output that is not valid comes back as `Judgment.invalid`; raises
        ModelUnavailable when the model keeps failing.
        """
        ...
