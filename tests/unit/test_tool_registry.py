from __future__ import annotations

import copy
import json

import pytest

from myao2.infrastructure.llm.memo_tools import MEMO_TOOLS
from myao2.infrastructure.llm.tool_registry import FixedToolRegistry


def test_read_only_specs_are_their_own_deep_copy_and_refuse_changes() -> None:
    plain = FixedToolRegistry(list(MEMO_TOOLS)).get_all_tool_specs()
    specs = FixedToolRegistry(list(MEMO_TOOLS), read_only_specs=True).get_all_tool_specs()

    assert json.dumps(specs, sort_keys=True) == json.dumps(plain, sort_keys=True)
    for spec in specs:
        assert copy.deepcopy(spec) is spec
        schema = spec["inputSchema"]["json"]
        with pytest.raises(TypeError):
            schema["properties"] = {}
        with pytest.raises(TypeError):
            schema.update(required=[])
        with pytest.raises(TypeError):
            del spec["name"]


def test_specs_are_plain_unless_asked_read_only() -> None:
    spec = FixedToolRegistry(list(MEMO_TOOLS)).get_all_tool_specs()[0]

    assert copy.deepcopy(spec) is not spec
    spec["inputSchema"]["json"]["properties"] = {}  # a client that adjusts specs in place (litellm) still can


def test_a_deep_copy_of_the_read_only_specs_is_a_new_list_of_the_same_specs_none_visited(monkeypatch) -> None:
    """Strands deep-copies the tool specs before every model call: read-only specs need no visit each."""
    from myao2.infrastructure.llm.tool_registry import ReadOnlyJson

    specs = FixedToolRegistry(list(MEMO_TOOLS), read_only_specs=True).get_all_tool_specs()
    visited: list[object] = []
    monkeypatch.setattr(ReadOnlyJson, "__deepcopy__", lambda self, memo: visited.append(self) or self)

    copied = copy.deepcopy(specs)

    assert copied is not specs and copied == specs
    assert all(a is b for a, b in zip(copied, specs, strict=True))
    copied.append({"name": "extra"})
    assert len(specs) == len(MEMO_TOOLS)
    assert visited == []
