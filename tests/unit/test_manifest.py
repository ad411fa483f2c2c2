"""The shipped Slack app manifest asks for every event the app listens to and every scope its calls need."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "myao2"
READS = {"channels:read", "groups:read", "im:read", "mpim:read"}
HISTORY = {"channels:history", "groups:history", "im:history", "mpim:history"}
SCOPES_BY_METHOD = {
    "auth.test": set(),
    "apps.connections.open": set(),  # app-level token (connections:write), not a bot scope
    "chat.postMessage": {"chat:write"},
    "chat.update": {"chat:write"},
    "chat.delete": {"chat:write"},
    "chat.startStream": {"chat:write"},
    "chat.appendStream": {"chat:write"},
    "chat.stopStream": {"chat:write"},
    "reactions.add": {"reactions:write"},
    "users.info": {"users:read"},
    "users.conversations": READS,
    "conversations.info": READS,
    "conversations.members": READS,
    "conversations.history": HISTORY,
    "conversations.replies": HISTORY,
}
SCOPES_BY_EVENT = {
    "app_mention": {"app_mentions:read"},
    "message.channels": {"channels:history"},
    "message.groups": {"groups:history"},
    "message.im": {"im:history"},
    "message.mpim": {"mpim:history"},
}
MESSAGE_EVENTS = {"message.channels", "message.groups", "message.im", "message.mpim"}


def manifest() -> dict:
    return yaml.safe_load((ROOT / "slack-manifest.yaml").read_text())


def source() -> str:
    return "\n".join(path.read_text() for path in SOURCE.rglob("*.py"))


def listened_events() -> set[str]:
    """Event types with a listener: `@listen("name")` (the app's registration) or `@app.event("name")` in the code."""
    events = set(re.findall(r"""(?:@listen|\.event)\(\s*["']([a-z_]+)["']""", source()))
    assert {"message", "app_mention"} <= events, "the listeners were not found: the pattern above is out of date"
    return (events - {"message"}) | (MESSAGE_EVENTS if "message" in events else set())


def called_methods() -> set[str]:
    """Web API methods the code calls through slack_sdk (`client.chat_postMessage(...)` -> chat.postMessage)."""
    names = set(re.findall(r"\.((?:auth|apps|chat|reactions|users|conversations|files|pins|team|bots)_\w+)\(", source()))
    return {name.replace("_", ".", 1).replace("connections_open", "connections.open") for name in names}


def test_the_manifest_subscribes_to_every_event_with_a_listener():
    subscribed = set(manifest()["settings"]["event_subscriptions"]["bot_events"])
    missing = listened_events() - subscribed
    assert not missing, f"add to slack-manifest.yaml bot_events: {sorted(missing)}"


def test_the_manifest_grants_a_scope_for_every_method_called_and_event_subscribed():
    granted = set(manifest()["oauth_config"]["scopes"]["bot"])
    methods = called_methods()
    unknown = methods - SCOPES_BY_METHOD.keys()
    assert not unknown, f"say in SCOPES_BY_METHOD which scopes these need: {sorted(unknown)}"
    assert {"chat.startStream", "chat.postMessage", "reactions.add"} <= methods  # the scan sees the calls
    needed = set().union(*(SCOPES_BY_METHOD[m] for m in methods))
    needed |= set().union(*(SCOPES_BY_EVENT.get(e, set()) for e in manifest()["settings"]["event_subscriptions"]["bot_events"]))
    assert not needed - granted, f"add to slack-manifest.yaml scopes: {sorted(needed - granted)}"


def test_the_manifest_runs_in_socket_mode_and_documents_http_mode():
    text = (ROOT / "slack-manifest.yaml").read_text()
    assert manifest()["settings"]["socket_mode_enabled"] is True
    assert "# request_url: https://" in text and "/slack/events" in text


def test_the_gateway_help_names_the_manifest_scopes():
    from myao2.infrastructure.slack.gateway import BOT_SCOPES

    assert {s.strip() for s in BOT_SCOPES.split(",")} <= set(manifest()["oauth_config"]["scopes"]["bot"])
