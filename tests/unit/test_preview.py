"""The preview over a real store (SQLite and PostgreSQL): what each conversation's prompt may show, and the memory prompt."""

from __future__ import annotations

import asyncio
from datetime import date, datetime, timezone

import pytest
from sqlalchemy import Engine

from myao2.application.notebook import Actor, Notebook
from myao2.composition import Application, build_application
from myao2.config import load_config
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message
from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.visibility import Audience
from myao2.preview import PreviewError, Previewer
from tests.clocks import ManualClock

T0 = 1_700_000_000
BOT = BotIdentity("UBOT", "B1", "T1")
GENERAL, DM = "CGENERAL", "DALICE"


@pytest.fixture
def app(tmp_path, engine: Engine) -> Application:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.yaml"
    path.write_text("persona:\n  name: myao\n  language: en\n  timezone: UTC\n")
    clock = ManualClock(datetime.fromtimestamp(T0 + 600, tz=timezone.utc))
    app = build_application(load_config(path), engine, clock, BOT.user_id)
    store = app.conversations
    store.save_channel(Channel(GENERAL, "general"))
    store.save_channel(Channel(DM, "alice", ChannelKind.IM))
    for channel, offset, user, text in [
        (GENERAL, 1, "UBOB", "lunch plans, <@UBOT>?"),
        (GENERAL, 2, "UALICE", "pizza for me"),
        (DM, 3, "UALICE", "keep a secret for me"),
    ]:
        store.save_message(Message(channel, f"{T0 + offset}.000000", user, text, user.title()))
    notebook = Notebook(app.memos, Actor.CLI)
    notebook.add("lunch-day", "Team lunch is on Fridays", 4)
    notebook.add("surprise", "Alice plans a surprise party for Bob", 5, audience=Audience(DM))
    day = date(2023, 11, 14)
    app.memories.save([Memory(Scope(DM), Term.LONG, Audience(DM), (Bullet(1, "Alice hides a gift", day, ("1.0",)),))])
    return app


def preview(app: Application, role: str, channel: str, **options: str):  # type: ignore[no-untyped-def]
    return asyncio.run(Previewer(app, BOT).preview(role, channel, **options))  # type: ignore[arg-type]


def test_a_public_channel_preview_shows_nothing_of_a_dm(app: Application) -> None:
    public = preview(app, "response", GENERAL)
    private = preview(app, "response", DM)

    assert "Team lunch is on Fridays" in public.prompt.query and "pizza for me" in public.prompt.query
    assert "surprise party" not in public.prompt.query and "hides a gift" not in public.prompt.query
    assert "keep a secret" not in public.prompt.query
    assert "surprise party" in private.prompt.query and "hides a gift" in private.prompt.query


def test_mentions_of_the_bot_read_as_its_name_and_tools_come_with_their_schemas(app: Application) -> None:
    shown = preview(app, "response", GENERAL, as_user="UBOB")

    assert "lunch plans, @myao?" in shown.prompt.query
    add_memo = next(tool for tool in shown.prompt.tools if tool["name"] == "add_memo")
    assert add_memo["parameters"]["type"] == "object" and "name" in add_memo["parameters"]["properties"]
    sections = {s.name: s for s in shown.sections}
    assert sections["conversation"].budget == app.config.response.conversation_max_tokens
    assert sections["conversation"].tokens > 0 and sections["memory: channel"].tokens == 0
    assert sections["memory: people"].budget == app.config.memory.people_max_tokens


def test_the_judgment_preview_offers_only_its_answer_form(app: Application) -> None:
    shown = preview(app, "judgment", GENERAL)

    assert [tool["name"] for tool in shown.prompt.tools] == ["JudgmentOutput"]
    assert "Time since the last message: 9 minutes" in shown.prompt.query


