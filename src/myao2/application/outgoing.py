"""What the bot sends, made safe the same way whether posted whole or streamed as it is written.

Text is cleaned (`clean_text`) and, unless broadcasts are allowed, @channel, @here,
@everyone and user-group mentions are made to notify nobody (`neutralise_broadcasts`).
"""

from __future__ import annotations

import re

from myao2.application.reply_stream import ReplyDone, ReplyStream, TextDelta
from myao2.domain.conversation import clean_text, neutralise_broadcasts

_OPEN_TAIL = re.compile(r"(?:<[^>]{0,80}|@\w{0,12})\Z")
"""The end of a text that may be the start of a broadcast still being written: held back until it is whole."""


def safe_text(text: str, allow_broadcasts: bool) -> str:
    """`text` as the bot may send it."""
    text = clean_text(text)
    return text if allow_broadcasts else neutralise_broadcasts(text)


async def safe_stream(reply: ReplyStream, allow_broadcasts: bool) -> ReplyStream:
    """`reply` with every text delta and the whole text made safe, as `safe_text` would make the whole.

    A delta ending in what may be the start of a broadcast (``<!chan``, ``@he``)
    is held back until the next delta shows what it is.
    """
    raw = ""  # every text delta so far
    sent = 0  # how much of `raw` went out (made safe)

    def more(end: int) -> TextDelta:
        before = safe_text(raw[:sent], allow_broadcasts)
        return TextDelta(safe_text(raw[:end], allow_broadcasts)[len(before) :])

    try:
        async for event in reply:
            if isinstance(event, TextDelta):
                raw += event.text
                tail = _OPEN_TAIL.search(raw)
                end = tail.start() if tail else len(raw)
                if end > sent:
                    yield more(end)
                    sent = end
                continue
            if isinstance(event, ReplyDone):
                if len(raw) > sent:
                    yield more(len(raw))
                    sent = len(raw)
                event = ReplyDone(safe_text(event.text, allow_broadcasts))
            yield event
    except Exception:  # the reply failed midway: what was held back is part of what was written
        if len(raw) > sent:
            yield more(len(raw))
        raise
