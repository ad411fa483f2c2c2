"""The recall tool reads `before` from the model: any date it cannot use gets the readable message, no search."""

from __future__ import annotations

from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from myao2.infrastructure.llm.search_tools import SEARCH_KEY, SearchToolScope, recall


class NoSearch:
    """A search that must not be reached."""

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        raise AssertionError(f"search.{name} called")


@pytest.mark.parametrize("before", ["yesterday", "0001-01-01", "0001-01-01T00:00+14:00", "9999-12-31T23:59:59-14:00"])
@pytest.mark.parametrize(("language", "wording"), [("en", "before must be a date"), ("ja", "before は")])
async def test_a_before_it_cannot_use_is_refused_with_the_readable_message(before, language, wording):
    scope = SearchToolScope(NoSearch(), "C1", None, language, ZoneInfo("Asia/Tokyo"))  # type: ignore[arg-type]
    context = SimpleNamespace(invocation_state={SEARCH_KEY: scope})

    result = await recall("lunch plans", before=before, tool_context=context)

    assert result["status"] == "error"
    assert wording in result["content"][0]["text"]
