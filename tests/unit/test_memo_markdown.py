"""One memo as a Markdown file (`myao2.application.memo_markdown`): the exact bytes, and reading them back."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from myao2.application.memo_markdown import MemoFileError, has_front_matter, parse_memo, render_memo
from myao2.domain.memo import Memo, MemoError, Visibility
from myao2.domain.visibility import WORKSPACE, Audience
from tests.unit.test_config import laughs, towers

CREATED = datetime(2025, 1, 2, 3, 0, 0, 123456, tzinfo=timezone.utc)
UPDATED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def memo(**fields: object) -> Memo:
    values: dict[str, object] = dict(
        name="alice-ramen",
        content="Alice loves spicy ramen",
        priority=4,
        tags=("food", "alice"),
        created_at=CREATED,
        updated_at=UPDATED,
        revision=2,
    )
    values.update(fields)
    return Memo(**values)  # type: ignore[arg-type]


def test_a_private_pinned_memo_with_detail_renders_to_these_bytes():
    text = render_memo(
        memo(detail="Likes Ichiran\nin Shibuya", visibility=Visibility.CONVERSATION, channel_id="G1"), pinned=True
    )

    assert text == (
        "---\n"
        "name: alice-ramen\n"
        "priority: 4\n"
        "tags: [food, alice]\n"
        "visibility: conversation\n"
        "conversation: G1\n"
        "pinned: true\n"
        "created: 2025-01-02 03:00:00+00:00\n"
        "updated: 2025-01-02 03:04:05+00:00\n"
        "revision: 2\n"
        "---\n"
        "\n"
        "Alice loves spicy ramen\n"
        "\n"
        "## Detail\n"
        "\n"
        "Likes Ichiran\n"
        "in Shibuya\n"
    )


def test_a_workspace_memo_names_no_conversation_and_has_no_detail_heading_without_detail():
    text = render_memo(memo(channel_id="C1", tags=()), pinned=False)

    assert "visibility: workspace\n" in text and "conversation" not in text
    assert "tags: []\n" in text and "pinned: false\n" in text
    assert "## Detail" not in text
    assert text.endswith("---\n\nAlice loves spicy ramen\n")


def test_reading_a_rendered_memo_gives_its_fields_back():
    original = memo(detail="Likes Ichiran\nin Shibuya", visibility=Visibility.CONVERSATION, channel_id="D1")

    file = parse_memo(render_memo(original, pinned=True))

    assert (file.name, file.audience, file.pinned) == ("alice-ramen", Audience("D1"), True)
    draft = file.draft()
    assert (draft.content, draft.priority, draft.tags, draft.detail) == (
        "Alice loves spicy ramen", 4, ("food", "alice"), "Likes Ichiran\nin Shibuya"
    )


def test_content_lines_that_read_as_the_detail_heading_survive():
    content = "## Detail\nnot the detail\n\\## Detail  \n## Details are fine"
    text = render_memo(memo(content=content, detail="## Detail\nthe real one"), pinned=False)

    assert "\n\\## Detail\nnot the detail\n\\\\## Detail  \n" in text
    draft = parse_memo(text).draft()
    assert (draft.content, draft.detail) == (content, "## Detail\nthe real one")


@pytest.mark.parametrize(
    "name", ["yes", "123", "null", "a: b", "- x", "#tag", "'quoted'", '"q"', "ボブの誕生日", "x\u2028y", "\ufeffbom"]
)
def test_names_that_mean_something_in_yaml_come_back_as_text(name):
    assert parse_memo(render_memo(memo(name=name, tags=(name[:32],)), pinned=False)).draft().tags == (name,)
    assert parse_memo(render_memo(memo(name=name), pinned=False)).name == name


def test_a_file_written_by_hand_takes_defaults_and_tolerates_crlf_and_a_bom():
    file = parse_memo("\ufeff---\r\nname: standup\r\n---\r\nStandup at 10:00\r\n")

    assert (file.name, file.audience, file.pinned) == ("standup", WORKSPACE, False)
    draft = file.draft()
    assert (draft.content, draft.priority, draft.tags, draft.detail) == ("Standup at 10:00", 3, (), None)


@pytest.mark.parametrize("visibility", ["visibility: conversation\n", "visibility: workspace\n", ""])
def test_conversation_workspace_names_the_workspace_as_the_conversation_option_does(visibility):
    file = parse_memo(f"---\nname: standup\n{visibility}conversation: workspace\n---\nStandup at 10:00\n")

    assert file.audience == WORKSPACE


BAD_CONVERSATION = "conversation must be one conversation's id, such as C123 (one word, no control characters)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\n---\nhi\n", "no front matter: a memo file starts with a line ---"),
        ("---\nname: x\nhi\n", "the front matter has no closing --- line"),
        ("---\nname: [x\n---\nhi\n", "the front matter is not valid YAML (line 2)"),
        # nested absurdly deep: PyYAML's composer recursed (an uncaught RecursionError ended the whole import)
        ("---\nname: x\ntags: " + "[" * 2000 + "]" * 2000 + "\n---\nhi\n", "the front matter is not valid YAML (line 3)"),
        # a date that is no date: PyYAML's constructor raised ValueError (an uncaught one ended the whole import)
        ("---\nname: x\ncreated: 2024-02-30\n---\nhi\n", "the front matter is not valid YAML (line 3)"),
        ("---\nname: x\npinned: !!bool maybe\n---\nhi\n", "the front matter is not valid YAML (line 3)"),  # KeyError
        # aliases expanding to a million values (a billion laughs, smaller): the priority's check wrote them all out
        ("---\nname: x\npriority:\n" + laughs(6) + "---\nhi\n", "the front matter is not valid YAML (line 8)"),
        # aliases nesting collections 1,080 deep: the priority's check recursed (an uncaught RecursionError ended
        # the whole import)
        ("---\nname: x\npriority:\n" + towers(12) + "---\nhi\n", "the front matter is not valid YAML (line 5)"),
        ("---\n- x\n---\nhi\n", "the front matter must be a mapping of fields such as name: and tags:"),
        ("---\npriority: 3\n---\nhi\n", "the front matter has no name"),
        ("---\nname: x\ntag: [a]\n---\nhi\n", "unknown field tag (known: name, priority, tags, visibility, "
         "conversation, pinned, created, updated, revision)"),
        ("---\nname: x\nvisibility: team\n---\nhi\n", "visibility must be workspace or conversation"),
        ("---\nname: x\nconversation: D1\n---\nhi\n", "conversation is only for a memo with visibility: conversation"),
        ("---\nname: x\nvisibility: conversation\n---\nhi\n",
         "visibility: conversation needs the conversation's id (conversation: C123)"),
        ("---\nname: x\npinned: maybe\n---\nhi\n", "pinned must be true or false"),
        # YAML's escapes reach what the file's UTF-8 cannot hold: a lone surrogate no store takes, a line break
        ('---\nname: x\nvisibility: conversation\nconversation: "D\\ud800"\n---\nhi\n', BAD_CONVERSATION),
        ('---\nname: x\nvisibility: conversation\nconversation: "D1\\nD2"\n---\nhi\n', BAD_CONVERSATION),
        ("---\nname: x\nvisibility: conversation\nconversation: D1 D2\n---\nhi\n", BAD_CONVERSATION),
    ],
)
def test_malformed_files_say_what_is_wrong(text, problem):
    with pytest.raises(MemoFileError) as error:
        parse_memo(text)
    assert str(error.value) == problem


def test_an_invalid_name_is_refused_by_the_memo_rule_and_other_fields_when_drafted():
    with pytest.raises(MemoError) as bad_name:
        parse_memo("---\nname: 2024\n---\nhi\n")
    assert bad_name.value.code == "not_text"

    file = parse_memo("---\nname: x\ntags: [a, b, c, d]\n---\nhi\n")
    with pytest.raises(MemoError) as too_many:
        file.draft()
    assert too_many.value.code == "too_many_tags"


def test_only_files_starting_with_a_fence_have_front_matter():
    assert has_front_matter("---\nname: x\n---\n")
    assert has_front_matter("\ufeff---\r\n")
    assert not has_front_matter("# Notes\n---\n")
    assert not has_front_matter("")
