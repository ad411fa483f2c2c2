"""A rough token count for prompt budgets that treats Japanese fairly.

Tokenizers give a kanji or kana character about one token, while English words
average about four characters a token. Counting only characters would let a
Japanese prompt grow to several times its budget.
"""

from __future__ import annotations

import math
import unicodedata

_WIDE = frozenset("WF")


def estimate_tokens(text: str) -> int:
    """About how many model tokens `text` takes: one per wide (CJK) character, one per 4 others."""
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in _WIDE)
    return wide + math.ceil((len(text) - wide) / 4)
