"""Fixed things the bot says without asking the model, in each persona language."""

from __future__ import annotations

from datetime import timedelta

from myao2.application.context import Marks

_APOLOGY = {
    "ja": "ごめんね、いまちょっと考えがまとまらないみたい…。少し時間をおいて、もう一度話しかけてくれるとうれしいな。",
    "en": "Sorry, I can't seem to think straight right now. Could you ask me again in a little while?",
}


def apology(language: str) -> str:
    """What the bot posts when the model keeps failing."""
    return _APOLOGY.get(language, _APOLOGY["ja"])


def prompt_marks(language: str) -> Marks:
    """How a prompt says that part of a message, or older messages, were left out."""
    if language == "en":
        return Marks(
            cut=lambda count: f" … [{count} more characters left out]",
            dropped=lambda count: f"({count} earlier messages left out)",
        )
    return Marks(
        cut=lambda count: f" …［以下{count}文字省略］",
        dropped=lambda count: f"（これより前の{count}件のメッセージは省略）",
    )


_TOOL_TITLES = {
    "ja": {
        "add_memo": "メモを追加: {name}",
        "edit_memo": "メモを更新: {name}",
        "remove_memo": "メモを削除: {name}",
        "get_memo": "メモを参照: {name}",
        "search_memo": "メモを検索: {query}",
        "recall": "会話を検索: {query}",
    },
    "en": {
        "add_memo": "Add memo: {name}",
        "edit_memo": "Edit memo: {name}",
        "remove_memo": "Remove memo: {name}",
        "get_memo": "Read memo: {name}",
        "search_memo": "Search memos: {query}",
        "recall": "Search messages: {query}",
    },
}


def tool_title(tool: str, args: dict[str, object], language: str) -> str | None:
    """The line shown while the model uses a memo or search tool (given its arguments); None for other tools."""
    template = _TOOL_TITLES.get(language, _TOOL_TITLES["ja"]).get(tool)
    subject = args.get("memo_name", args.get("name", args.get("query")))
    if template is None or not isinstance(subject, str) or not subject.strip():
        return None
    subject = " ".join(subject.split())[:80]
    return template.format(name=subject, query=subject)


def elapsed_phrase(elapsed: timedelta, language: str) -> str:
    """A rough, human way of saying how long ago: "3 minutes", "2時間"."""
    seconds = max(0, int(elapsed.total_seconds()))
    for unit_seconds, ja, en in _UNITS:
        if seconds >= unit_seconds:
            count = seconds // unit_seconds
            if language == "en":
                return f"{count} {en}{'' if count == 1 else 's'}"
            return f"{count}{ja}"
    return "0秒" if language != "en" else "0 seconds"


_UNITS = ((86400, "日", "day"), (3600, "時間", "hour"), (60, "分", "minute"), (1, "秒", "second"))
