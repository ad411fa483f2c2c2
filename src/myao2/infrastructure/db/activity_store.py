"""The activity log on SQLModel, and the figures `myao2 stats` reads from it and from the stores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Executable, case, func, insert
from sqlmodel import Session, col, select

from myao2.domain.activity import CallOutcome, JudgmentOutcome, ModelCall, ReplyKind
from myao2.infrastructure.db.engine import writing
from myao2.infrastructure.db.tables import JudgmentRow, MemoRow, MessageRow, ModelCallRow, ReplyRow


class SqlActivityLog:
    """`ActivityLog` over a SQLAlchemy engine; safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def model_call(self, call: ModelCall, at: datetime) -> None:
        self._add(_INSERT_CALLS, _call_row(call, at))

    def judgment(self, channel_id: str, outcome: JudgmentOutcome, confidence: float, at: datetime) -> None:
        self._add(
            _INSERT_JUDGMENT, {"at": at, "channel_id": channel_id, "outcome": outcome.value, "confidence": confidence}
        )

    def reply(
        self, channel_id: str, kind: ReplyKind, at: datetime, calls: Sequence[tuple[ModelCall, datetime]] = ()
    ) -> None:
        with writing(self._engine) as connection:
            if calls:
                connection.execute(_INSERT_CALLS, [_call_row(call, called_at) for call, called_at in calls])
            connection.execute(_INSERT_REPLY, {"at": at, "channel_id": channel_id, "kind": kind.value})

    def _add(self, statement: Executable, values: dict[str, Any]) -> None:
        """One row, by a plain INSERT: a session's unit of work cost four times as much CPU."""
        with writing(self._engine) as connection:
            connection.execute(statement, values)


# Built once: building an INSERT cost a third of running it (~25 us of the ~75 us of a row's trip).
_INSERT_CALLS = insert(ModelCallRow.__table__)  # type: ignore[attr-defined]
_INSERT_REPLY = insert(ReplyRow.__table__)  # type: ignore[attr-defined]
_INSERT_JUDGMENT = insert(JudgmentRow.__table__)  # type: ignore[attr-defined]


def _call_row(call: ModelCall, at: datetime) -> dict[str, Any]:
    return {
        "at": at,
        "role": call.role,
        "model": call.model,
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "latency_ms": call.latency_ms,
        "outcome": call.outcome.value,
        "detail": call.detail[:255],
    }


@dataclass(frozen=True)
class ModelUsage:
    """The calls one role made to one model."""

    role: str
    model: str
    calls: int
    failed: int
    aborted: int
    """Cut short by the bot (see `CallOutcome.ABORTED`)."""
    input_tokens: int
    output_tokens: int
    latency_ms: int
    """All the calls' latencies together."""


@dataclass(frozen=True)
class ActivityReport:
    """What was stored and done since `since` (None: ever); `memos` counts the memos kept now."""

    since: datetime | None
    messages: int
    memos: int
    memos_added: int
    replies: dict[ReplyKind, int]
    judgments: dict[JudgmentOutcome, int]
    usage: list[ModelUsage]


def activity_report(engine: Engine, since: datetime | None) -> ActivityReport:
    """The figures of `myao2 stats`, read in one session."""

    def after(query: Any, column: Any) -> Any:
        return query if since is None else query.where(column >= since)

    def ended(outcome: CallOutcome) -> Any:
        return func.sum(case((col(ModelCallRow.outcome) == outcome.value, 1), else_=0))

    usage_query = select(
        ModelCallRow.role,
        ModelCallRow.model,
        func.count(),
        ended(CallOutcome.ERROR),
        ended(CallOutcome.ABORTED),
        func.sum(ModelCallRow.input_tokens),
        func.sum(ModelCallRow.output_tokens),
        func.sum(ModelCallRow.latency_ms),
    ).group_by(col(ModelCallRow.role), col(ModelCallRow.model))
    with Session(engine) as session:
        usage = [
            ModelUsage(*row)
            for row in session.exec(
                after(usage_query, col(ModelCallRow.at)).order_by(col(ModelCallRow.role), col(ModelCallRow.model))
            ).all()
        ]
        replies = dict(
            session.exec(after(select(ReplyRow.kind, func.count()).group_by(col(ReplyRow.kind)), col(ReplyRow.at))).all()
        )
        judgments = dict(
            session.exec(
                after(select(JudgmentRow.outcome, func.count()).group_by(col(JudgmentRow.outcome)), col(JudgmentRow.at))
            ).all()
        )
        messages = session.exec(after(select(func.count()).select_from(MessageRow), col(MessageRow.posted_at))).one()
        memos = session.exec(select(func.count()).select_from(MemoRow).where(col(MemoRow.removed_at).is_(None))).one()
        memos_added = session.exec(after(select(func.count()).select_from(MemoRow), col(MemoRow.created_at))).one()
    return ActivityReport(
        since=since,
        messages=messages,
        memos=memos,
        memos_added=memos_added,
        replies={kind: replies.get(kind.value, 0) for kind in ReplyKind},
        judgments={outcome: judgments.get(outcome.value, 0) for outcome in JudgmentOutcome},
        usage=usage,
    )
