"""Slack payloads become domain objects with text that every store and model accepts."""

from __future__ import annotations

import json
import sqlite3

import pytest

from myao2.domain.conversation import ChannelKind, clean_text
from myao2.infrastructure.slack import translate

LONE = json.loads('"a\\ud800b\\udfffc"')  # what a JSON payload with lone surrogates decodes to


def storable(text: str) -> bool:
    with sqlite3.connect(":memory:") as db:
        try:
            db.execute("SELECT ?", (text,)).fetchone()
        except (UnicodeEncodeError, ValueError):
            return False
    return text.encode("utf-8").decode("utf-8") == text


def test_lone_surrogates_would_be_refused_by_sqlite() -> None:
    assert not storable(LONE)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (LONE, "a\ufffdb\ufffdc"),
        ("nul\x00byte", "nul\ufffdbyte"),
        ("emoji 😀 and 日本語 stay", "emoji 😀 and 日本語 stay"),
        (json.loads('"pair \\ud83d\\ude00 joined"'), "pair 😀 joined"),
    ],
)
def test_clean_text_replaces_only_what_cannot_be_stored(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean
    assert storable(clean_text(raw))


def test_a_message_with_lone_surrogates_becomes_storable_text() -> None:
    raw = {"type": "message", "user": "U1", "ts": "1.0", "text": LONE, "files": [{"name": "x\udc00.png"}]}

    message = translate.to_message(raw, "C1", "Alice\ud800")

    assert storable(message.text) and storable(message.user_name)
    assert message.text == "a\ufffdb\ufffdc\n[file: x\ufffd.png]"


def test_people_channels_and_posted_names_are_cleaned_too() -> None:
    person = translate.to_person({"id": "U1", "profile": {"display_name": "Al\ud800ice"}})
    channel = translate.to_channel({"id": "C1", "name": "gen\udfffeneral"})

    assert person.display_name == "Al\ufffdice"
    assert channel.name == "gen\ufffdeneral"
    assert translate.posted_name({"username": "bot\ud800"}) == "bot\ufffd"


def test_a_dm_or_group_dm_with_people_of_another_organisation_keeps_its_kind_and_says_so() -> None:
    dm = translate.to_channel({"id": "D1", "is_im": True, "user": "U9", "is_ext_shared": True})
    pending = translate.to_channel({"id": "G1", "is_mpim": True, "name": "mpdm-a--b", "is_pending_ext_shared": True})
    ordinary = translate.to_channel({"id": "D2", "is_im": True, "user": "U1", "is_ext_shared": False})
    shared = translate.to_channel({"id": "C1", "name": "partners", "is_ext_shared": True})

    assert (dm.kind, dm.ext_shared) == (ChannelKind.IM, True)
    assert (pending.kind, pending.ext_shared) == (ChannelKind.MPIM, True)
    assert not ordinary.ext_shared
    assert (shared.kind, shared.ext_shared) == (ChannelKind.SHARED, False)  # its kind says it


def test_a_persons_organisation_is_named_by_their_workspace_and_their_enterprise_grid_organisation() -> None:
    """Slack says whether someone is of another organisation only implicitly: by their team (users.info `team_id`),
    or, in an Enterprise Grid organisation, by its id (`enterprise_user.enterprise_id`), shared by its workspaces."""
    grid = {"id": "W1", "team_id": "T2", "enterprise_user": {"id": "W1", "enterprise_id": "E1", "teams": ["T2"]}}

    assert translate.organisation_ids({"id": "U1", "team_id": "T1"}) == {"T1"}
    assert translate.organisation_ids(grid) == {"T2", "E1"}
    assert translate.organisation_ids({"id": "U2"}) == frozenset()
    assert translate.bot_organisation_ids({"user_id": "UBOT", "team_id": "T2", "enterprise_id": "E1"}) == {"T2", "E1"}
    assert translate.bot_organisation_ids({"user_id": "UBOT", "team_id": "T1"}) == {"T1"}
