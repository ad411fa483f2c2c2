"""Keyword terms for Japanese and English: CJK text as character bigrams, other text as words.

SQLite's FTS5 trigram tokenizer cannot match two-character words (会議, 味噌), so text
is pre-split here and stored space-separated in an FTS5 `unicode61` table, which then
only has to split on the spaces.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Runs of kanji, hiragana, katakana (with the prolonged sound mark) or hangul, and runs of
# other letters and digits. Everything else separates terms.
_CJK = r"\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_MAX_TERMS = 2000


# The patterns are compiled at their first use, not at import: the bot imports the search modules to start,
# and compiling these (a class of the CJK ranges and its complement) costs more than any other of ours.
@functools.cache
def _runs() -> re.Pattern[str]:
    return re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")


@functools.cache
def _hiragana() -> re.Pattern[str]:
    return re.compile(r"[\u3040-\u309f]")


def terms(text: str) -> list[str]:
    """The keyword terms of `text`, in order: bigrams of CJK runs (a lone character alone), words otherwise."""
    normalized = unicodedata.normalize("NFKC", text).lower()
    found: list[str] = []
    for match in _runs().finditer(normalized):
        cjk, word = match.groups()
        if word is not None:
            found.append(word)
        elif len(cjk) == 1:
            found.append(cjk)
        else:
            found.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        if len(found) >= _MAX_TERMS:
            break
    return found[:_MAX_TERMS]


def content_terms(text: str) -> list[str]:
    """The terms of `text` that carry its meaning, in order, each once; all its terms if none does.

    Japanese writes content words in kanji and katakana and the grammar around them
    (particles, endings, さん) in hiragana: a term holding hiragana (ている, の会) matches
    that grammar, not the meaning, and is left out.
    """
    found = list(dict.fromkeys(terms(text)))
    return [term for term in found if not _hiragana().search(term)] or found


def fts_document(text: str) -> str:
    """`text` as the FTS5 table stores it: its terms separated by spaces."""
    return " ".join(terms(text))


def fts_query(query_terms: list[str]) -> str | None:
    """An FTS5 query matching any of the terms (each quoted), or None when there is none."""
    unique = list(dict.fromkeys(query_terms))
    if not unique:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in unique)
