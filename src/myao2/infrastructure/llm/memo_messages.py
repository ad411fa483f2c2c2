"""What the memo tools say back to the model, in Japanese or English.

The tools decide; this module only words their outcomes and refusals.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone

from myao2.domain.memo import Memo, MemoError, MemoPage, TagUsage

DEFAULT_LANGUAGE = "ja"
_ECHO_LENGTH = 40
_ECHOED_PARAMS = ("name", "value")  # error params that may quote the model's raw input

_ERRORS: dict[str, dict[str, str]] = {
    "ja": {
        "not_text": "{field} は文字列で指定してください。",
        "blank_name": "メモの名前が空です。短い名前を付けてください。",
        "bad_name_characters": "メモの名前は改行や制御文字を含まない1行にしてください。",
        "name_too_long": "メモの名前が長すぎます（{length}文字、上限{limit}文字）。",
        "blank_content": "内容が空です。覚えておくことを書いてください。",
        "content_too_long": (
            "内容が長すぎます（{length}文字、上限{limit}文字）。短くまとめ、"
            "長い説明は edit_memo の detail に入れてください。"
        ),
        "detail_too_long": "詳細が長すぎます（{length}文字、上限{limit}文字）。",
        "bad_priority": "優先度は1（ささいなこと）から5（とても大事）までの整数です。受け取った値: {value}",
        "tags_not_list": "tags は文字列のリストで指定してください。",
        "tag_too_long": "タグは1つ{limit}文字までです。",
        "too_many_tags": "タグは1つのメモに{limit}個までです（{count}個指定されました）。",
        "too_many_tag_kinds": (
            "タグの種類は全部で{limit}種類までなので、新しいタグ（{new}）は追加できません。"
            "既存のタグから選んでください: {existing}"
        ),
        "bad_offset": "offset は0から{limit}までの整数で指定してください。",
        "bad_limit": "limit は1から{limit}までの整数で指定してください。",
        "nothing_to_change": (
            "変更する項目がありません。content、priority、tags、detail、new_name のどれかを指定してください。"
        ),
        "name_taken": (
            "「{name}」という名前のメモはすでにあります。edit_memo で更新するか、別の名前にしてください。"
        ),
        "not_removed": "削除済みの「{name}」というメモはありません。",
        "unknown_name": "「{name}」という名前のメモはありません。list_memo で正確な名前を確かめてください。",
        "pinned": "「{name}」は人が決めたルールなので、変更も削除もできません。そのまま従ってください。",
        "not_pinned": "「{name}」はルールとして固定されていません。",
        "wider_audience": (
            "メモ「{name}」はこの会話より広い範囲で見られるので、ここからは変更できません"
            "（ここで話したことがほかの会話に伝わってしまいます）。"
            "代わりに、この会話用のメモを別の名前で add_memo してください。"
        ),
        "changed_meanwhile": (
            "メモ「{name}」はちょうど別のところで変更されました。get_memo で読み直してから、もう一度変更してください。"
        ),
        "too_many_changes": (
            "1回の返信でメモを変更できるのは{limit}回までです。これ以上メモを変更せず、返信を書いてください。"
        ),
        "ambiguous_name": "「{name}」という名前のメモが複数あります（{audiences}）。",
    },
    "en": {
        "not_text": "{field} must be text (a string).",
        "blank_name": "The memo name is empty. Give it a short name.",
        "bad_name_characters": "The memo name must be a single line without control characters.",
        "name_too_long": "The memo name is too long ({length} characters; the limit is {limit}).",
        "blank_content": "The content is empty. Write what to remember.",
        "content_too_long": (
            "The content is too long ({length} characters; the limit is {limit}). "
            "Keep it short and put longer notes in the detail with edit_memo."
        ),
        "detail_too_long": "The detail is too long ({length} characters; the limit is {limit}).",
        "bad_priority": "Priority must be a whole number from 1 (trivia) to 5 (essential); got {value}.",
        "tags_not_list": "tags must be a list of strings.",
        "tag_too_long": "A tag can be at most {limit} characters long.",
        "too_many_tags": "A memo can have at most {limit} tags ({count} were given).",
        "too_many_tag_kinds": (
            "There can be at most {limit} different tags, so the new tags ({new}) cannot be added. "
            "Choose from the existing tags: {existing}"
        ),
        "bad_offset": "offset must be a whole number from 0 to {limit}.",
        "bad_limit": "limit must be a whole number from 1 to {limit}.",
        "nothing_to_change": (
            "Nothing to change: give at least one of content, priority, tags, detail or new_name."
        ),
        "name_taken": (
            'A memo named "{name}" already exists. Update it with edit_memo, or choose another name.'
        ),
        "not_removed": 'There is no removed memo named "{name}".',
        "unknown_name": 'There is no memo named "{name}". Use list_memo to find the exact name.',
        "pinned": 'The memo "{name}" is a rule a person set: it cannot be edited or removed. Follow it as it is.',
        "not_pinned": 'The memo "{name}" is not pinned as a rule.',
        "wider_audience": (
            'The memo "{name}" is seen more widely than this conversation, so it cannot be changed '
            "from here (what was said here would reach other conversations). "
            "Add a memo for this conversation instead, under another name, with add_memo."
        ),
        "changed_meanwhile": (
            'The memo "{name}" was changed meanwhile. Read it again with get_memo, then make your change.'
        ),
        "too_many_changes": (
            "At most {limit} memo changes per reply: change no more memos now and write your reply."
        ),
        "ambiguous_name": 'Several memos are named "{name}" ({audiences}).',
    },
}

_TEXTS: dict[str, dict[str, str]] = {
    "ja": {
        "added": "メモ「{name}」を追加しました（優先度{priority}、タグ: {tags}）。",
        "edited": "メモ「{name}」を更新しました。",
        "removed": "メモ「{name}」を削除しました。",
        "none": "なし",
        "page": "メモ {first}-{last}件目 / 全{total}件",
        "page_tagged": "タグ「{tag}」のメモ {first}-{last}件目 / 全{total}件",
        "page_line": "- {name}（優先度{priority}）{tags}{content}{marker}",
        "has_detail": " [詳細あり]",
        "more": "続きは offset={offset} で見られます。",
        "no_memos": "メモはまだありません。",
        "no_memos_tagged": "タグ「{tag}」のメモはありません。",
        "past_end": "{first}件目以降のメモはありません（全{total}件）。",
        "field_name": "名前",
        "field_priority": "優先度",
        "field_tags": "タグ",
        "field_content": "内容",
        "field_detail": "詳細",
        "field_source": "記録元",
        "field_created": "作成",
        "field_updated": "更新",
        "source": "ユーザー {user} / チャンネル {channel}",
        "tags_header": "タグ（使われている数が多い順）:",
        "tag_line": "- {tag}（{count}件、最終更新 {updated}）",
        "no_tag_usages": "タグはまだありません。",
    },
    "en": {
        "added": 'Added memo "{name}" (priority {priority}, tags: {tags}).',
        "edited": 'Updated memo "{name}".',
        "removed": 'Removed memo "{name}".',
        "none": "none",
        "page": "memos {first}-{last} of {total}",
        "page_tagged": 'memos tagged "{tag}" {first}-{last} of {total}',
        "page_line": "- {name} (priority {priority}) {tags}{content}{marker}",
        "has_detail": " [+detail]",
        "more": "More with offset={offset}.",
        "no_memos": "No memos yet.",
        "no_memos_tagged": 'No memos tagged "{tag}".',
        "past_end": "No memos from offset {offset} (there are {total}).",
        "field_name": "name",
        "field_priority": "priority",
        "field_tags": "tags",
        "field_content": "content",
        "field_detail": "detail",
        "field_source": "noted from",
        "field_created": "created",
        "field_updated": "updated",
        "source": "user {user}, channel {channel}",
        "tags_header": "tags with their memo counts, most used first:",
        "tag_line": "- {tag} ({count}; last updated {updated})",
        "no_tag_usages": "No tags yet.",
    },
}


def error_message(error: MemoError, language: str) -> str:
    """A refused memo operation, explained to the model so that it can correct itself."""
    params = {
        key: _echo(value) if key in _ECHOED_PARAMS else value for key, value in error.params.items()
    }
    return _catalog(_ERRORS, language)[error.code].format(**params)


def added_message(memo: Memo, language: str) -> str:
    """Confirms a new memo, with its priority and tags."""
    texts = _catalog(_TEXTS, language)
    tags = ", ".join(memo.tags) or texts["none"]
    return texts["added"].format(name=memo.name, priority=memo.priority, tags=tags)


def edited_message(memo: Memo, language: str) -> str:
    """Confirms a change, naming the memo as it is now called."""
    return _catalog(_TEXTS, language)["edited"].format(name=memo.name)


def removed_message(memo: Memo, language: str) -> str:
    """Confirms a removal."""
    return _catalog(_TEXTS, language)["removed"].format(name=memo.name)


def page_message(page: MemoPage, tag: str | None, language: str) -> str:
    """A header such as `memos 1-10 of 25`, then one line per memo, then how to see more."""
    texts = _catalog(_TEXTS, language)
    shown = _echo(tag) if tag is not None else None
    if not page.memos:
        if page.total:
            return texts["past_end"].format(
                offset=page.offset, first=page.offset + 1, total=page.total
            )
        return texts["no_memos_tagged"].format(tag=shown) if shown else texts["no_memos"]
    last = page.offset + len(page.memos)
    header = texts["page_tagged" if shown else "page"].format(
        tag=shown, first=page.offset + 1, last=last, total=page.total
    )
    lines = [header]
    for memo in page.memos:
        lines.append(
            texts["page_line"].format(
                name=memo.name,
                priority=memo.priority,
                tags=f"[{', '.join(memo.tags)}] " if memo.tags else "",
                content=" ".join(memo.content.split()),
                marker=texts["has_detail"] if memo.detail else "",
            )
        )
    if last < page.total:
        lines.append(texts["more"].format(offset=last))
    return "\n".join(lines)


def memo_message(memo: Memo, language: str) -> str:
    """Every field of one memo, one `label: value` per line."""
    texts = _catalog(_TEXTS, language)
    fields = [
        ("field_name", memo.name),
        ("field_priority", str(memo.priority)),
        ("field_tags", ", ".join(memo.tags) or texts["none"]),
        ("field_content", memo.content),
        ("field_detail", memo.detail or texts["none"]),
    ]
    if memo.user_id or memo.channel_id:
        source = texts["source"].format(
            user=memo.user_id or texts["none"], channel=memo.channel_id or texts["none"]
        )
        fields.append(("field_source", source))
    fields += [
        ("field_created", _when(memo.created_at)),
        ("field_updated", _when(memo.updated_at)),
    ]
    return "\n".join(f"{texts[label]}: {value}" for label, value in fields)


def tags_message(usages: list[TagUsage], language: str) -> str:
    """Each tag with its count and last update, in the order given (most used first)."""
    texts = _catalog(_TEXTS, language)
    if not usages:
        return texts["no_tag_usages"]
    lines = [texts["tags_header"]]
    for usage in usages:
        lines.append(
            texts["tag_line"].format(
                tag=usage.tag, count=usage.count, updated=_when(usage.last_updated)
            )
        )
    return "\n".join(lines)


def _catalog(catalogs: dict[str, dict[str, str]], language: str) -> dict[str, str]:
    return catalogs.get(language, catalogs[DEFAULT_LANGUAGE])


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _echo(value: object) -> str:
    """A value the model sent, safe to quote back: one line, printable, and short."""
    text = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in str(value)
    )
    text = " ".join(text.split())
    if len(text) > _ECHO_LENGTH:
        return text[: _ECHO_LENGTH - 1] + "…"
    return text
