"""What the search tools say back to the model, in Japanese or English."""

from __future__ import annotations

from datetime import tzinfo

from myao2.application.context import format_message
from myao2.application.search import MemoHit, MessageHit, NoteHit, SearchError
from myao2.domain.memory import bullet_line, digest_line
from myao2.infrastructure.llm.memo_messages import DEFAULT_LANGUAGE

_TEXTS: dict[str, dict[str, str]] = {
    "ja": {
        "blank_query": "query が空です。探したいことを書いてください。",
        "query_too_long": "query が長すぎます（上限{limit}文字）。",
        "bad_limit": "limit は1から{limit}までの整数で指定してください。",
        "bad_before": "before は 2026-01-31 や 2026-01-31T09:00 のような日付・日時で指定してください。",
        "unknown_channel": "そのチャンネルは見つかりません。channel を省くと見られる全チャンネルから探します。",
        "no_memos": "該当するメモは見つかりませんでした。",
        "memos_header": "見つかったメモ（関連の高い順）:",
        "memo_line": "- {name}（優先度{priority}）{tags}{content}",
        "no_messages": "該当する過去のメッセージは見つかりませんでした。",
        "messages_header": "見つかった過去のメッセージ（関連の高い順、→ が該当メッセージ、前後の流れつき）:",
        "hit_header": "{number}. #{channel}",
        "notes_header": "過去の日のまとめと記憶（関連の高い順、日付つき）:",
        "workspace": "ワークスペース",
    },
    "en": {
        "blank_query": "The query is empty. Write what you are looking for.",
        "query_too_long": "The query is too long (at most {limit} characters).",
        "bad_limit": "limit must be a whole number from 1 to {limit}.",
        "bad_before": "before must be a date or a date and time such as 2026-01-31 or 2026-01-31T09:00.",
        "unknown_channel": "No such channel. Leave channel out to search every channel you can see.",
        "no_memos": "No matching memos.",
        "memos_header": "Memos found, most relevant first:",
        "memo_line": "- {name} (priority {priority}) {tags}{content}",
        "no_messages": "No matching past messages.",
        "messages_header": "Past messages found, most relevant first (→ marks the match; its neighbours show the flow):",
        "hit_header": "{number}. #{channel}",
        "notes_header": "Digests of past days and memories found, most relevant first, with their dates:",
        "workspace": "the workspace",
    },
}


def error_message(error: SearchError, language: str) -> str:
    """A refused search, explained so that the model can correct itself."""
    return _texts(language)[error.code].format(**error.params)


def memo_hits_message(hits: list[MemoHit], language: str) -> str:
    """One line per memo found."""
    texts = _texts(language)
    if not hits:
        return texts["no_memos"]
    lines = [texts["memos_header"]]
    for hit in hits:
        memo = hit.memo
        lines.append(
            texts["memo_line"].format(
                name=memo.name,
                priority=memo.priority,
                tags=f"[{', '.join(memo.tags)}] " if memo.tags else "",
                content=" ".join(memo.content.split()),
            )
        )
    return "\n".join(lines)


def message_hits_message(hits: list[MessageHit], language: str, timezone: tzinfo) -> str:
    """Each message found under its channel's name, between the messages around it."""
    texts = _texts(language)
    if not hits:
        return texts["no_messages"]
    lines = [texts["messages_header"]]
    for number, hit in enumerate(hits, start=1):
        channel = hit.channel.name if hit.channel else hit.message.channel_id
        lines.append(texts["hit_header"].format(number=number, channel=channel))
        for message in hit.context:
            marker = "→" if message.ts == hit.message.ts else " "
            lines.append(f"  {marker} {format_message(message, timezone, {})}")
    return "\n".join(lines)


def recall_message(hits: list[MessageHit], notes: list[NoteHit], language: str, timezone: tzinfo) -> str:
    """The messages found, then the digests and memories found (left out when there are none)."""
    text = message_hits_message(hits, language, timezone)
    if not notes:
        return text
    texts = _texts(language)
    lines = [text, "", texts["notes_header"]]
    for number, note in enumerate(notes, start=1):
        lines.append(f"{number}. {note.label or texts['workspace']}")
        shown = [digest_line(note.digest)] if note.digest else [bullet_line(b) for b in note.bullets]
        lines.extend(f"  {line}" for line in shown)
    return "\n".join(lines)


def _texts(language: str) -> dict[str, str]:
    return _TEXTS.get(language, _TEXTS[DEFAULT_LANGUAGE])
