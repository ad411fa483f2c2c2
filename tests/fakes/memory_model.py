"""A fake memory model for tests and benchmarks: answers the memory job's and the retention job's structured requests.

It remembers each new message as one long- and one short-term note ("remembered: TEXT"),
each thread it is asked about as its messages ("thread talk: TEXT"), and for the
workspace each channel note it is shown ("workspace knows: NOTE"). It digests a day
as one line per message ("digest: TEXT", or "condensed: TEXT" when asked for the short one).
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.openai_server import ToolCall, ToolCalls

TOOL = "MemoryUpdateOutput"
DIGEST_TOOL = "DigestOutput"
DAY_LINE = re.compile(r"^\[[^\]]+\] [^:]+: (.*)$", re.M)
LINE = re.compile(r"^ts=([\d.]+)(?: \(thread ([\d.]+)\))? \[[^\]]+\] [^:]+: (.*)$", re.M)
SOURCE_LINE = re.compile(r"^#\S+ ts=([\d.,]+) \[[^\]]+\] (.*)$", re.M)
THREAD = re.compile(r"^- thread ([\d.]+):", re.M)


def is_memory_request(request: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == TOOL for t in request.get("tools") or [])


def is_digest_request(request: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == DIGEST_TOOL for t in request.get("tools") or [])


def digest(request: dict[str, Any]) -> ToolCalls:
    """The digest of a day for a retention job request (English templates)."""
    query = _query(request)
    day = query.split("## The day's messages", 1)[1].split("## Your task", 1)[0]
    stage = "condensed" if "3 lines at most" in query else "digest"
    return ToolCalls([ToolCall(DIGEST_TOOL, {"lines": [f"{stage}: {text}" for text in DAY_LINE.findall(day)]})])


def _query(request: dict[str, Any]) -> str:
    query = request["messages"][-1]["content"]
    return query if isinstance(query, str) else " ".join(part.get("text", "") for part in query)


def remember(request: dict[str, Any]) -> ToolCalls:
    """The memory update for a memory job request (English templates)."""
    query = _query(request)
    new = query.split("## New", 1)[1].split("## Your task", 1)[0]
    if "Scope: the whole workspace" in query:
        notes = [{"text": f"workspace knows: {text}", "ts": ts.split(",")} for ts, text in SOURCE_LINE.findall(new)]
        return ToolCalls([ToolCall(TOOL, {"long_term": notes, "short_term": notes})])
    lines = LINE.findall(new)
    notes = [{"text": f"remembered: {text}", "ts": [ts]} for ts, _, text in lines]
    threads = [
        {
            "thread_ts": thread,
            "bullets": [{"text": f"thread talk: {text}", "ts": [ts]} for ts, parent, text in lines if parent == thread],
        }
        for thread in THREAD.findall(query)
    ]
    short = [{"text": f"lately: {note['text']}", "ts": note["ts"]} for note in notes]
    return ToolCalls([ToolCall(TOOL, {"long_term": notes, "short_term": short, "threads": threads})])
