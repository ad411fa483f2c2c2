"""Runs ``myao2`` with an answer's first words held back, and its reaction due, only after a minute: a test of what
happens to an answer done within them does not depend on how quickly a loaded machine runs the bot."""

from __future__ import annotations

from myao2.application import reaction
from myao2.infrastructure.slack import streaming

streaming.FIRST_WORDS_HOLD_SECONDS = 60.0
reaction.REACTION_DELAY_SECONDS = 60.0

if __name__ == "__main__":
    from myao2.cli import main

    raise SystemExit(main())
