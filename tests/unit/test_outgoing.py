"""What the bot sends is made safe alike whether posted whole or streamed in pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from myao2.application import outgoing
from myao2.application.agents import ModelUnavailable
from myao2.application.outgoing import safe_stream, safe_text
from myao2.application.reply_stream import ReplyDone, ReplyEvent, TextDelta, ToolStarted

ZWSP = "\u200b"
PIECES = ["<!channel>", "<!here|here>", "<!subteam^S1|@devs>", "@here", "@everyone", "bob@here.io", "<", ">",
          "!", "@", "chan", "nel", " ", "hi", "\ud800", "<https://x.io|x>", "<@U1>", "\n",
          "メモ", "。", ".", "_", "<!channel|all of us>", "<!subteam^S2|team two>", "@channel"]


async def collect(events: list[ReplyEvent], allow: bool = False) -> list[ReplyEvent]:
    async def source():  # type: ignore[no-untyped-def]
        for event in events:
            yield event

    return [event async for event in safe_stream(source(), allow)]


def deltas(events: list[ReplyEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_safe_text_cleans_and_neutralises_unless_allowed() -> None:
    assert safe_text("<!channel> \ud800", False) == f"@{ZWSP}channel \ufffd"
    assert safe_text("<!channel> \ud800", True) == "<!channel> \ufffd"


async def test_a_broadcast_split_across_deltas_is_still_neutralised() -> None:
    events = [TextDelta("Hey <!chan"), TextDelta("nel> and @he"), TextDelta("re, lunch!"), ReplyDone("Hey <!channel> and @here, lunch!")]

    out = await collect(events)

    assert deltas(out) == f"Hey @{ZWSP}channel and @{ZWSP}here, lunch!"
    assert out[-1] == ReplyDone(f"Hey @{ZWSP}channel and @{ZWSP}here, lunch!")
    assert all("<!" not in e.text for e in out if isinstance(e, TextDelta))


@pytest.mark.parametrize(
    ("parts", "safe"),
    [
        (["hi <!subteam^S1|@devs>"], f"hi @{ZWSP}devs"),
        (["x <!subteam^S1|@d>", " ok"], f"x @{ZWSP}d ok"),
        (["<!here|@here>", "!"], f"@{ZWSP}here!"),
        (["<!channel>@here"], f"@{ZWSP}channel@{ZWSP}here"),
    ],
)
async def test_an_at_sign_inside_a_whole_broadcast_does_not_split_it(parts: list[str], safe: str) -> None:
    out = await collect([*map(TextDelta, parts), ReplyDone("".join(parts))])

    assert deltas(out) == safe


async def test_other_events_pass_through_in_order() -> None:
    started = ToolStarted("c1", "add_memo", "Taking a memo")

    out = await collect([TextDelta("ok "), started, TextDelta("done"), ReplyDone("ok done")])

    assert started in out and out.index(started) > 0
    assert deltas(out) == "ok done"


async def test_a_task_title_is_made_safe_as_the_text_is() -> None:
    # The title quotes the model's tool arguments (a memo's name, a search query), shown before the tool checks them.
    out = await collect([ToolStarted("c1", "get_memo", "Read memo: <!channel> \ud800"), ReplyDone("ok")])

    assert out[0] == ToolStarted("c1", "get_memo", f"Read memo: @{ZWSP}channel \ufffd")
    assert (await collect([ToolStarted("c1", "get_memo", "Read memo: @here")], allow=True))[0].title == (
        "Read memo: @here"
    )


async def test_what_was_held_back_goes_out_before_a_failure() -> None:
    async def failing():  # type: ignore[no-untyped-def]
        yield TextDelta("see you @")
        raise ModelUnavailable("down")

    seen: list[ReplyEvent] = []
    with pytest.raises(ModelUnavailable):
        async for event in safe_stream(failing(), False):
            seen.append(event)

    assert deltas(seen) == "see you @"


@given(st.lists(st.sampled_from(PIECES), max_size=12), st.lists(st.integers(min_value=0, max_value=60), max_size=6), st.booleans())
async def test_streamed_deltas_add_up_to_the_safe_whole(pieces: list[str], cuts: list[int], allow: bool) -> None:
    whole = "".join(pieces)
    points = sorted({min(c, len(whole)) for c in cuts} | {0, len(whole)})
    events: list[ReplyEvent] = [TextDelta(whole[a:b]) for a, b in zip(points, points[1:])]

    out = await collect([*events, ReplyDone(whole)], allow)

    assert deltas(out) == safe_text(whole, allow)
    assert out[-1] == ReplyDone(safe_text(whole, allow))


async def test_a_long_reply_is_made_safe_in_time_proportional_to_its_length(monkeypatch: pytest.MonkeyPatch) -> None:
    made_safe: list[int] = []
    real = outgoing.safe_text

    def counting(text: str, allow: bool) -> str:
        made_safe.append(len(text))
        return real(text, allow)

    monkeypatch.setattr(outgoing, "safe_text", counting)
    pieces = ["ねこ", "が ", "<!here>", " にゃあ。", "see ", "@every", "one ", "ok\n"] * 250  # ~8,000 characters

    out = await collect([*map(TextDelta, pieces), ReplyDone("".join(pieces))])

    whole = "".join(pieces)
    assert deltas(out) == real(whole, False)
    assert sum(made_safe) < 10 * len(whole)  # made safe from the start at every delta: ~1,000 times its length
