"""Runs ``myao2`` with its clock moved forward, for tests of what happens days later.

The bot reads the time from one clock (`SystemClock`); here it adds the seconds
written in the file named by ``MYAO2_TEST_CLOCK_SHIFT_FILE``, read again at every
call, so a test moves the running bot's clock by rewriting that file.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from myao2.infrastructure import clock

SHIFT_FILE = Path(os.environ["MYAO2_TEST_CLOCK_SHIFT_FILE"])
_system_now = clock.SystemClock.now


def _shifted_now(self: clock.SystemClock) -> datetime:
    return _system_now(self) + timedelta(seconds=float(SHIFT_FILE.read_text(encoding="utf-8") or 0))


clock.SystemClock.now = _shifted_now  # type: ignore[method-assign]

if __name__ == "__main__":
    from myao2.cli import main

    raise SystemExit(main())
