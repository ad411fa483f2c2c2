"""The HTTP Events API mode: signed requests from Slack are verified, acknowledged and answered."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request

from tests.e2e.conftest import ALICE, GENERAL, START_SECONDS, BotProcess, free_port, held_port, wait_until
from tests.e2e.test_mentions import replies_in
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack

SIGNING_SECRET = "e2e-signing-secret"


def send_event(port: int, event: dict, secret: str = SIGNING_SECRET) -> int:
    body = json.dumps(
        {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event": event, "event_id": "Ev1", "event_time": int(time.time())}
    ).encode()
    timestamp = str(int(time.time()))
    signature = "v0=" + hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/slack/events",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def serving(bot: BotProcess, event: dict) -> int:
    """The port of the bot started in HTTP mode, once it refuses `event` forged there.

    A port picked free may be taken by another process before the bot binds it: the bot then exits 2,
    and is started again on another port.
    """
    for _ in range(3):
        port = free_port()
        bot.settings["slack.http_port"] = port
        bot.start(wait_connected=False)

        def refused() -> bool:
            try:
                return send_event(port, event, secret="forged") == 401
            except OSError:
                return False

        wait_until(lambda: refused() or bot.process.poll() is not None, timeout=START_SECONDS, what="the HTTP endpoint to refuse a forged request")
        if bot.process.poll() is None:
            return port
        assert bot.stop() == 2 and f"myao2: slack.http_port: port {port} is already in use" in bot.log(), bot.log()
    raise AssertionError("every port picked was taken")


def test_a_port_in_use_exits_2_with_one_line_naming_slack_http_port(bot: BotProcess) -> None:
    bot.settings.update({"slack.mode": "http", "slack.signing_secret": SIGNING_SECRET})
    with held_port("0.0.0.0") as port:  # until the bot has exited
        bot.settings["slack.http_port"] = port
        bot.start(wait_connected=False)
        assert bot.wait_exit() == 2
    log = bot.log()
    assert f"myao2: slack.http_port: port {port} is already in use\n" in log and "Traceback" not in log


def test_signed_mention_over_http_is_answered_and_forged_one_refused(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.settings.update({"slack.mode": "http", "slack.signing_secret": SIGNING_SECRET})
    bot.settings["response.mention_catchup_seconds"] = 0  # the mention must come over HTTP, not catch-up
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello over http", emit=False)
    event = {"type": "app_mention", "user": ALICE, "text": f"<@{slack.bot_user_id}> hello over http", "ts": ts, "channel": GENERAL, "event_ts": ts}
    port = serving(bot, event)
    assert not slack.posted
    llm.script(Text("Hi from HTTP mode."))
    assert send_event(port, event) == 200
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    assert replies_in(slack, ts)[0]["text"] == "Hi from HTTP mode."
    assert bot.stop() == 0
