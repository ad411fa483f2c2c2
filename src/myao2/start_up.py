"""Garbage collection while the bot starts: none, then the start-up objects set aside for good; and as a
process ends (`ending`).

Start-up creates ~200k objects that live as long as the process (modules, classes,
the config); collecting them again and again took ~15% of the CPU of starting, and
a collection of tens of thousands of them stalls whichever thread triggers it (the
event loop too). Imports make next to no garbage, so collection waits until the bot
has settled, or `LIMIT_SECONDS` at most (a start-up that drags on, Slack unreachable,
does not pile up garbage for long).
"""

from __future__ import annotations

import gc

LIMIT_SECONDS = 30.0
"""How long after `pause_collection` the bot settles at the latest (`settled`)."""


def pause_collection() -> None:
    """Collect no garbage until `settled`."""
    gc.disable()


def resume_collection() -> None:
    """Collect garbage again, without setting anything aside (a start-up that ended early)."""
    gc.enable()


def ending() -> None:
    """The process is about to end: every object is set aside (gc.freeze), so that the interpreter's last
    collection at exit does not go through them all.

    That collection took 3-10 s of wall time at a load of 15-20 on 2 cores (a bot stopped before it
    settled, the playground), 0.4-1.1 s with everything set aside.
    """
    gc.freeze()


def settled() -> None:
    """Start-up is over: its objects are exempted from collection (gc.freeze) and collection resumes.

    Frozen, they no longer make every full collection a ~100 ms pause of the event loop.
    Once collection runs, later calls change nothing.
    """
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()
