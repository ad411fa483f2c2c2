"""The slack-bolt app that serves the bot's listeners over HTTP (imported in HTTP mode only: slack-bolt is slow to
import, and Socket Mode hands events to the listeners itself)."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from myao2.domain.conversation import BotIdentity
from myao2.infrastructure.slack.events import Listeners


def build_app(
    listeners: Listeners, *, client: AsyncWebClient, bot: BotIdentity, bot_token: str, signing_secret: str
) -> AsyncApp:
    """A bolt app serving the Events API over HTTP: it checks Slack's requests and acknowledges every event
    before handing it to `listeners`.

    `client` carries no token: authorization comes from the identity checked at
    start-up, so bolt makes no `auth.test` call of its own.
    """

    authorized = AuthorizeResult(
        enterprise_id=None,
        team_id=bot.team_id,
        bot_user_id=bot.user_id,
        bot_id=bot.bot_id,
        bot_token=bot_token,
    )

    async def authorize(**_: Any) -> AuthorizeResult:
        return authorized

    app = AsyncApp(
        name="myao2",  # without a name, bolt reads the whole call stack (inspect.stack) to make one up
        client=client,
        authorize=authorize,
        signing_secret=signing_secret,
        # `listeners` tell the bot's own events; workflow functions' tokens and the assistant-thread helpers
        # (say, set_status) bolt builds for each event are never used.
        ignoring_self_events_enabled=False,
        attaching_function_token_enabled=False,
        attaching_conversation_kwargs_enabled=False,
    )

    @app.event(re.compile(".*"))
    async def dispatch(body: dict[str, Any]) -> None:
        await listeners.dispatch(body)

    return app
