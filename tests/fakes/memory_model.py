"""A fake memory model for tests and benchmarks: answers the memory job's and the retention job's structured requests.

It remembers each new message as one long- and one short-term note ("remembered: TEXT"),
each thread it is asked about as its messages ("thread talk: TEXT"), and for the
workspace each channel note it is shown ("workspace knows: NOTE"); several channels read in
one call are answered each on its own. It digests a day
as one line per message ("digest: TEXT", or "condensed: TEXT" when asked for the short one).
For profiles, a message "I like X" (or love, prefer) teaches the fact "likes X"
(confidence 0.7), or confirms it (confidence 0.95) when it is known already.
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.openai_server import ToolCall, ToolCalls

TOOL = "MemoryUpdateOutput"
DIGEST_TOOL = "DigestOutput"
PROFILE_TOOL = "ProfileUpdateOutput"
CHANNELS_TOOL = "ChannelsMemoryOutput"
CHANNEL = re.compile(r"^# Channel \d+ \(channel_id (\S+)\)$", re.M)
DAY_LINE = re.compile(r"^\[[^\]]+\] [^:]+: (.*)$", re.M)
LINE = re.compile(r"^ts=([\d.]+)(?: \(thread ([\d.]+)\))? \[[^\]]+\] [^:]+: (.*)$", re.M)
SOURCE_LINE = re.compile(r"^#\S+ ts=([\d.,]+) \[[^\]]+\] (.*)$", re.M)
THREAD = re.compile(r"^- thread ([\d.]+):", re.M)
PERSON = re.compile(r"^## .* \(user_id (\S+)\)$", re.M)
KNOWN = re.compile(r"^(\d+): likes (.*) \[[\d.]+, \d+\]$", re.M)
LIKING = re.compile(r"^ts=([\d.]+) #\S+ \[[^\]]+\] [^:]+: .*?\bI (?:like|love|prefer) ([^.,!?\n]+)", re.M | re.I)


def is_memory_request(request: dict[str, Any]) -> bool:
    """Whether a request is the memory job's: a memory update (of one scope or several channels) or a profile update."""
    return any(t["function"]["name"] in (TOOL, CHANNELS_TOOL, PROFILE_TOOL) for t in request.get("tools") or [])


def is_channels_request(request: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == CHANNELS_TOOL for t in request.get("tools") or [])


def is_profile_request(request: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == PROFILE_TOOL for t in request.get("tools") or [])


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
    """The update for a memory job request (English templates)."""
    query = _query(request)
    if is_profile_request(request):
        return _profiles(query)
    query = query.split("## Your task", 1)[0]
    if is_channels_request(request):
        parts = CHANNEL.split(query)[1:]
        channels = [{"channel_id": cid, **_scope(part)} for cid, part in zip(parts[::2], parts[1::2])]
        return ToolCalls([ToolCall(CHANNELS_TOOL, {"channels": channels})])
    return ToolCalls([ToolCall(TOOL, _scope(query))])


def _scope(query: str) -> dict[str, Any]:
    """The update of one scope's memories, from its part of the query."""
    new = query.split("## New", 1)[1]
    if "Scope: the whole workspace" in query:
        notes = [{"text": f"workspace knows: {text}", "ts": ts.split(",")} for ts, text in SOURCE_LINE.findall(new)]
        return {"long_term": notes, "short_term": notes}
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
    return {"long_term": notes, "short_term": short, "threads": threads}


def _profiles(query: str) -> ToolCalls:
    people = []
    sections = PERSON.split(query.split("## Your task", 1)[0])[1:]
    for user_id, section in zip(sections[::2], sections[1::2]):
        known = {text.strip().lower(): int(fact_id) for fact_id, text in KNOWN.findall(section)}
        new_facts, confirmed = [], []
        for ts, liked in LIKING.findall(section.split("New messages:", 1)[1]):
            liked = liked.strip().lower()
            if liked in known:
                confirmed.append({"id": known[liked], "confidence": 0.95, "ts": [ts]})
            else:
                new_facts.append({"text": f"likes {liked}", "confidence": 0.7, "ts": [ts]})
                known[liked] = -1  # said twice in one batch: learnt once
        people.append({"user_id": user_id, "new_facts": new_facts, "confirmed": confirmed})
    return ToolCalls([ToolCall(PROFILE_TOOL, {"people": people})])
