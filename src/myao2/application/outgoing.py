"""What the bot sends, made safe the same way whether posted whole or streamed as it is written.

Text is cleaned (`clean_text`) and, unless broadcasts are allowed, @channel, @here,
@everyone and user-group mentions are made to notify nobody (`neutralise_broadcasts`).
"""

from __future__ import annotations

import dataclasses
import re

from myao2.application.reply_stream import ReplyDone, ReplyStream, TextDelta, ToolStarted
from myao2.domain.conversation import clean_text, neutralise_broadcasts

_OPEN_TAIL = re.compile(r"(?:<[^>]{0,80}|@\w{0,12})\Z")
"""The end of a text that may be the start of a broadcast still being written: held back until it is whole."""
_JOINING = re.compile(r"[\w@.<]")
"""A character a broadcast may go on from, or read before it (``bob@here`` is no broadcast): no cut after it."""


def safe_text(text: str, allow_broadcasts: bool) -> str:
    """`text` as the bot may send it."""
    text = clean_text(text)
    return text if allow_broadcasts else neutralise_broadcasts(text)


async def safe_stream(reply: ReplyStream, allow_broadcasts: bool) -> ReplyStream:
    """`reply` with every text delta and the whole text made safe, as `safe_text` would make the whole, and the
    titles of tasks shown (which quote the model's tool arguments) too.

    A delta ending in what may be the start of a broadcast (``<!chan``, ``@he``)
    is held back until the next delta shows what it is. Each delta is made safe
    from the last cut (`_cut`) on, not from the start: a long answer costs time in
    proportion to its length, not to its square.
    """
    raw = ""  # every text delta so far
    base = 0  # a cut in `raw`: what comes after it is made safe alone
    sent = 0  # how much of `raw` went out (made safe)
    shown = ""  # raw[base:sent] made safe

    def more(end: int) -> TextDelta:
        nonlocal base, shown
        now = safe_text(raw[base:end], allow_broadcasts)
        delta = TextDelta(now[len(shown) :])
        cut = _cut(raw, base, end)
        if cut > base:
            base, now = cut, safe_text(raw[cut:end], allow_broadcasts)
        shown = now
        return delta

    try:
        async for event in reply:
            if isinstance(event, TextDelta):
                raw += event.text
                tail = _OPEN_TAIL.search(raw, base)
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
            elif isinstance(event, ToolStarted) and event.title:
                event = dataclasses.replace(event, title=safe_text(event.title, allow_broadcasts))
            yield event
    except Exception:  # the reply failed midway: what was held back is part of what was written
        if len(raw) > sent:
            yield more(len(raw))
        raise


def _cut(text: str, start: int, end: int) -> int:
    """The last place in text[start:end] that no broadcast can span, however the text goes on: after a character
    no broadcast goes on from or reads before (`_JOINING`), with every ``<`` before it closed; `start` if none.

    What follows a cut is made safe alone exactly as within the whole text.
    """
    cut = end
    while cut > start:
        opened = text.rfind("<", start, cut)
        if opened > text.rfind(">", start, cut):
            cut = opened  # within an unclosed "<...": only before it
            continue
        if not _JOINING.match(text, cut - 1):
            return cut
        cut -= 1
    return start
