"""Pinned memos: rules people set, which the bot's tools may read but never change."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from myao2.application.context import Budget, ContextBuilder, Persona
from myao2.cli import build_parser
from myao2.config import load_config
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import MemoChanges, MemoError
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.memo_tools import edit_memo, get_memo, remove_memo
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer
from myao2.memo_cli import run_memo_command
from tests.unit.test_memo_tools import PRIVATE, PUBLIC, StepClock, call, dump, ok, seed, text_of

PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "m.db"


@pytest.fixture
def store(db_path) -> SqlMemoStore:
    return SqlMemoStore(open_database(f"sqlite:///{db_path}"), StepClock())


@pytest.mark.parametrize("language", ["en", "ja"])
async def test_the_tools_read_a_pinned_memo_but_refuse_to_edit_or_remove_it(store, db_path, language):
    seed(store, "no-spoilers", content="Never spoil movie endings")
    store.pin("no-spoilers", "user:cli")
    before = dump(db_path)

    edited = await call(edit_memo, store, PUBLIC, language, memo_name="no-spoilers", content="Spoilers are fine")
    removed = await call(remove_memo, store, PUBLIC, language, memo_name="no-spoilers")

    for result in (edited, removed):
        assert result["status"] == "error"
        assert ("rule a person set" if language == "en" else "人が決めたルール") in text_of(result)
    assert dump(db_path) == before
    assert "Never spoil movie endings" in ok(await call(get_memo, store, PUBLIC, language, memo_name="no-spoilers"))


def test_a_person_may_still_change_a_pinned_memo_and_unpin_it(store):
    seed(store, "no-spoilers")
    store.pin("no-spoilers", "user:cli")

    store.edit("no-spoilers", MemoChanges.create(content="Ask before spoiling"), None, "user:cli")

    assert [m.content for m in store.pinned(None)] == ["Ask before spoiling"]
    store.unpin("no-spoilers", "user:cli")
    assert store.pinned(None) == []
    store.edit("no-spoilers", MemoChanges.create(priority=2), PUBLIC, "model:U1")  # an ordinary memo again
    with pytest.raises(MemoError) as error:
        store.unpin("no-spoilers", "user:cli")
    assert error.value.code == "not_pinned"


def test_pinning_twice_is_one_pin_and_unknown_names_are_refused(store):
    seed(store, "rule")
    store.pin("rule", "user:cli")
    store.pin("rule", "user:cli")

    assert len(store.pinned(None)) == 1
    with pytest.raises(MemoError) as error:
        store.pin("nothing", "user:cli")
    assert error.value.code == "unknown_name"


def builder(store: SqlMemoStore) -> ContextBuilder:
    return ContextBuilder(
        store, StepClock(), PERSONA, bot_user_id="UBOT", budget=Budget(6000, 1000), marks=prompt_marks("en")
    )


@pytest.mark.parametrize("kind", ["response", "judgment"])
@pytest.mark.parametrize("language", ["en", "ja"])
async def test_a_pinned_memo_is_a_rule_above_everything_in_every_prompt(store, kind, language):
    seed(store, "no-spoilers", content="Never spoil movie endings", priority=1)
    for i in range(30):
        seed(store, f"filler-{i}", priority=5)
    store.pin("no-spoilers", "user:cli")

    context = await builder(store).build(Channel("C9", "movies"), [])
    text = PromptRenderer(language).render(kind, "query", context, elapsed="1 minute")

    assert "- no-spoilers: Never spoil movie endings" in text
    rules_heading = "Rules people set" if language == "en" else "人が決めたルール"
    assert text.index(rules_heading) < text.index("filler-")
    assert ("the rule wins" if language == "en" else "ルールが優先") in text
    assert [m.name for m in context.important_memos].count("no-spoilers") == 0


async def test_a_pinned_memo_from_a_dm_is_a_rule_only_in_that_dm(store):
    seed(store, "dm-rule", PRIVATE, content="canary-dm rule")
    store.pin("dm-rule", "user:cli")

    public = await builder(store).build(Channel("C1", "general"), [])
    dm = await builder(store).build(Channel(PRIVATE.channel_id or "", "alice", ChannelKind.IM), [])

    assert public.rules == ()
    assert [m.name for m in dm.rules] == ["dm-rule"]


def test_the_command_line_pins_and_unpins(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  database_path: m.db\n")
    config = load_config(path)
    memos = SqlMemoStore(open_database(config.memory.sqlalchemy_url), StepClock())
    seed(memos, "no-spoilers")

    def run(*argv: str) -> int:
        return run_memo_command(config, build_parser().parse_args(["memo", *argv]))

    assert run("pin", "no-spoilers") == 0
    assert "Pinned memo 'no-spoilers'" in capsys.readouterr().out
    assert [m.name for m in memos.pinned(None)] == ["no-spoilers"]
    assert run("unpin", "no-spoilers") == 0
    assert run("unpin", "no-spoilers") == 2
    assert "is not pinned" in capsys.readouterr().err
    assert run("pin", "missing") == 2