def test_a_conversation_the_bot_has_left_has_no_prompt_to_preview(app: Application) -> None:
    # Its memory of the channel remains (for when it joins again); meanwhile the bot sends no prompt there.
    app.conversations.leave_channel(GENERAL)

    for role in ("response", "judgment", "memory"):
        with pytest.raises(PreviewError, match=f"the bot is no longer in {GENERAL}") as refused:
            preview(app, role, GENERAL)
        assert "pizza" not in str(refused.value)


def test_the_memory_preview_reads_the_messages_not_yet_remembered(app: Application) -> None:
    shown = preview(app, "memory", GENERAL)

    assert f"ts={T0 + 2}.000000" in shown.prompt.query and "pizza for me" in shown.prompt.query
    assert "keep a secret" not in shown.prompt.query
    assert [tool["name"] for tool in shown.prompt.tools] == ["MemoryUpdateOutput"]
    assert {s.name for s in shown.sections} >= {"system prompt", "query", "messages"}


def test_an_unknown_conversation_or_speaker_is_named(app: Application) -> None:
    with pytest.raises(PreviewError, match="CNOWHERE"):
        preview(app, "response", "CNOWHERE")
    with pytest.raises(PreviewError, match="CNOWHERE"):
        preview(app, "memory", "CNOWHERE")
    with pytest.raises(PreviewError, match="UCAROL"):
        preview(app, "response", GENERAL, as_user="UCAROL")


def test_a_thread_preview_reads_that_thread_only(app: Application) -> None:
    parent = f"{T0 + 1}.000000"
    app.conversations.save_message(Message(GENERAL, f"{T0 + 5}.000000", "UALICE", "sushi instead?", "Alice", thread_ts=parent))

    thread = preview(app, "response", GENERAL, thread_ts=parent)
    channel = preview(app, "response", GENERAL)

    assert "sushi instead?" in thread.prompt.query and "pizza for me" not in thread.prompt.query
    assert "sushi instead?" not in channel.prompt.query


def test_the_memory_preview_shows_the_public_channels_read_in_the_same_call(app: Application) -> None:
    app.conversations.save_channel(Channel("CRANDOM", "random"))
    app.conversations.save_message(Message("CRANDOM", f"{T0 + 4}.000000", "UBOB", "the printer is jammed", "Bob"))

    public = preview(app, "memory", GENERAL)
    private = preview(app, "memory", DM)

    assert "pizza for me" in public.prompt.query and "the printer is jammed" in public.prompt.query
    assert "keep a secret" not in public.prompt.query
    assert [tool["name"] for tool in public.prompt.tools] == ["ChannelsMemoryOutput"]
    assert "keep a secret" in private.prompt.query and "pizza" not in private.prompt.query
    assert [tool["name"] for tool in private.prompt.tools] == ["MemoryUpdateOutput"]


def test_the_memory_preview_of_a_public_channel_leaves_out_notes_heard_in_a_channel_turned_private(
    app: Application,
) -> None:
    # #general's notes written while #plans was read in the same call, #plans since private and not narrowed yet:
    # they are #plans' alone from the moment it is stored so (as the answer's prompt already leaves them out), and
    # the memory call for #general, and so its preview for a workspace MCP client, showed them.
    app.conversations.save_channel(Channel("CPLANS", "plans"))
    day = date(2023, 11, 14)
    heard = (GENERAL, "CPLANS")
    app.memories.save(
        [
            Memory(
                Scope(GENERAL),
                Term.LONG,
                Audience(),
                (
                    Bullet(1, "canary: plans picks a new office", day, ("1.0",), heard_in=heard),
                    Bullet(2, "the team likes pizza", day, ("1.5",), heard_in=(GENERAL,)),
                ),
                label="#general",
            )
        ]
    )
    app.conversations.set_channel_kind("CPLANS", ChannelKind.PRIVATE)

    shown = preview(app, "memory", GENERAL)
    assert "the team likes pizza" in shown.prompt.query and "canary" not in shown.prompt.query
