"""The answer and judgment prompts, pinned to the character: a change that should only make them cheaper to build
must leave them as they were (tests/unit/pinned_prompts/). Rewrite the pinned texts after a change meant to alter
them with `PIN_PROMPTS=1` set, and read the diff."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from myao2.application.context import Budget, ContextBuilder, MemorySection, MemorySections, Persona, StoredContext
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import Memo
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer

PINNED = Path(__file__).parent / "pinned_prompts"
NOW = datetime(2025, 1, 2, 3, 4, tzinfo=timezone.utc)
TOKYO = ZoneInfo("Asia/Tokyo")
NAMES = {"U1": "Alice\nSmith", "U2": "ボブ", "UBOT": "myao"}


def memo(name: str, content: str, priority: int, tags: tuple[str, ...] = (), detail: str | None = None) -> Memo:
    return Memo(name, content, priority, tags, NOW, NOW, detail=detail)


FULL_STORED: StoredContext = (
    (
        (memo("no-spoilers", "Never spoil\nmovies", 5),),
        (memo("alice-ramen", "アリスは辛いラーメンが好き", 5, ("food", "alice"), "一蘭"), memo("bob-birthday", "May 3", 4)),
        (memo("dave-cold", "Dave has a cold", 1), memo("carol-trip", "Carol visits Kyoto", 2)),
    ),
    MemorySections(
        workspace=MemorySection(("- the release is on friday",)),
        channel_long=MemorySection(("- lunch is at noon",), omitted=2),
        channel_short=MemorySection(("- ramen talk", "- 雨の話")),
        thread=MemorySection(("- planning the party",)),
        elsewhere=MemorySection(("random: - a cat video",), omitted=1),
        digests=MemorySection(("- 2025-01-01: a quiet day",)),
        people=MemorySection(("- Alice Smith: likes ramen",), omitted=3),
    ),
)
EMPTY_STORED: StoredContext = (((), (), ()), MemorySections())


def conversation() -> list[Message]:
    """Messages that show every way a line is formatted: mentions known and unknown, line breaks, the bot's own,
    one cut to the message budget, and more than the conversation budget takes (the oldest are left out)."""
    texts = [
        ("U1", "Alice\nSmith", "old news " * 40),
        ("U2", "ボブ", "<@U1> ラーメン行く？\n今日は寒いし"),
        ("UBOT", "myao", "行く！ <@U9|carol> も誘おう"),
        ("U1", "Alice\nSmith", "x" * 900),
        ("U2", "ボブ", "<@UBOT> どこがいい？"),
    ]
    return [
        Message("C1", f"{1735786800 + 60 * i}.000100", user, text, name) for i, (user, name, text) in enumerate(texts)
    ]


class Clock:
    def now(self) -> datetime:
        return NOW


CASES = {
    "full": (Channel("C1", "general"), "You adore cats.\nAnd naps.", FULL_STORED, conversation(), -1),
    "dm-empty": (Channel("D1", "alice", ChannelKind.IM), "", EMPTY_STORED, [], None),
    "group": (Channel("G1", "mpdm", ChannelKind.MPIM), "", EMPTY_STORED, conversation()[1:3], 0),
}


def rendered(language: str, case: str) -> str:
    channel, persona_text, stored, messages, answering = CASES[case]
    builder = ContextBuilder(
        None,  # type: ignore[arg-type]  # assemble reads no store
        Clock(),
        Persona("myao", persona_text, language, TOKYO),  # type: ignore[arg-type]
        bot_user_id="UBOT",
        budget=Budget(conversation_tokens=250, message_tokens=120),
        marks=prompt_marks(language),
    )
    context = builder.assemble(
        channel, messages, stored, NAMES, None if answering is None else messages[answering]
    )
    renderer = PromptRenderer(language)  # type: ignore[arg-type]
    parts = [
        f"===== {kind} {part}\n{renderer.render(kind, part, context, elapsed='3 minutes')}\n"  # type: ignore[arg-type]
        for kind in ("response", "judgment")
        for part in ("system", "query")
    ]
    return "".join(parts)


@pytest.mark.parametrize("language", ["ja", "en"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_prompts_are_the_pinned_text(language, case):
    path = PINNED / f"{language}-{case}.txt"
    text = rendered(language, case)
    if os.environ.get("PIN_PROMPTS"):
        path.write_text(text, encoding="utf-8")

    assert text == path.read_text(encoding="utf-8")
