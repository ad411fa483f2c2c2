"""FakeSlack's chat.startStream / appendStream / stopStream against slack_sdk's own stream helper."""

from __future__ import annotations

import asyncio

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import FakeSlack


@pytest.fixture
def fake():
    with FakeSlack(ack_timeout=None) as slack:
        slack.add_user("U1", "alice")
        slack.add_channel("C1", "general", members=["U1"])
        slack.add_channel("D1", "alice-dm", is_im=True, members=["U1"])
        slack.add_channel("C3", "outside", members=["U1"], bot_member=False)
        yield slack


def web_client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=fake.bot_token, base_url=fake.base_url)


async def test_stream_grows_a_thread_reply_that_replies_show(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    streamer = await web_client(fake).chat_stream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", buffer_size=5
    )
    await streamer.append(markdown_text="Hello")
    await streamer.append(markdown_text=", wor")
    await streamer.append(
        markdown_text="ld", chunks=[{"type": "task_update", "id": "t1", "title": "memo", "status": "in_progress"}]
    )
    mid = await web_client(fake).conversations_replies(channel="C1", ts=parent)
    assert mid["messages"][1]["text"] == "Hello, world" and mid["messages"][1]["bot_id"] == "BBOT"
    assert fake.streams[0]["streaming"] is True

    await streamer.stop(
        markdown_text="!",
        chunks=[{"type": "task_update", "id": "t1", "title": "memo", "status": "complete"}],
        metadata={"event_type": "answer", "event_payload": {"to": parent}},
    )
    [stream] = fake.streams
    assert [c["method"] for c in stream["calls"]] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.stopStream",
    ]
    assert "".join(c["markdown"] for c in stream["calls"]) == "Hello, world!"
    assert stream["thread_ts"] == parent and stream["recipient_user_id"] == "U1" and not stream["streaming"]
    assert stream["tasks"]["t1"]["status"] == "complete"
    assert [t["status"] for t in stream["task_history"]] == ["in_progress", "complete"]
    replies = await web_client(fake).conversations_replies(channel="C1", ts=parent)
    final = replies["messages"][1]
    assert final["ts"] == streamer.ts and final["thread_ts"] == parent and final["text"] == "Hello, world!"
    assert final["metadata"]["event_type"] == "answer"


async def test_a_stopped_stream_takes_no_more(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "U1", "hi")
    client = web_client(fake)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="a"
    )
    await client.chat_stopStream(channel="C1", ts=started["ts"])
    for call in (
        client.chat_appendStream(channel="C1", ts=started["ts"], markdown_text="b"),
        client.chat_stopStream(channel="C1", ts=started["ts"]),
    ):
        with pytest.raises(SlackApiError) as info:
            await call
        assert info.value.response["error"] == "message_not_in_streaming_state"
    posted = await client.chat_postMessage(channel="C1", text="plain")
    with pytest.raises(SlackApiError) as info:
        await client.chat_appendStream(channel="C1", ts=posted["ts"], markdown_text="b")
    assert info.value.response["error"] == "message_not_in_streaming_state"
    with pytest.raises(SlackApiError) as info:
        await client.chat_appendStream(channel="C1", ts=parent, markdown_text="b")
    assert info.value.response["error"] == "message_not_owned_by_app"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"channel": "C1", "recipient_team_id": "T1"}, "missing_recipient_user_id"),
        ({"channel": "C1", "recipient_user_id": "U1"}, "missing_recipient_team_id"),
        ({"channel": "C3", "recipient_user_id": "U1", "recipient_team_id": "T1"}, "not_in_channel"),
        ({"channel": "C404"}, "channel_not_found"),
        ({"channel": "C1", "recipient_user_id": "U1", "recipient_team_id": "T1", "thread_ts": "1.000001"},
         "thread_not_found"),
        ({"channel": "C1", "recipient_user_id": "U1", "recipient_team_id": "T1", "chunks": [{"type": "x"}]},
         "invalid_chunks"),
        ({"channel": "C1", "recipient_user_id": "U1", "recipient_team_id": "T1",
          "chunks": [{"type": "task_update", "id": "t", "title": "x", "status": "done"}]}, "invalid_chunks"),
        ({"channel": "C1", "recipient_user_id": "U1", "recipient_team_id": "T1", "markdown_text": "x" * 12_001},
         "msg_too_long"),
    ],
)
async def test_start_refuses_bad_arguments(fake: FakeSlack, kwargs: dict, error: str) -> None:
    parent = fake.post_message("C1", "U1", "hi")
    kwargs = {"thread_ts": parent, **kwargs}
    with pytest.raises(SlackApiError) as info:
        await web_client(fake).chat_startStream(**kwargs)
    assert info.value.response["error"] == error
    assert fake.streams == []


