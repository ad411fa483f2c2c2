"""Garbage collection while the bot starts: rarer, then the start-up objects set aside for good.

Start-up creates ~200k objects that live as long as the process (modules, classes,
the config); collecting them again and again took ~15% of the CPU of starting
(import and model libraries, 2 cores). Collections stay on meanwhile, only rarer,
so a start-up that drags on (Slack unreachable) does not pile up garbage.
"""

from __future__ import annotations

import gc

START_UP_THRESHOLDS = (50_000, 20, 100)
"""Collection thresholds while starting (the defaults are 700, 10, 10)."""

_usual = gc.get_threshold()


def collect_less() -> None:
    """Collect garbage rarely until `settled`."""
    gc.set_threshold(*START_UP_THRESHOLDS)


def settled() -> None:
    """Start-up is over: its objects are exempted from collection (gc.freeze) and collection is as usual again.

    Frozen, they no longer make every full collection a ~100 ms pause of the event loop.
    """
    gc.freeze()
    gc.set_threshold(*_usual)
