"""People's writes to the memo notebook: the command line, Markdown imports and the MCP server.

The same rules as the model's tools (`myao2.domain.memo` validation, per-audience names
and tag kinds, the visibility rule, a revision per change) hold, because every write goes
through the same `MemoStore` calls; only the scope differs: a person writes as their own
view, to the workspace or to the one conversation they name. Refusals raise `MemoError`
and leave the store unchanged.
"""

from __future__ import annotations

from enum import Enum

from myao2.domain.memo import Memo, MemoChanges, MemoDraft, Origin
from myao2.domain.ports import MemoStore
from myao2.domain.visibility import WORKSPACE, Audience, Reader

DEFAULT_PRIORITY = 3


class Actor(str, Enum):
    """Who writes, as recorded in each revision (`user:cli`, `user:import`, `user:mcp`)."""

    CLI = "cli"
    IMPORT = "import"
    MCP = "mcp"

    @property
    def recorded(self) -> str:
        return f"user:{self.value}"


def origin_for(audience: Audience, reader: Reader | None = None) -> Origin:
    """The origin of a memo a person writes for `audience`: the workspace, or one conversation (`reader`, when given,
    that conversation as it reads: one shared outside knows no workspace memo, as the bot's tools there)."""
    outside = reader is not None and reader.outside
    return Origin(channel_id=audience.conversation_id, channel_private=not audience.is_workspace, outside=outside)


class Notebook:
    """A person's writes to the memos, made as `actor`.

    `audience` picks among memos of one name kept for different audiences (None: the one
    memo of that name; refused as `ambiguous_name` when several audiences keep one).
    Without `allow_pinned`, pinned memos (a person's rules) cannot be edited or removed.
    """

    def __init__(self, store: MemoStore, actor: Actor, *, allow_pinned: bool = True) -> None:
        self._store = store
        self._actor = actor.recorded
        self._keep_pins = not allow_pinned

    def add(
        self,
        name: object,
        content: object,
        priority: object = DEFAULT_PRIORITY,
        tags: object = None,
        detail: object = None,
        *,
        audience: Audience = WORKSPACE,
        reader: Reader | None = None,
    ) -> Memo:
        """Add a memo kept for `audience` (default: the whole workspace), written for conversation `reader` if given
        (`origin_for`)."""
        draft = MemoDraft.create(name, content, priority, tags, detail)
        return self._store.add(draft, origin_for(audience, reader), self._actor)

    def edit(
        self,
        name: str,
        *,
        content: object = None,
        priority: object = None,
        tags: object = None,
        detail: object = None,
        new_name: object = None,
        audience: Audience | None = None,
        revision: int | None = None,
        reader: Reader | None = None,
    ) -> Memo:
        """Change the given fields (None: unchanged; an empty detail clears it, empty tags remove them), of the memo
        at `revision` if given (one changed since, by the bot say, is refused as `changed_meanwhile`), for
        conversation `reader` if given (a new name and tags bounded by what it reads)."""
        changes = MemoChanges.create(
            content=content, priority=priority, tags=tags, detail=detail, new_name=new_name
        )
        return self._store.edit(
            name, changes, None, self._actor, audience=audience, keep_pins=self._keep_pins, revision=revision,
            reader=reader,
        )

    def remove(self, name: str, *, audience: Audience | None = None) -> Memo:
        """Mark a memo removed; `restore` brings it back."""
        return self._store.remove(name, None, self._actor, audience=audience, keep_pins=self._keep_pins)

    def restore(
        self, name: str, *, audience: Audience | None = None, reader: Reader | None = None, writer: Audience | None = None
    ) -> Memo:
        """Bring back the most recently removed memo of that name (that the conversation `reader` may read, if given).
        Made for a conversation whose audience is `writer`, as the bot's tools there, the memo the name means there
        is refused (`wider_audience`) if kept for a wider audience (`can_write`)."""
        origin = None if writer is None else origin_for(writer, reader)
        return self._store.restore(name, self._actor, origin=origin, audience=audience, reader=reader)

    def pin(self, name: str, *, audience: Audience | None = None) -> Memo:
        """Make a memo a rule: in every prompt that may see it, changed by no conversation."""
        return self._store.pin(name, self._actor, audience=audience)

    def unpin(self, name: str, *, audience: Audience | None = None) -> Memo:
        """Make a pinned memo an ordinary one again."""
        return self._store.unpin(name, self._actor, audience=audience)
