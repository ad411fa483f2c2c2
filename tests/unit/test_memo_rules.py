"""The memo rules in the domain: validation, tag limits, visibility."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from myao2.domain.memo import (
    MAX_CONTENT_LENGTH,
    MAX_DETAIL_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TAG_LENGTH,
    Memo,
    MemoChanges,
    MemoDraft,
    MemoError,
    Origin,
    Visibility,
    check_tag_kinds,
    normalize_tags,
    validate_content,
    validate_detail,
    validate_name,
    validate_page,
    validate_priority,
)
from myao2.domain.visibility import Reader

NOW = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)


def refused(code: str) -> pytest.RaisesExc[MemoError]:
    """Expect a `MemoError` with this code."""
    return pytest.raises(MemoError, match=rf"^{code}\b")


class TestName:
    def test_is_trimmed(self) -> None:
        assert validate_name("  tanaka-coffee \t") == "tanaka-coffee"

    def test_may_hold_32_characters(self) -> None:
        assert validate_name("名" * MAX_NAME_LENGTH) == "名" * MAX_NAME_LENGTH

    def test_longer_is_refused(self) -> None:
        with refused("name_too_long") as caught:
            validate_name("a" * (MAX_NAME_LENGTH + 1))
        assert caught.value.params == {"limit": MAX_NAME_LENGTH, "length": MAX_NAME_LENGTH + 1}

    @pytest.mark.parametrize("name", ["", "   ", "\n\t"])
    def test_blank_is_refused(self, name: str) -> None:
        with refused("blank_name"):
            validate_name(name)

    @pytest.mark.parametrize("name", ["two\nlines", "bell\x07", "nul\x00", "del\x7f", "lone\ud800"])
    def test_control_characters_are_refused(self, name: str) -> None:
        with refused("bad_name_characters"):
            validate_name(name)

    @pytest.mark.parametrize("name", [None, 5, ["a"], {"a": 1}])
    def test_must_be_text(self, name: object) -> None:
        with refused("not_text") as caught:
            validate_name(name)
        assert caught.value.params == {"field": "name"}


class TestContent:
    def test_is_trimmed_and_loses_control_characters(self) -> None:
        assert validate_content("  likes\x00 coffee\x1b\n\tand tea  ") == "likes coffee\n\tand tea"

    def test_may_hold_500_characters(self) -> None:
        assert len(validate_content("あ" * MAX_CONTENT_LENGTH)) == MAX_CONTENT_LENGTH

    def test_longer_is_refused(self) -> None:
        with refused("content_too_long"):
            validate_content("a" * (MAX_CONTENT_LENGTH + 1))

    @pytest.mark.parametrize("content", ["", "  \n ", "\x00\x01"])
    def test_blank_is_refused(self, content: str) -> None:
        with refused("blank_content"):
            validate_content(content)

    def test_must_be_text(self) -> None:
        with refused("not_text"):
            validate_content(42)


class TestDetail:
    @pytest.mark.parametrize("detail", [None, "", "  \n", "\x00"])
    def test_empty_means_none(self, detail: str | None) -> None:
        assert validate_detail(detail) is None

    def test_is_cleaned(self) -> None:
        assert validate_detail(" line one\nline\x00 two ") == "line one\nline two"

    def test_longer_than_4000_is_refused(self) -> None:
        assert validate_detail("a" * MAX_DETAIL_LENGTH) == "a" * MAX_DETAIL_LENGTH
        with refused("detail_too_long"):
            validate_detail("a" * (MAX_DETAIL_LENGTH + 1))

    def test_must_be_text(self) -> None:
        with refused("not_text"):
            validate_detail(["x"])


class TestPriority:
    @pytest.mark.parametrize("priority", [1, 2, 3, 4, 5])
    def test_one_to_five(self, priority: int) -> None:
        assert validate_priority(priority) == priority

    @pytest.mark.parametrize("priority", [0, 6, -1, 10**30, True, False, "3", 3.0, None, [3]])
    def test_anything_else_is_refused(self, priority: object) -> None:
        with refused("bad_priority"):
            validate_priority(priority)

    def test_refusal_quotes_a_short_value(self) -> None:
        with refused("bad_priority") as caught:
            validate_priority(10**40)
        assert len(caught.value.params["value"]) == 20


class TestTags:
    def test_none_is_no_tags(self) -> None:
        assert normalize_tags(None) == ()

    def test_trimmed_deduplicated_and_empty_ones_dropped(self) -> None:
        assert normalize_tags([" 田中 ", "", "coffee", "田中", "  ", "coffee\x00"]) == ("田中", "coffee")

    def test_inner_newlines_become_spaces(self) -> None:
        assert normalize_tags(["new\nyear"]) == ("new year",)

    def test_three_is_the_limit(self) -> None:
        assert normalize_tags(["a", "b", "c", "a", "b"]) == ("a", "b", "c")
        with refused("too_many_tags") as caught:
            normalize_tags(["a", "b", "c", "d"])
        assert caught.value.params == {"limit": 3, "count": 4}

    def test_long_tag_is_refused(self) -> None:
        assert normalize_tags(["t" * MAX_TAG_LENGTH]) == ("t" * MAX_TAG_LENGTH,)
        with refused("tag_too_long"):
            normalize_tags(["t" * (MAX_TAG_LENGTH + 1)])

    @pytest.mark.parametrize("tags", ["a,b", {"a": 1}, 3, {"a"}])
    def test_must_be_a_list(self, tags: object) -> None:
        with refused("tags_not_list"):
            normalize_tags(tags)

    def test_items_must_be_text(self) -> None:
        with refused("not_text"):
            normalize_tags(["a", 1])


class TestTagKinds:
    KINDS = {f"t{i}" for i in range(20)}

    def test_known_tags_are_always_fine(self) -> None:
        check_tag_kinds(("t1", "t2", "t3"), self.KINDS)

    def test_up_to_twenty_kinds(self) -> None:
        check_tag_kinds(("t1", "new"), self.KINDS - {"t0"})

    def test_twenty_first_kind_is_refused_listing_the_existing(self) -> None:
        with refused("too_many_tag_kinds") as caught:
            check_tag_kinds(("t1", "new"), self.KINDS)
        assert caught.value.params["new"] == "new"
        assert caught.value.params["existing"] == ", ".join(sorted(self.KINDS))

    def test_several_new_kinds_count_together(self) -> None:
        with refused("too_many_tag_kinds"):
            check_tag_kinds(("x", "y", "z"), set(list(self.KINDS)[:18]))


class TestDraftAndChanges:
    def test_draft_validates_every_field(self) -> None:
        draft = MemoDraft.create(" n ", " c ", 2, [" t "], " d ")
        assert draft == MemoDraft(name="n", content="c", priority=2, tags=("t",), detail="d")

    def test_nothing_to_change_is_refused(self) -> None:
        with refused("nothing_to_change"):
            MemoChanges.create()

    def test_changes_name_only_given_fields(self) -> None:
        changes = MemoChanges.create(priority=5, new_name=" renamed ")
        assert changes.updates == {"priority": 5, "name": "renamed"}

    def test_empty_detail_clears_and_empty_tags_clear(self) -> None:
        assert MemoChanges.create(detail="", tags=[]).updates == {"detail": None, "tags": ()}

    def test_changes_are_validated(self) -> None:
        with refused("bad_priority"):
            MemoChanges.create(priority=0)
        with refused("blank_content"):
            MemoChanges.create(content=" ")

    def test_apply_touches_updated_at_only_besides_the_changes(self) -> None:
        memo = Memo(name="n", content="c", priority=1, tags=(), created_at=NOW, updated_at=NOW)
        later = datetime(2026, 2, 1, tzinfo=timezone.utc)
        changed = MemoChanges.create(content="new").apply(memo, later)
        assert (changed.content, changed.created_at, changed.updated_at) == ("new", NOW, later)


class TestPage:
    def test_window(self) -> None:
        assert validate_page(0, 1) == (0, 1)
        assert validate_page(100, 50) == (100, 50)
        assert validate_page(1_000_000, 50) == (1_000_000, 50)

    @pytest.mark.parametrize("offset", [-1, 1_000_001, 888888888888888888888888888888888, True, "0", 1.0])
    def test_bad_offset(self, offset: object) -> None:
        with refused("bad_offset"):
            validate_page(offset, 10)

    @pytest.mark.parametrize("limit", [0, 51, True, "10", None])
    def test_bad_limit(self, limit: object) -> None:
        with refused("bad_limit"):
            validate_page(0, limit)


class TestVisibility:
    def test_public_channel_shares_with_the_workspace(self) -> None:
        assert Origin("C1", channel_private=False).visibility is Visibility.WORKSPACE
        assert Origin().visibility is Visibility.WORKSPACE

    def test_private_channel_keeps_to_itself(self) -> None:
        assert Origin("D1", channel_private=True).visibility is Visibility.CONVERSATION

    def test_visible_in(self) -> None:
        private = Memo(
            name="n",
            content="c",
            priority=1,
            tags=(),
            created_at=NOW,
            updated_at=NOW,
            channel_id="D1",
            visibility=Visibility.CONVERSATION,
        )
        assert private.visible_in(Reader("D1"), {"D1"}) and private.visible_in(None, {"D1"})
        assert not private.visible_in(Reader("C2"), {"D1"})
        public = replace(private, channel_id="C1", visibility=Visibility.WORKSPACE)
        assert public.visible_in(Reader("C2"), {"D1"}) and public.visible_in(Reader("C1"), {"D1"})
        # written in #C1 while public, #C1 since stored as private: its own alone, though kept for the workspace
        assert not public.visible_in(Reader("C2"), {"C1"}) and public.visible_in(Reader("C1"), {"C1"}) and public.visible_in(None, {"C1"})