async def test_top_level_stream_only_in_a_dm_and_without_recipients(fake: FakeSlack) -> None:
    client = web_client(fake)
    with pytest.raises(SlackApiError) as info:
        await client.api_call(
            "chat.startStream", json={"channel": "C1", "recipient_user_id": "U1", "recipient_team_id": "T1"}
        )
    assert info.value.response["error"] == "invalid_arguments"
    started = await client.api_call("chat.startStream", json={"channel": "D1", "markdown_text": "hey"})
    await client.chat_stopStream(channel="D1", ts=started["ts"], markdown_text=" you")
    [msg] = [m for m in fake.messages("D1") if m["user"] == "UBOT"]
    assert msg["text"] == "hey you" and "thread_ts" not in msg


@pytest.mark.parametrize("error", ["not_allowed", "feature_not_enabled", "unknown_method"])
async def test_refused_streaming_fails_every_stream_method(fake: FakeSlack, error: str) -> None:
    parent = fake.post_message("C1", "U1", "hi")
    fake.refuse_streaming(error)
    client = web_client(fake)
    with pytest.raises(SlackApiError) as info:
        await client.chat_startStream(channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1")
    assert info.value.response["error"] == error
    assert fake.streams == [] and len(fake.messages("C1")) == 1
    fake.refuse_streaming(None)
    assert (await client.chat_startStream(channel="C1", thread_ts=parent, recipient_user_id="U1",
                                          recipient_team_id="T1"))["ok"]


async def test_appends_faster_than_allowed_get_429(fake: FakeSlack) -> None:
    fake.append_min_interval = 60  # no pause of a loaded machine between the two calls makes the append in time
    parent = fake.post_message("C1", "U1", "hi")
    client = web_client(fake)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="a"
    )
    with pytest.raises(SlackApiError) as info:
        await client.chat_appendStream(channel="C1", ts=started["ts"], markdown_text="b")
    assert info.value.response.status_code == 429 and info.value.response.headers["Retry-After"] == "1"
    [stream] = fake.streams
    assert len(stream["calls"]) == 1
    fake.append_min_interval = 0.3
    await asyncio.sleep(0.35)
    assert (await client.chat_appendStream(channel="C1", ts=started["ts"], markdown_text="b"))["ok"]
    assert fake.messages("C1")[-1]["text"] == "ab"


async def test_an_injected_not_streaming_error_ends_the_stream_as_slack_only_says_so_of_one_it_no_longer_streams(
    fake: FakeSlack,
) -> None:
    parent = fake.post_message("C1", "U1", "hi")
    client = web_client(fake)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="a"
    )
    fake.inject_error("chat.appendStream", "message_not_in_streaming_state")
    for call in (
        client.chat_appendStream(channel="C1", ts=started["ts"], markdown_text="b"),
        client.chat_stopStream(channel="C1", ts=started["ts"], markdown_text="c"),
    ):
        with pytest.raises(SlackApiError) as info:
            await call
        assert info.value.response["error"] == "message_not_in_streaming_state"
    assert not fake.streams[0]["streaming"] and fake.messages("C1")[-1]["text"] == "a"


async def test_update_sets_keeps_or_removes_the_metadata_as_slack_documents(fake: FakeSlack) -> None:
    client = web_client(fake)
    posted = await client.chat_postMessage(channel="C1", text="hello")
    marked = {"event_type": "answer", "event_payload": {"to": "1.0"}}

    await client.chat_update(channel="C1", ts=posted["ts"], text="hello again", metadata=marked)
    assert fake.messages("C1")[-1]["metadata"] == marked and fake.posted[-1]["metadata"] == marked
    await client.chat_update(channel="C1", ts=posted["ts"], text="hello, third")  # no metadata: it is kept
    assert fake.messages("C1")[-1]["metadata"] == marked
    replies = await client.conversations_history(channel="C1", include_all_metadata=True)
    assert replies["messages"][0]["metadata"] == marked
    await client.chat_update(channel="C1", ts=posted["ts"], text="hello, fourth", metadata={})  # {}: removed
    assert "metadata" not in fake.messages("C1")[-1]
    with pytest.raises(SlackApiError) as info:
        await client.chat_update(channel="C1", ts=posted["ts"], text="x", metadata={"event_payload": {}})
    assert info.value.response["error"] == "invalid_metadata_format"
