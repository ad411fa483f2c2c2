"""One memo as a Markdown file: YAML front matter, the content, and the detail under a heading.

    ---
    name: alice-ramen
    priority: 4
    tags: [food, alice]
    visibility: conversation
    conversation: G1
    pinned: false
    created: 2025-01-02 03:00:00+00:00
    updated: 2025-01-02 03:03:00+00:00
    revision: 2
    ---

    Alice loves spicy ramen

    ## Detail

    Likes Ichiran in Shibuya

`conversation` is there only for a memo kept for one conversation. `created`, `updated`
and `revision` describe the stored memo: only the revision is read back, to tell whether the
memo changed since the file was written. The same memo always renders
to the same bytes, so a folder of them diffs well in git. A content line that reads as the
detail heading is written with a backslash before it, which reading removes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

import yaml

from myao2.application.notebook import DEFAULT_PRIORITY
from myao2.application.yaml_text import load_yaml
from myao2.domain.memo import Memo, MemoDraft, Visibility, memo_audience, validate_name
from myao2.domain.visibility import WORKSPACE, Audience, named_audience

FENCE = "---"
DETAIL_HEADING = "## Detail"
FIELDS = ("name", "priority", "tags", "visibility", "conversation", "pinned", "created", "updated", "revision")

_HEADING = re.compile(r"## Detail[ \t]*")
_ESCAPED_HEADING = re.compile(r"\\*## Detail[ \t]*")
_YAML_OPTIONS = {"sort_keys": False, "allow_unicode": True, "default_flow_style": None, "width": 1 << 30}


class MemoFileError(ValueError):
    """A file that cannot be read as a memo; the message says why, for people."""


@dataclass(frozen=True)
class MemoFile:
    """A memo file as written: the name is checked, the rest is checked by `draft`."""

    name: str
    audience: Audience
    content: str
    priority: object = DEFAULT_PRIORITY
    tags: object = ()
    detail: str | None = None
    pinned: bool = False
    revision: int | None = None
    """The memo's revision the file was written from, if it says."""

    def draft(self) -> MemoDraft:
        """The memo the file describes, by the memo rules (raises `MemoError`)."""
        return MemoDraft.create(self.name, self.content, self.priority, self.tags, self.detail)


def render_memo(memo: Memo, *, pinned: bool) -> str:
    """The Markdown file of `memo` (`pinned`: whether it is a person's rule)."""
    front: dict[str, object] = {
        "name": memo.name,
        "priority": memo.priority,
        "tags": list(memo.tags),
        "visibility": memo.visibility.value,
    }
    if not memo.audience.is_workspace:
        front["conversation"] = memo.audience.conversation_id
    front.update(
        pinned=pinned, created=_utc(memo.created_at), updated=_utc(memo.updated_at), revision=memo.revision
    )
    content = "\n".join("\\" + line if _ESCAPED_HEADING.fullmatch(line) else line for line in memo.content.split("\n"))
    text = f"{FENCE}\n{yaml.safe_dump(front, **_YAML_OPTIONS)}{FENCE}\n\n{content}\n"
    if memo.detail:
        text += f"\n{DETAIL_HEADING}\n\n{memo.detail}\n"
    return text


def has_front_matter(text: str) -> bool:
    """Whether `text` starts as a memo file does (a `---` line)."""
    return _lines(text)[0].rstrip() == FENCE


def parse_memo(text: str) -> MemoFile:
    """Read a memo file; `MemoFileError` for a malformed one, `MemoError` for an invalid name."""
    lines = _lines(text)
    if lines[0].rstrip() != FENCE:
        raise MemoFileError("no front matter: a memo file starts with a line ---")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in (FENCE, "...")), None)
    if end is None:
        raise MemoFileError("the front matter has no closing --- line")
    front = _load_front_matter("\n".join(lines[1:end]))
    content, detail = _split_body(lines[end + 1 :])
    if "name" not in front:
        raise MemoFileError("the front matter has no name")
    pinned = front.get("pinned", False)
    if not isinstance(pinned, bool):
        raise MemoFileError("pinned must be true or false")
    return MemoFile(
        name=validate_name(front["name"]),
        audience=_audience(front),
        content=content,
        priority=front.get("priority", DEFAULT_PRIORITY),
        tags=front.get("tags") or (),
        detail=detail,
        pinned=pinned,
        revision=_revision(front.get("revision")),
    )


def _lines(text: str) -> list[str]:
    return text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")


def _load_front_matter(source: str) -> dict[str, object]:
    try:
        # PyYAML's own parser: libyaml words some errors at other lines, and refuses escapes (a lone surrogate)
        # that the fields' own checks word better
        front = load_yaml(source, yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise MemoFileError(f"the front matter is not valid YAML{where}") from None
    if not isinstance(front, dict):
        raise MemoFileError("the front matter must be a mapping of fields such as name: and tags:")
    unknown = sorted(str(key) for key in front if key not in FIELDS)
    if unknown:
        raise MemoFileError(f"unknown field {', '.join(unknown)} (known: {', '.join(FIELDS)})")
    return front


def _audience(front: dict[str, object]) -> Audience:
    conversation = front.get("conversation")
    try:
        visibility = Visibility(front.get("visibility", Visibility.WORKSPACE.value))
    except ValueError:
        raise MemoFileError("visibility must be workspace or conversation") from None
    if isinstance(conversation, str) and named_audience(conversation.strip()).is_workspace:
        return WORKSPACE  # `conversation: workspace` names the workspace, as `--conversation workspace` does
    if visibility is Visibility.WORKSPACE and conversation is not None:
        raise MemoFileError("conversation is only for a memo with visibility: conversation")
    if visibility is Visibility.CONVERSATION and not (isinstance(conversation, str) and conversation.strip()):
        raise MemoFileError("visibility: conversation needs the conversation's id (conversation: C123)")
    if isinstance(conversation, str) and not _ONE_WORD.fullmatch(conversation.strip()):
        # YAML's escapes reach what no store takes (a lone surrogate) and what no id holds (a line break)
        raise MemoFileError("conversation must be one conversation's id, such as C123 (one word, no control characters)")
    return memo_audience(visibility, conversation.strip() if isinstance(conversation, str) else None)


_ONE_WORD = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\ud800-\udfff]+")
"""A conversation's id as a file may name it: no white space, control character or lone surrogate."""


def _split_body(lines: list[str]) -> tuple[str, str | None]:
    """The content (heading-like lines unescaped) and the detail (None without its heading)."""
    heading = next((i for i, line in enumerate(lines) if _HEADING.fullmatch(line)), None)
    content_lines = lines if heading is None else lines[:heading]
    content = "\n".join(line[1:] if _ESCAPED_HEADING.fullmatch(line) else line for line in content_lines)
    return content, None if heading is None else "\n".join(lines[heading + 1 :])


def _revision(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(microsecond=0)
