"""``myao2 stats [--since 7d] [--json]``: what the bot stored and did, and what its model calls cost."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from myao2.config import Config
from myao2.domain.activity import Price
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.activity_store import ActivityReport, ModelUsage, activity_report
from myao2.infrastructure.db.engine import open_database

_ROLE_ORDER = ("response", "judgment", "memory")


def run_stats_command(config: Config, args: argparse.Namespace) -> int:
    """Print the figures since ``--since`` (default: ever), as text or JSON."""
    since = SystemClock().now() - args.since if args.since is not None else None
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        report = activity_report(engine, since)
    finally:
        engine.dispose()
    prices = {model: Price(p.input, p.output) for model, p in config.stats.prices.items()}
    figures = summarize(report, prices, config.stats.currency)
    print(json.dumps(figures, ensure_ascii=False, indent=2) if args.json else render(figures))
    return 0


def summarize(report: ActivityReport, prices: dict[str, Price], currency: str) -> dict[str, Any]:
    """The report as plain data (what --json prints), model usage per role, with the estimated cost."""
    roles: dict[str, dict[str, Any]] = {}
    unpriced: set[str] = set()
    for usage in sorted(report.usage, key=_role_rank):
        role = roles.setdefault(
            usage.role,
            {
                "role": usage.role,
                "calls": 0,
                "failed": 0,
                "aborted": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "mean_latency_ms": 0,
                "estimated_cost": 0.0,
            },
        )
        calls = role["calls"] + usage.calls
        role["mean_latency_ms"] = round((role["mean_latency_ms"] * role["calls"] + usage.latency_ms) / calls)
        role["calls"] = calls
        role["failed"] += usage.failed
        role["aborted"] += usage.aborted
        role["input_tokens"] += usage.input_tokens
        role["output_tokens"] += usage.output_tokens
        price = prices.get(usage.model)
        if price is None:
            unpriced.add(usage.model)
        else:
            role["estimated_cost"] += price.cost(usage.input_tokens, usage.output_tokens)
    return {
        "since": report.since.isoformat(timespec="seconds") if report.since else None,
        "messages_stored": report.messages,
        "memos": {"kept": report.memos, "added": report.memos_added},
        "replies_posted": {**{kind.value: n for kind, n in report.replies.items()}, "total": sum(report.replies.values())},
        "judgments": {**{o.value: n for o, n in report.judgments.items()}, "total": sum(report.judgments.values())},
        "model_calls": list(roles.values()),
        "estimated_cost": {
            "total": sum(role["estimated_cost"] for role in roles.values()),
            "currency": currency,
            "unpriced_models": sorted(unpriced),
        },
    }


def render(figures: dict[str, Any]) -> str:
    """The figures as text for a terminal."""
    since = figures["since"]
    memos, replies, judgments, cost = figures["memos"], figures["replies_posted"], figures["judgments"], figures["estimated_cost"]
    lines = [
        f"Since {_when(since)}" if since else "Since the start",
        f"Messages stored:  {figures['messages_stored']}",
        f"Memos:            {memos['kept']} kept, {memos['added']} added",
        f"Replies posted:   {replies['total']} ({replies['answer']} answers, {replies['unasked']} unasked)",
        f"Judgments:        {judgments['total']} ({judgments['respond']} respond, {judgments['quiet']} quiet, "
        f"{judgments['invalid']} invalid, {judgments['failed']} failed)",
        "",
        f"{'Model calls':<12}{'calls':>8}{'failed':>8}{'aborted':>9}{'tokens in':>12}{'tokens out':>12}{'mean ms':>10}"
        f"{'est. cost':>12}",
    ]
    for role in figures["model_calls"]:
        lines.append(
            f"{role['role']:<12}{role['calls']:>8}{role['failed']:>8}{role['aborted']:>9}{role['input_tokens']:>12}"
            f"{role['output_tokens']:>12}{role['mean_latency_ms']:>10}{role['estimated_cost']:>12.4f}"
        )
    if not figures["model_calls"]:
        lines.append("(none)")
    lines.append("")
    lines.append(f"Estimated cost:   {cost['total']:.4f} {cost['currency']}")
    if cost["unpriced_models"]:
        lines.append(f"  not priced (no entry in stats.prices): {', '.join(cost['unpriced_models'])}")
    return "\n".join(lines)


def _role_rank(usage: ModelUsage) -> tuple[int, str]:
    order = _ROLE_ORDER.index(usage.role) if usage.role in _ROLE_ORDER else len(_ROLE_ORDER)
    return order, usage.role


def _when(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M UTC")
