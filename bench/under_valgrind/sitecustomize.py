"""The bot's once-a-second work made rare, for ``bench/mention_cost.py`` (not part of myao2).

Put on the bot's PYTHONPATH. Under valgrind the bot runs some 50 times slower, and a mention takes a minute or two
of wall time, where the work the bot does every second would be counted dozens of times against each mention
(the health heartbeat's wake-up alone: 59 K instructions on asyncio's loop, 17 K on uvloop's). And a pong read later
than half the ping interval (0.5 s) dropped the connection: the bot reconnected every few seconds. Given the ping
interval itself, `SocketMode` fails loudly (TypeError).

So are an answer's first words' hold and its reaction's delay: an answer the model writes at once is posted whole,
without a reaction, as at full speed. Slowed down, the bot took longer than the hold (0.1 s) between the model's
first words and its end, and longer than the delay (0.5 s) to show it: every answer counted was streamed, after a
reaction, which at full speed none is.
"""

from myao2.application import reaction
from myao2.infrastructure import health
from myao2.infrastructure.slack import streaming
from myao2.infrastructure.slack.connection import SocketMode

RARELY_SECONDS = 3600.0
health.HEARTBEAT_SECONDS = RARELY_SECONDS  # read at each beat
streaming.FIRST_WORDS_HOLD_SECONDS = RARELY_SECONDS  # read as each answer's first words come
reaction.REACTION_DELAY_SECONDS = RARELY_SECONDS  # read as each answer starts
_init = SocketMode.__init__


def _rare_pings(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    _init(self, *args, ping_interval=RARELY_SECONDS, **kwargs)


SocketMode.__init__ = _rare_pings  # type: ignore[method-assign]
