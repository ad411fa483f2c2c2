"""Faults end to end: what happened while the bot was down, Slack unreachable, bad tokens, dropped sockets."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.conftest import (
    ALICE,
    BOB,
    GENERAL,
    ON_BOTH_DATABASES,
    START_SECONDS,
    STOP_SECONDS,
    BotProcess,
    held_port,
    wait_until,
)
from tests.e2e.test_conversations import stored_text
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack


@ON_BOTH_DATABASES
def test_a_secret_deleted_while_the_bot_was_down_is_gone_after_the_next_sync(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.start()
    secret = slack.post_message(GENERAL, ALICE, "oops, the vault code is 7291")
    redacted = slack.post_message(GENERAL, BOB, "my token is xoxb-live-123")
    wait_until(lambda: stored_text(bot, GENERAL, redacted), what="the messages stored")
    assert bot.stop() == 0

    slack.delete_message(GENERAL, secret)  # nobody is connected: the events are lost
    slack.edit_message(GENERAL, redacted, "my token is [redacted]")
    bot.start()
    wait_until(lambda: stored_text(bot, GENERAL, secret) is None, what="the deletion found by the sync")
    wait_until(lambda: stored_text(bot, GENERAL, redacted) == "my token is [redacted]", what="the edit found")

    llm.script(Text("Nothing to see here."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what did we say today?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")  # the first loads the model libraries
    prompt = prompt_text(llm.requests[-1])
    assert "what did we say today?" in prompt and "[redacted]" in prompt
    assert "7291" not in prompt and "xoxb-live-123" not in prompt
    assert bot.stop() == 0


def ready(bot: BotProcess) -> int | None:
    """/ready's status, or None while the health server does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}/ready", timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


@pytest.mark.parametrize(("fault", "seconds"), [("refuse", 10.0), ("5xx", 3.0)])
def test_slack_unreachable_at_start_up_is_waited_out_then_answers(
    bot: BotProcess, slack: FakeSlack, llm, fault: str, seconds: float
) -> None:
    slack.set_fault(fault)
    bot.start(wait_connected=False)
    wait_until(lambda: ready(bot) == 503, timeout=START_SECONDS, what="/ready at 503 while Slack is away")
    time.sleep(seconds)
    wait_until(lambda: bot.log().count("Slack is unreachable (attempt") >= 2, what="a second attempt (on a busy machine)")
    assert bot.process.poll() is None, bot.log()
    slack.set_fault(None)
    slack.wait_for(lambda: slack.connected, what="the bot to connect once Slack is back")

    llm.script(Text("Here now."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> finally?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    log = bot.log()
    attempts = log.count("Slack is unreachable (attempt")
    assert 2 <= attempts <= 12, log
    assert "Traceback" not in log
    assert bot.stop() == 0


def test_sigterm_while_slack_is_unreachable_exits_0(bot: BotProcess, slack: FakeSlack) -> None:
    slack.set_fault("refuse")
    bot.start(wait_connected=False)
    wait_until(lambda: "Slack is unreachable" in bot.log(), timeout=START_SECONDS, what="a failed attempt")
    bot.process.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=STOP_SECONDS) == 0  # by itself: its attempts never end otherwise
    assert "Traceback" not in bot.log()


def test_an_invalid_app_token_exits_2_naming_it_at_the_first_refusal(bot: BotProcess, slack: FakeSlack) -> None:
    bot.env_overrides["SLACK_APP_TOKEN"] = "xapp-revoked-token"
    bot.start(wait_connected=False)
    assert bot.wait_exit(timeout=START_SECONDS + STOP_SECONDS) == 2
    assert [method for method, _ in slack.web_calls].count("apps.connections.open") == 1  # not tried again
    log = bot.log()
    assert "slack.app_token" in log and "Traceback" not in log
    assert "xapp-revoked-token" not in log


def test_sigterm_during_socket_mode_retries_exits_within_the_grace_period(bot: BotProcess, slack: FakeSlack) -> None:
    slack.inject_error("apps.connections.open", "internal_error", times=1000)
    bot.start(wait_connected=False)
    wait_until(
        lambda: bot.log().count("Socket Mode connection failed") >= 2, timeout=START_SECONDS, what="two failed connections"
    )
    bot.process.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=STOP_SECONDS) == 0  # by itself: its attempts never end otherwise
    assert "Traceback" not in bot.log()


def reconnections(slack: FakeSlack) -> int:
    """How many Socket Mode connections the bot asked for (apps.connections.open, failed ones too)."""
    return [method for method, _ in slack.web_calls].count("apps.connections.open")


def test_a_socket_dropped_silently_is_replaced_and_the_mention_in_the_gap_answered(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.start()
    wait_until(lambda: ready(bot) == 200, what="/ready")
    connections = slack.connection_count
    llm.script(Text("Sorry, I was briefly away."))

    # Every try to reconnect fails until /ready has shown the socket dead.
    slack.inject_error("apps.connections.open", "internal_error", times=1000)
    opened = reconnections(slack)
    slack.disconnect(kind="silent")
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello? anyone?")
    assert slack.connection_count == connections  # posted in the gap: its events reach no one
    slack.wait_for(lambda: reconnections(slack) > opened, what="a try to reconnect")
    # the dead socket noticed by the first ping unanswered: a ping a second, its pong awaited half a second
    # (slack_sdk's own client noticed only after four of its 5 s ping intervals, 20 s)
    assert "Socket Mode connection ended (closed: ServerTimeoutError: No PONG received after 0.5 seconds)" in bot.log()
    wait_until(lambda: ready(bot) == 503, what="/ready at 503 while the socket is dead")
    slack.clear_injections("apps.connections.open")
    slack.wait_for(lambda: slack.connection_count > connections and slack.connected, what="a new socket")

    slack.wait_for(lambda: replies_in(slack, ts), what="the mention in the gap answered")
    wait_until(lambda: ready(bot) == 200, what="/ready back at 200")
    time.sleep(1)
    assert len(replies_in(slack, ts)) == 1
    assert not [e for e in slack.envelopes if e["payload"]["event"].get("ts") == ts]
    assert bot.stop() == 0


def test_a_health_port_in_use_exits_2_naming_it(bot: BotProcess) -> None:
    with held_port("0.0.0.0") as port:
        bot.settings["health_check.port"] = port
        bot.start(wait_connected=False)
        assert bot.wait_exit() == 2
    log = bot.log()
    assert f"myao2: health_check.port: port {port} is already in use\n" in log
    assert "Traceback" not in log
