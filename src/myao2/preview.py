"""What the bot would send the model now for a conversation, from the database alone.

The prompt comes from the very agents and context builder the bot runs with (see
`myao2.composition`), so the preview cannot drift from what the bot sends. Used by
`myao2 preview` and by the MCP server's `preview` tool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from myao2.application.context import PromptContext, line_tokens, section_tokens
from myao2.application.conversations import Conversations
from myao2.composition import Application, memory_budgets
from myao2.domain.conversation import BotIdentity, Channel, Message
from myao2.domain.memo import Memo, MemoError, lookup_name
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import Reader, can_read_from, may_know_of, shows_its_own
from myao2.infrastructure.llm.agents import ModelPrompt

Role = Literal["response", "judgment", "memory"]


class PreviewError(Exception):
    """The preview cannot be made: an unknown conversation, a bot that never connected, ..."""


@dataclass(frozen=True)
class Section:
    """One part of a prompt: its estimated tokens (see `estimate_tokens`) and the budget it is fitted to."""

    name: str
    tokens: int
    budget: int | None = None
    """None for a part no budget cuts (its size is set by counts or by the templates)."""


@dataclass(frozen=True)
class Preview:
    """The first model call an agent would make now: its prompt and what each part of it costs.

    `prompt` is None when the agent would make no call (the memory of a channel with nothing new).
    """

    role: Role
    channel_id: str
    thread_ts: str | None
    prompt: ModelPrompt | None
    sections: tuple[Section, ...] = ()

    def to_json(self) -> dict[str, object]:
        """The preview as JSON-ready data."""
        prompt = self.prompt
        return {
            "role": self.role,
            "channel": self.channel_id,
            "thread": self.thread_ts,
            "system": prompt.system if prompt else None,
            "query": prompt.query if prompt else None,
            "tools": list(prompt.tools) if prompt else [],
            "sections": [{"name": s.name, "tokens": s.tokens, "budget": s.budget} for s in self.sections],
        }


class Previewer:
    """Makes previews over the application's stores, as the bot that last connected."""

    def __init__(self, app: Application, bot: BotIdentity) -> None:
        self._app = app
        self._bot = bot
        # No chat platform: only what is stored is known, as the bot knows it.
        self._talk = Conversations(app.conversations, None, bot, app.persona.name)

    async def preview(
        self,
        role: Role,
        channel_id: str,
        thread_ts: str | None = None,
        as_user: str | None = None,
        reader: Reader | None = None,
    ) -> Preview:
        """The preview of `role`'s next call for the conversation (a thread, or the channel's top-level flow).

        The response answers the latest message of `as_user` (default: of anyone but the bot). Refused for a
        conversation the bot is no longer in: it sends no prompt there, and what was said there is shown in no
        conversation, its own included, until it joins again (`shows_its_own`). Refused too where the prompt shows
        what conversation `reader` (who is shown the preview; None: a person's own view) may not read: what the bot
        remembers for the conversation alone (notes, digests, facts about people), say. The refusal never shows it,
        and tells a conversation that `reader` may not know of (`may_know_of`) from none.
        """
        channel = await asyncio.to_thread(self._app.conversations.get_channel, channel_id)
        if channel is None or not may_know_of(reader, channel):
            unknown = f"the bot has not seen a conversation {channel_id}"
            if reader is None:
                raise PreviewError(unknown)
            raise PreviewError(f"{unknown}, or it keeps to itself (previewed there alone: --conversation {channel_id})")
        if not shows_its_own(channel):
            raise PreviewError(
                f"the bot is no longer in {channel_id} (left or removed from it): it sends no prompt there until it"
                " joins again"
            )
        if role == "memory":
            shown, readable = await self._memory(channel, reader)
        else:
            shown, readable = await self._conversation(role, channel, thread_ts, as_user, reader)
        if not readable:
            raise PreviewError(
                f"the prompt of {channel_id} shows what the bot remembers for {channel_id} alone (memos, notes, digests"
                f" or facts about people): preview it for {channel_id} itself (--conversation {channel_id})"
            )
        return shown

    async def _conversation(
        self, role: Role, channel: Channel, thread_ts: str | None, as_user: str | None, reader: Reader | None
    ) -> tuple[Preview, bool]:
        """The response's or the judgment's preview, and whether `reader` may read all the prompt shows of what the
        bot keeps: each memo is the one its name means there, each memory section is as shown there too."""
        response = self._app.config.response
        since = self._app.clock.now() - timedelta(seconds=response.max_message_age_seconds)
        messages = await self._talk.messages(channel.id, thread_ts, response.context_message_limit, since)
        names = await self._talk.names(messages)
        await self._app.clients.load()  # the tools' modules, imported off the event loop
        if role == "judgment":
            context = await self._app.contexts.build(channel, messages, names)
            newest = messages[-1].posted_at if messages else self._app.clock.now()
            prompt = self._app.judge.prompt(context, self._app.clock.now() - newest)
        else:
            answering = self._answering(messages, as_user)
            context = await self._app.contexts.build(channel, messages, names, answering=answering)
            prompt = self._app.writer.prompt(context)
        memos = (*context.rules, *context.important_memos, *context.recent_memos)
        shown = Preview(role, channel.id, thread_ts, prompt, self._sections(prompt, context))
        if reader is None:
            return shown, True
        readable = await asyncio.to_thread(self._reads_all, memos, reader)
        return shown, readable and context.memory == await self._app.contexts.memory_also_shown_to(
            channel, messages, reader
        )

    def _reads_all(self, memos: Iterable[Memo], reader: Reader) -> bool:
        """Whether each of `memos` is the one its name means to conversation `reader` (what its memo tools give it)."""
        for memo in memos:
            try:
                if self._app.memos.get(lookup_name(memo.name), reader).id != memo.id:
                    return False
            except MemoError:
                return False
        return True

    def _answering(self, messages: list[Message], as_user: str | None) -> Message | None:
        def answerable(message: Message) -> bool:
            return message.user_id == as_user if as_user else message.user_id != self._bot.user_id

        for message in reversed(messages):
            if answerable(message):
                return message
        if as_user:
            raise PreviewError(f"{as_user} has no message in this conversation to answer")
        return None

    async def _memory(self, channel: Channel, reader: Reader | None) -> tuple[Preview, bool]:
        """The memory's preview, and whether `reader` may read what is kept for the call's audience of each channel
        it reads (`can_read_from`): the call shows nothing that not everyone of that audience may read."""
        call = await self._app.memory_job.next_call(channel.id)
        if call is None:
            return Preview("memory", channel.id, None, None), True
        await self._app.clients.load()
        prompt = self._app.memory_writer.prompt(call.prompts)
        budget = self._app.config.memory.batch_max_tokens
        material = sum(line_tokens(line) for p in call.prompts for line in (*p.earlier, *p.material))
        shown = Preview("memory", channel.id, None, prompt, (*_whole(prompt), Section("messages", material, budget)))
        readable = all(
            can_read_from(reader, call.audience, p.channel.id if p.channel else None, p.channel) for p in call.prompts
        )
        return shown, readable

    def _sections(self, prompt: ModelPrompt, context: PromptContext) -> tuple[Section, ...]:
        budgets = memory_budgets(self._app.config)
        memory = context.memory
        memos = [*context.important_memos, *context.recent_memos]
        return (
            *_whole(prompt),
            Section("rules", sum(estimate_tokens(m.content) for m in context.rules)),
            Section("memory: workspace", section_tokens(memory.workspace), budgets.workspace),
            Section(
                "memory: channel",
                section_tokens(memory.channel_long) + section_tokens(memory.channel_short),
                budgets.channel,
            ),
            Section("memory: thread", section_tokens(memory.thread), budgets.thread),
            Section("memory: elsewhere", section_tokens(memory.elsewhere), budgets.elsewhere),
            Section("memory: digests", section_tokens(memory.digests), budgets.digest),
            Section("memory: people", section_tokens(memory.people), budgets.people),
            Section("memos", sum(estimate_tokens(m.content) for m in memos)),
            Section(
                "conversation",
                sum(line_tokens(line) for line in context.conversation),
                self._app.config.response.conversation_max_tokens,
            ),
        )


def _whole(prompt: ModelPrompt) -> tuple[Section, ...]:
    tools = json.dumps(list(prompt.tools), ensure_ascii=False)
    return (
        Section("system prompt", estimate_tokens(prompt.system)),
        Section("query", estimate_tokens(prompt.query)),
        Section("tools", estimate_tokens(tools) if prompt.tools else 0),
    )
