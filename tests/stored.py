"""Reading back what the bot stored of one message, with the reads the bot itself uses."""

from __future__ import annotations

from datetime import datetime, timezone

from myao2.domain.conversation import Message
from myao2.domain.ports import ConversationStore

EVER = datetime.min.replace(tzinfo=timezone.utc)


def stored_message(conversations: ConversationStore, channel_id: str, ts: str) -> Message | None:
    """The message stored at `ts` in `channel_id` (a thread's too), or None."""
    return next((message for message in conversations.messages_since(channel_id, EVER) if message.ts == ts), None)
