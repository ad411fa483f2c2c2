"""PendingReaction: sent only for answers slow to show, however their showing goes."""

from __future__ import annotations

import asyncio

import pytest

from myao2.application import reaction as reaction_module
from myao2.application.reaction import PendingReaction


class Sent:
    """The reactions sent, in order, by name."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.any = asyncio.Event()

    def sender(self, name: str):  # type: ignore[no-untyped-def]
        async def send() -> None:
            self.names.append(name)
            self.any.set()

        return send


@pytest.fixture(autouse=True)
def short_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reaction_module, "REACTION_DELAY_SECONDS", 0.05)


async def test_an_answer_about_to_show_that_did_not_gets_its_reaction_when_due() -> None:
    # Slack refused to start its stream: it shows only once written, posted whole, however slow that is.
    sent = Sent()
    reaction = PendingReaction(sent.sender("refused"))
    await reaction.before_answer()
    reaction.not_shown()
    await asyncio.wait_for(sent.any.wait(), 30)
    assert sent.names == ["refused"]


async def test_an_attempt_over_or_an_answer_shown_keeps_its_reaction_unsent() -> None:
    sent = Sent()
    dropped = PendingReaction(sent.sender("dropped"))
    dropped.drop()
    dropped.not_shown()
    shown = PendingReaction(sent.sender("shown"))
    await shown.before_answer()
    control = PendingReaction(sent.sender("control"))  # due after both: by then they would have been sent
    await asyncio.wait_for(sent.any.wait(), 30)
    assert sent.names == ["control"]
