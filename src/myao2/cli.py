"""Command line: ``myao2 [--config PATH] [run | playground | memo ... | memory ... | profile ... | search ... | index rebuild | stats
| preview ... | mcp]``."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from myao2 import start_up
from myao2.domain.conversation import clean_text

if TYPE_CHECKING:
    from myao2.config import Config

EXIT_CONFIG_ERROR = 2
EXIT_INTERRUPTED = 130
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_PERIOD = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_PERIOD_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


PEOPLE_FACING = frozenset({"memo", "memory", "preview", "profile", "search", "index", "stats"})
"""The commands that print what people and the model wrote for a person to read (`InertControls`)."""
INERT_CONTROLS = (
    {code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"}
    | {0x7F: 0x2421}
    | dict.fromkeys(range(0x80, 0xA0), 0xFFFD)
)
"""Control characters as their pictures (ESC as ␛, CR as ␍, DEL as ␡); the C1 set, which has none, as U+FFFD."""


def inert(text: str) -> str:
    """`text` with its control characters (but newline and tab) as `INERT_CONTROLS` shows them, for a person's
    terminal: what people and the model wrote is stored as written."""
    return text.translate(INERT_CONTROLS)

MAX_PERIOD = timedelta(days=36525)
"""The longest period: 100 years (a longer one reached past year 1, which no date can hold)."""


def period(value: str) -> timedelta:
    """An argparse type: ``30m``, ``12h``, ``7d`` or ``2w``, at most `MAX_PERIOD`."""
    match = _PERIOD.match(value)
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError("expected a period such as 30m, 12h, 7d or 2w")
    try:
        length = timedelta(**{_PERIOD_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        length = None
    if length is None or length > MAX_PERIOD:
        raise argparse.ArgumentTypeError(f"a period of at most 100 years ({MAX_PERIOD.days}d), please")
    return length


def conversation_id(value: str) -> str:
    """A `--conversation` value: a conversation id (or `workspace`: `named_audience`), never blank."""
    if not value.strip():
        raise argparse.ArgumentTypeError("give a conversation id such as C0123 (or workspace)")
    return value.strip()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; ``--config`` is accepted before and after any subcommand."""
    # SUPPRESS keeps a subparser from overwriting a --config given before the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="config file (default: $MYAO2_CONFIG or ./config.yaml)",
    )

    parser = argparse.ArgumentParser(
        prog="myao2", parents=[common], description="A Slack bot that keeps a notebook of memos."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("run", parents=[common], help="run the bot (the default)")
    commands.add_parser(
        "playground", parents=[common], help="chat with the persona on a local web page (no Slack needed)"
    )

    memo = commands.add_parser("memo", parents=[common], help="inspect the bot's memos")
    memo.set_defaults(tag=None, min_priority=None, removed=False, json=False, name=None, conversation=None)
    actions = memo.add_subparsers(dest="memo_command", metavar="ACTION", required=True)

    memo_list = actions.add_parser("list", parents=[common], help="list memos")
    memo_list.add_argument("--tag", metavar="T", help="only memos with this tag")
    memo_list.add_argument("--min-priority", type=int, metavar="N", help="only memos with priority >= N")
    memo_list.add_argument("--removed", action="store_true", help="list removed memos")
    memo_list.add_argument("--json", action="store_true", help="print JSON")

    # Names are unique per audience: a DM's memo may share its name with a workspace memo.
    named = argparse.ArgumentParser(add_help=False)
    named.add_argument("name")
    named.add_argument(
        "--conversation",
        type=conversation_id,
        metavar="C|workspace",
        help="the memo kept for this conversation id, or for the workspace, when several share the name",
    )

    memo_show = actions.add_parser("show", parents=[common, named], help="show one memo")
    memo_show.add_argument("--json", action="store_true", help="print JSON")

    memo_history = actions.add_parser("history", parents=[common, named], help="show a memo's past versions")
    memo_history.add_argument("--json", action="store_true", help="print JSON")

    fields = argparse.ArgumentParser(add_help=False)
    fields.add_argument("--priority", type=int, metavar="N", help="from 1 (trivia) to 5 (essential); 3 for a new memo")
    fields.add_argument("--tags", metavar="a,b", help="up to 3 tags, separated by commas")
    fields.add_argument("--detail", metavar="TEXT", help="longer notes, shown in full only on request")

    memo_add = actions.add_parser("add", parents=[common, fields], help="add a memo, to the workspace by default")
    memo_add.add_argument("name")
    memo_add.add_argument("--content", required=True, metavar="TEXT", help="the fact itself (at most 500 characters)")
    memo_add.add_argument(
        "--conversation",
        type=conversation_id,
        metavar="C|workspace",
        help="keep it for this conversation id only (default: workspace)",
    )

    memo_edit = actions.add_parser(
        "edit", parents=[common, named, fields], help="change the fields given (an empty --tags or --detail clears it)"
    )
    memo_edit.add_argument("--content", metavar="TEXT", help="the new content")
    memo_edit.add_argument("--new-name", metavar="NAME", help="rename the memo")

    actions.add_parser("remove", parents=[common, named], help="remove a memo (restore brings it back)")
    actions.add_parser("restore", parents=[common, named], help="restore a removed memo")
    actions.add_parser(
        "pin", parents=[common, named], help="make a memo a rule: always in the prompt, not changeable by the bot"
    )
    actions.add_parser("unpin", parents=[common, named], help="make a pinned memo an ordinary memo again")

    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument(
        "--visibility",
        choices=["workspace", "all"],
        default="workspace",
        help="workspace: only memos the whole workspace may see (default); all: conversations' private memos too",
    )
    memo_export = actions.add_parser(
        "export", parents=[common, scope], help="write every live memo as a Markdown file (one folder per first tag)"
    )
    memo_export.add_argument("--output", required=True, type=Path, metavar="DIR", help="the folder to write")
    memo_import = actions.add_parser(
        "import", parents=[common, scope], help="show what importing a folder of memo files would change"
    )
    memo_import.add_argument("--dir", required=True, type=Path, metavar="DIR", help="the folder to read")
    memo_import.add_argument("--apply", action="store_true", help="make the changes (as actor import)")
    memo_import.add_argument("--prune", action="store_true", help="also remove memos that have no file")

    memory = commands.add_parser("memory", parents=[common], help="inspect what the bot remembers")
    memory_actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    memory_show = memory_actions.add_parser(
        "show", parents=[common], help="print the workspace, channel and thread memories"
    )
    memory_show.add_argument("--channel", metavar="C", help="only what prompts in this channel may draw on")
    memory_show.add_argument("--thread", metavar="TS", help="with --channel: this thread's memory too")
    memory_show.add_argument(
        "--user", metavar="U", help="what the bot learnt about this person instead (with --channel: what it may show)"
    )
    memory_show.add_argument("--json", action="store_true", help="print JSON (superseded notes included)")
    memory_forget = memory_actions.add_parser(
        "forget", parents=[common], help="delete a person's messages, the memos and notes made from them"
    )
    memory_forget.add_argument("--user", required=True, metavar="U", help="the person's Slack user id")
    memory_forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    profile = commands.add_parser("profile", parents=[common], help="what the bot learnt about people")
    profile.set_defaults(json=False)
    profile_actions = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    candidates = profile_actions.add_parser(
        "candidates", parents=[common], help="facts sure and confirmed enough to become memos"
    )
    candidates.add_argument("--json", action="store_true", help="print JSON")
    promote = profile_actions.add_parser(
        "promote", parents=[common], help="make a candidate fact a priority-5 memo (for the fact's audience)"
    )
    promote.add_argument("user", help="the person's Slack user id")
    promote.add_argument("fact_id", type=int, help="the fact's id, as candidates lists it")
    promote.add_argument("--name", help="the memo's name (default: <display name>-<fact id>)")

    search = commands.add_parser("search", parents=[common], help="search memos and past messages")
    search.add_argument("query")
    only = search.add_mutually_exclusive_group()
    only.add_argument("--memos", action="store_true", help="only memos")
    only.add_argument("--messages", action="store_true", help="only messages")
    search.add_argument("--channel", metavar="C", help="only messages of this channel (name or id)")
    search.add_argument("--before", metavar="ISO", help="only what was posted before this date or time")
    search.add_argument("--limit", type=int, default=5, metavar="N", help="hits of each kind (1-20, default 5)")
    search.add_argument("--json", action="store_true", help="print the ranked hits as JSON")

    stats = commands.add_parser(
        "stats", parents=[common], help="messages, memos, replies, judgments, model calls and their estimated cost"
    )
    stats.add_argument("--since", type=period, metavar="PERIOD", help="only the last 30m, 12h, 7d, 2w, ... (default: ever)")
    stats.add_argument("--json", action="store_true", help="print JSON")

    preview = commands.add_parser(
        "preview", parents=[common], help="print the exact prompt the bot would send the model now (database only)"
    )
    preview.add_argument("role", choices=("response", "judgment", "memory"), help="which agent's prompt")
    preview.add_argument("--channel", required=True, metavar="C", help="the conversation's channel id")
    preview.add_argument("--thread", metavar="TS", help="a thread of it (default: the channel's top-level flow)")
    preview.add_argument(
        "--as", dest="as_user", metavar="USER", help="answer this user's latest message (default: anyone's but the bot's)"
    )
    preview.add_argument("--json", action="store_true", help="print JSON")

    mcp = commands.add_parser("mcp", parents=[common], help="serve the memos to other AI agents over MCP (stdio)")
    mcp.add_argument("--http", action="store_true", help="streamable HTTP on mcp.host:mcp.port, with mcp.token")
    mcp.add_argument(
        "--conversation",
        type=conversation_id,
        metavar="C",
        help="also see and write this conversation's own memos (default: workspace only)",
    )
    mcp.add_argument("--allow-pinned", action="store_true", help="let clients edit and remove pinned memos (rules)")

    index = commands.add_parser("index", parents=[common], help="maintain the search index")
    index_actions = index.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    index_actions.add_parser("sync", parents=[common], help="index and embed what waits (the bot does it in the background)")
    index_actions.add_parser("rebuild", parents=[common], help="re-embed and re-index everything")
    return parser


# Libraries whose INFO lines (one per migration step, HTTP request, ...) are noise to a user. slack_sdk's Web API
# client formats its debug lines of every call (the request, the whole response) unless the level set on its own
# logger is above DEBUG, whatever the level it inherits: named too, a mention's three calls format none.
QUIET_LOGGERS = (
    "alembic",
    "httpx",
    "httpx2",
    "openai",
    "strands",
    "slack_bolt",
    "slack_sdk",
    "slack_sdk.web.async_base_client",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return the exit status."""
    args = build_parser().parse_args(argv)
    _clean_arguments(args)
    if args.command in (None, "run"):
        start_up.pause_collection()  # before the config and the bot are imported; the bot ends it
    from myao2.config import ConfigError, load_config
    from myao2.infrastructure.db.engine import DatabaseUnavailable
    from myao2.listening import CannotListen

    stdout = sys.stdout
    if args.command in PEOPLE_FACING:
        sys.stdout = InertControls(stdout)  # type: ignore[assignment]
    try:
        # Configured before loading so warnings about the config file are formatted too.
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, stream=sys.stderr)
        config = load_config(getattr(args, "config", None))
        logging.getLogger().setLevel(config.logging.level)
        if config.logging.level != "DEBUG":
            for chatty in QUIET_LOGGERS:
                logging.getLogger(chatty).setLevel(logging.WARNING)
        try:
            return _dispatch(config, args)
        except DatabaseUnavailable as exc:
            raise ConfigError(f"{config.memory.database_key}: cannot open the database ({exc})") from None
    except CannotListen as exc:
        print(f"myao2: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except ConfigError as exc:
        print("myao2: configuration error:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        sys.stdout = stdout
        start_up.resume_collection()  # a run that ended before the bot settled (a bad config, say)


class InertControls:
    """`stream`, writing control characters (but newline and tab) as `INERT_CONTROLS` shows them: text from Slack
    is stored as written, and an escape sequence in a message, or in a note the model made of it, would reach the
    terminal of a person reading it (set the clipboard, clear the screen; a carriage return writes over a line)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(inert(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _clean_arguments(args: argparse.Namespace) -> None:
    """Text arguments made what the stores take, as Slack's text is where it enters (`clean_text`): bytes the
    locale cannot decode reach Python as lone surrogates. Paths (`Path` values) keep their bytes."""
    for name, value in vars(args).items():
        if isinstance(value, str):
            setattr(args, name, clean_text(value))


def _dispatch(config: Config, args: argparse.Namespace) -> int:
    if args.command == "memo" and args.memo_command in ("export", "import"):
        from myao2.memo_snapshot_cli import run_snapshot_command

        return run_snapshot_command(config, args)
    if args.command == "memo":
        from myao2.memo_cli import run_memo_command

        return run_memo_command(config, args)
    if args.command == "memory":
        from myao2.memory_cli import run_memory_command

        return run_memory_command(config, args)
    if args.command == "preview":
        from myao2.preview_cli import run_preview_command

        return run_preview_command(config, args)
    if args.command == "mcp":
        from myao2.mcp_server import run_mcp_command

        return run_mcp_command(config, args)
    if args.command == "profile":
        from myao2.profile_cli import run_profile_command

        return run_profile_command(config, args)
    if args.command in ("search", "index"):
        from myao2.search_cli import run_search_command

        return run_search_command(config, args)
    if args.command == "stats":
        from myao2.stats_cli import run_stats_command

        return run_stats_command(config, args)
    if args.command == "playground":
        from myao2.playground import run_playground

        return run_playground(config)
    return load_bot()(config)


def load_bot() -> Callable[[Config], int]:
    """`myao2.bot.run_bot`, imported with OpenSSL's default certificates read from its hashed folder where that
    is the same trust (`default_trust_from_folder`): aiohttp, imported with the bot, makes two TLS contexts of them."""
    from myao2.infrastructure.llm.trust import default_trust_from_folder

    with default_trust_from_folder():
        from myao2.bot import run_bot
    return run_bot
