"""A rough token count for prompt budgets that treats Japanese fairly.

Tokenizers give a kanji or kana character about one token, while English words
average about four characters a token. Counting only characters would let a
Japanese prompt grow to several times its budget.

Every prompt counts the tokens of each line it shows, mostly the same lines as the
prompt before it (the recent conversation, the memories): text with other than ASCII
characters, whose count takes a look at each character, is counted once and remembered
(a line up to `REMEMBERED_LENGTH` characters: fitting a long text to a budget counts many
of its beginnings, which would keep long strings alive).
"""

from __future__ import annotations

import functools
import unicodedata

_WIDE = frozenset("WF")
REMEMBERED_TEXTS = 4096
"""How many counted texts with other than ASCII characters are remembered (the least recently used go first)."""
REMEMBERED_LENGTH = 1000
"""The longest text remembered; a longer one is counted each time."""


def estimate_tokens(text: str) -> int:
    """About how many model tokens `text` takes: one per wide (CJK) character, one per 4 others."""
    if text.isascii():
        return -(-len(text) // 4)
    if len(text) > REMEMBERED_LENGTH:
        return _count(text)
    return _mixed_tokens(text)


@functools.lru_cache(maxsize=REMEMBERED_TEXTS)
def _mixed_tokens(text: str) -> int:
    return _count(text)


def _count(text: str) -> int:
    """One token per wide character, one per 4 others."""
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in _WIDE)
    return wide + -(-(len(text) - wide) // 4)
