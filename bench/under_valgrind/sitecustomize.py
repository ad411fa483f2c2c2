"""The bot's Socket Mode pings made rare, for ``bench/mention_cost.py`` (not part of myao2).

Put on the bot's PYTHONPATH. Under valgrind the bot runs some 50 times slower, and a pong that the event loop reads
later than half the ping interval (0.5 s) drops the connection: the bot reconnected every few seconds. Pings are
not part of a mention's cost anyway. Given the ping interval itself, `SocketMode` fails loudly (TypeError).
"""

from myao2.infrastructure.slack.connection import SocketMode

_PING_INTERVAL_SECONDS = 3600.0
_init = SocketMode.__init__


def _rare_pings(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    _init(self, *args, ping_interval=_PING_INTERVAL_SECONDS, **kwargs)


SocketMode.__init__ = _rare_pings  # type: ignore[method-assign]
