"""Tests for loading and validating config.yaml."""

import logging
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from myao2.config import Config, ConfigError, load_config

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config.yaml"


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> Config:
    return load_config(write_config(tmp_path, text), environ or {})


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    config = load_text(tmp_path, "")

    assert config.slack.bot_token == ""
    assert config.slack.api_base_url == "https://slack.com/api/"
    for agent in (config.agents.response, config.agents.judgment, config.agents.memory):
        assert agent.model_id == "gpt-5-mini"
        assert agent.params == {} and agent.client_args == {}
        assert agent.system_prompt is None
    assert config.persona.name == "myao"
    assert config.persona.language == "ja"
    assert config.persona.tzinfo == ZoneInfo("UTC")
    assert config.memory.database_path == tmp_path.resolve() / "data" / "memory.db"
    assert config.memory.sqlalchemy_url == f"sqlite:///{tmp_path.resolve() / 'data' / 'memory.db'}"
    assert config.logging.level == "INFO"
    assert config.logging.debug_llm_messages is False
    assert config.prompts.template_dir is None


def test_null_section_gives_defaults(tmp_path: Path) -> None:
    config = load_text(tmp_path, "persona:\nprompts:\n")

    assert config.persona.name == "myao"
    assert config.prompts.template_dir is None


def test_values_are_read(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
persona: {name: neko, language: en, timezone: Asia/Tokyo}
logging: {level: debug, debug_llm_messages: true}
agents:
  judgment: {model_id: other, params: {max_completion_tokens: 10}}
memory: {database_url: "postgresql+psycopg://u@h/db"}
""",
    )

    assert config.persona.name == "neko"
    assert config.persona.language == "en"
    assert config.persona.tzinfo == ZoneInfo("Asia/Tokyo")
    assert config.logging.level == "DEBUG"
    assert config.logging.debug_llm_messages is True
    assert config.agents.judgment.model_id == "other"
    assert config.agents.judgment.params == {"max_completion_tokens": 10}
    assert config.memory.sqlalchemy_url == "postgresql+psycopg://u@h/db"


def test_variables_are_expanded(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
slack:
  bot_token: ${BOT}
  app_token: ${APP:-fallback}
  api_base_url: http://${HOST}:${PORT:-8080}/api/
agents:
  response:
    client_args: {api_key: "${KEY}", headers: ["x-${HOST}"]}
persona:
  name: ${NAME:-myao}
""",
        {"BOT": "xoxb-1", "HOST": "localhost", "KEY": "sk-1", "NAME": ""},
    )

    assert config.slack.bot_token == "xoxb-1"
    assert config.slack.app_token == "fallback"
    assert config.slack.api_base_url == "http://localhost:8080/api/"
    assert config.agents.response.client_args == {"api_key": "sk-1", "headers": ["x-localhost"]}
    assert config.persona.name == "myao"  # an empty variable also takes the default


def test_expanded_value_is_validated(tmp_path: Path) -> None:
    config = load_text(tmp_path, "logging: {debug_llm_messages: '${DEBUG}'}", {"DEBUG": "true"})

    assert config.logging.debug_llm_messages is True


def test_missing_variable_is_fine_until_required(tmp_path: Path) -> None:
    config = load_text(tmp_path, "slack:\n  bot_token: ${SLACK_BOT_TOKEN}\n  app_token: xapp-1\n")

    assert config.slack.bot_token == ""
    config.require("slack.app_token", "persona")

    with pytest.raises(ConfigError) as excinfo:
        config.require("slack.bot_token", "slack.app_token")
    assert str(excinfo.value) == "slack.bot_token: environment variable SLACK_BOT_TOKEN is not set"


def test_require_a_section_covers_keys_under_it(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
agents:
  response:
    client_args: {api_key: "${OPENAI_API_KEY}", base_url: "${OPENAI_BASE_URL:-http://x}"}
  judgment:
    client_args: {headers: ["${MISSING_IN_LIST}"]}
""",
    )

    assert config.agents.response.client_args == {"base_url": "http://x"}
    assert config.agents.judgment.client_args == {}
    config.require("agents.memory")
    with pytest.raises(ConfigError) as excinfo:
        config.require("agents")
    assert excinfo.value.problems == (
        "agents.response.client_args.api_key: environment variable OPENAI_API_KEY is not set",
        "agents.judgment.client_args.headers: environment variable MISSING_IN_LIST is not set",
    )


def test_require_a_key_under_a_missing_one(tmp_path: Path) -> None:
    config = load_text(tmp_path, "agents:\n  memory:\n    client_args: ${ARGS}\n")

    with pytest.raises(ConfigError, match="^agents.memory.client_args: environment variable ARGS is not set$"):
        config.require("agents.memory.client_args.api_key")


def test_require_rejects_empty_values(tmp_path: Path) -> None:
    config = load_text(tmp_path, "slack:\n  bot_token: '${EMPTY}'\n", {"EMPTY": ""})

    with pytest.raises(ConfigError) as excinfo:
        config.require("slack.bot_token", "slack.app_token", "agents.response.client_args.api_key")
    assert excinfo.value.problems == (
        "slack.bot_token: is empty, but a value is required",
        "slack.app_token: is empty, but a value is required",
        "agents.response.client_args.api_key: is not set, but a value is required",
    )


def test_require_rejects_paths_the_models_do_not_define() -> None:
    with pytest.raises(ValueError, match="slack.bot_tokn"):
        Config().require("slack.bot_tokn")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("logging: {level: LOUD}", "logging.level: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("persona: {timezone: Mars/Base}", "persona.timezone: unknown time zone"),
        ("persona: {language: fr}", "persona.language: must be 'ja' or 'en'"),
        ("memory: {database_path: [1, 2]}", "memory.database_path: must be a path"),
        ("memory: {update_interval_seconds: 0}", "memory.update_interval_seconds: must be greater than 0"),
        ("memory: {channel_max_tokens: -1}", "memory.channel_max_tokens: must be greater than or equal to 0"),
        ("logging: {debug_llm_messages: maybe}", "logging.debug_llm_messages: must be true or false"),
        ("slack: hello", "slack: must be a mapping"),
        (
            "memory: {database_url: 'mysql://u:secret@h/db'}",
            "memory.database_url: must be a URL starting with sqlite:// or postgresql+psycopg://",
        ),
        ("memory: {database_url: 'not a url'}", "memory.database_url: must be a URL starting with"),
    ],
)
def test_invalid_value_names_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, text)

    message = str(excinfo.value)
    assert message.startswith(expected)
    assert "pydantic" not in message and "http" not in message and "secret" not in message


def test_every_problem_gets_a_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, "logging: {level: LOUD}\npersona: {language: fr}\n")

    assert [line.split(":")[0] for line in excinfo.value.problems] == ["persona.language", "logging.level"]
    assert str(excinfo.value).splitlines() == list(excinfo.value.problems)


def test_unknown_keys_are_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="myao2.config"):
        config = load_text(
            tmp_path,
            """
persona: {langauge: en}
agents:
  response: {modelid: x, client_args: {anything: 1}, params: {whatever: 2}}
colour: blue
""",
        )

    assert config.persona.language == "ja"
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == [
        "unknown config key 'persona.langauge' (ignored)",
        "unknown config key 'agents.response.modelid' (ignored)",
        "unknown config key 'colour' (ignored)",
    ]


def test_relative_paths_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    (tmp_path / "tpl").mkdir()
    write_config(folder, "memory: {database_path: db/m.db}\nprompts: {template_dir: ../tpl}\n")
    monkeypatch.chdir(tmp_path)

    config = load_config(Path("conf/config.yaml"), {})

    assert config.memory.database_path == folder.resolve() / "db" / "m.db"
    assert config.prompts.template_dir == tmp_path.resolve() / "tpl"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (None, "prompts.template_dir: no such folder: "),  # a typo: the shipped templates were used unnoticed
        ({"en/response_query.j2": "{% if context %}unclosed"}, "prompts.template_dir: en/response_query.j2 line 1: "),
        ({"ja/judgment_system.j2": "ok", "ja/x.j2": "{{ oops }"}, "prompts.template_dir: ja/x.j2 line 1: "),
        ({"en/memory_query.j2": b"\xff\xfe"}, "prompts.template_dir: en/memory_query.j2: not UTF-8 text"),
    ],
)
def test_a_template_folder_that_is_missing_or_holds_a_broken_template_is_a_config_error(
    tmp_path: Path, files: dict[str, str | bytes] | None, expected: str
) -> None:
    # Found only when a prompt was rendered, a broken template made every answer the apology.
    folder = tmp_path / "tpl"
    for name, source in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        data = source if isinstance(source, bytes) else source.encode()
        (folder / name).write_bytes(data)

    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, "prompts: {template_dir: tpl}")

    assert str(excinfo.value).startswith(expected)


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    config = load_text(tmp_path, f"memory: {{database_path: {tmp_path / 'x.db'}}}")

    assert config.memory.database_path == (tmp_path / "x.db").resolve()


def test_config_path_comes_from_myao2_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, "persona: {name: from-env}")
    monkeypatch.chdir(tmp_path.parent)

    assert load_config(environ={"MYAO2_CONFIG": str(path)}).persona.name == "from-env"


def test_default_path_is_config_yaml_in_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, "persona: {name: from-cwd}")
    monkeypatch.chdir(tmp_path)

    assert load_config(environ={}).persona.name == "from-cwd"


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config(environ={"MYAO2_CONFIG": str(missing)})


def test_yaml_errors_give_the_line_without_the_text(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, "slack:\n  bot_token: xoxb-secret\n  app_token: [unclosed\n")

    message = str(excinfo.value)
    assert "invalid YAML at line" in message
    assert "xoxb-secret" not in message
    assert "Traceback" not in message


@pytest.mark.parametrize("nested", ["[" * 60_000 + "]" * 60_000, "- " * 60_000 + "x"])
def test_collections_nested_absurdly_deep_give_an_error_not_a_crash(tmp_path: Path, nested: str) -> None:
    # libyaml's composer recursed in C (the process died of a segmentation fault), PyYAML's in Python (RecursionError).
    with pytest.raises(ConfigError, match=r"invalid YAML at line 3, column \d+: collections nested deeper than 100"):
        load_text(tmp_path, f"slack:\n  bot_token:\n    {nested}\n")


@pytest.mark.parametrize(
    ("value", "problem"),
    [("2024-13-45", "timestamp"), ("!!int xoxb-secret", "int"), ("!!bool xoxb-secret", "bool"), ("!!int '-'", "int")],
)
def test_a_value_that_is_not_what_its_form_says_gives_an_error_naming_its_line(
    tmp_path: Path, value: str, problem: str
) -> None:
    # PyYAML's constructors raised ValueError (a date that is no date, an !!int that is no number), KeyError (an
    # !!bool that is neither) or IndexError (an !!int that is a sign alone): a traceback
    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, f"slack:\n  bot_token: xoxb-secret\n  app_token: {value}\n")
    assert str(excinfo.value).endswith(f"invalid YAML at line 3, column 14: not a valid {problem}")
    assert "secret" not in str(excinfo.value)


def laughs(levels: int) -> str:
    """YAML whose aliases expand to 10 ** `levels` values ("a billion laughs" at 9), in a few hundred bytes."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "".join(f"  {line}\n" for line in lines)


def test_aliases_that_expand_to_absurdly_many_values_give_an_error_not_a_hang(tmp_path: Path) -> None:
    # every place that walks the values (the ${VAR} substitution first) went through 10 ** levels of them: at 8, over
    # a minute of CPU and memory without end for a file of 700 bytes
    with pytest.raises(ConfigError, match=r"invalid YAML at line 9, column \d+: more than 100000 values once"):
        load_text(tmp_path, f"slack:\n  bot_token: xoxb-1\n  app_token: xapp-1\nlaughs:\n{laughs(6)}")


def test_aliases_that_repeat_a_long_text_absurdly_often_give_an_error_not_gigabytes(tmp_path: Path) -> None:
    # 1,111 values, well within MAX_VALUES, 1,000 of them a 40,000-character text that the ${VAR} substitution made
    # anew: 88,889 of them (a 40 KB file) took 30 s and 3 GB; here 1,000 of them, 40 million characters
    text = "${V}" + "x" * 40_000
    lines = [f'l0: &l0 "{text}"'] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 4)]
    yaml_text = "slack:\n  bot_token: xoxb-1\n  app_token: xapp-1\nlaughs:\n" + "".join(f"  {line}\n" for line in lines)
    with pytest.raises(ConfigError, match=r"invalid YAML at line 8, column \d+: more than 10000000 characters once"):
        load_text(tmp_path, yaml_text, {"V": "v"})


def towers(levels: int) -> str:
    """YAML whose collections nest 90 deep, each tower on top of the one before through an alias: 90 * `levels`
    deep once its aliases are expanded, in a few kilobytes."""
    lines = [f"t{i}: &t{i} {'[' * 90}{f'*t{i - 1}' if i else 'x'}{']' * 90}" for i in range(levels)]
    return "".join(f"  {line}\n" for line in lines)


def test_aliases_that_nest_collections_absurdly_deep_give_an_error_not_a_crash(tmp_path: Path) -> None:
    # each tower within MAX_DEPTH, but stacked: the ${VAR} substitution recursed until RecursionError (a traceback)
    too_deep = r"invalid YAML at line 6, column \d+: collections nested deeper than 100"
    with pytest.raises(ConfigError, match=too_deep):
        load_text(tmp_path, f"slack:\n  bot_token: xoxb-1\n  app_token: xapp-1\ntowers:\n{towers(12)}")


@pytest.mark.parametrize("where", ["laughs: &a [*a]", "laughs: &a {a: [1, *a]}"])
def test_an_alias_inside_the_collection_it_names_gives_an_error_not_a_crash(tmp_path: Path, where: str) -> None:
    # a collection that holds itself: the ${VAR} substitution recursed until RecursionError (a traceback)
    cycle = r"invalid YAML at line 4, column \d+: an alias inside the collection it names"
    with pytest.raises(ConfigError, match=cycle):
        load_text(tmp_path, f"slack:\n  bot_token: xoxb-1\n  app_token: xapp-1\n{where}\n")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_text(tmp_path, "- a\n- b\n")


def test_secrets_do_not_appear_in_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_text(
            tmp_path,
            "slack: {bot_token: [xoxb-secret]}\npersona: {timezone: '${TZ_SECRET}'}\n",
            {"TZ_SECRET": "sk-secret"},
        )

    message = str(excinfo.value)
    assert "slack.bot_token" in message and "persona.timezone" in message
    assert "secret" not in message


def test_shipped_config_loads() -> None:
    environ = {
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_APP_TOKEN": "xapp-test",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": "http://llm.test/v1",
    }

    config = load_config(SHIPPED_CONFIG, environ)
    config.require("slack", "agents", "persona", "memory", "logging", "prompts")

    assert config.slack.bot_token == "xoxb-test"
    assert config.slack.app_token == "xapp-test"
    assert config.slack.api_base_url == "https://slack.com/api/"
    for agent in (config.agents.response, config.agents.judgment, config.agents.memory):
        assert agent.model_id == "gpt-5-mini"
        assert agent.client_args == {"api_key": "sk-test", "base_url": "http://llm.test/v1"}
    assert config.persona.name == "myao"
    assert config.memory.database_path == SHIPPED_CONFIG.parent / "data" / "memory.db"


def test_shipped_config_has_no_unknown_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="myao2.config"):
        config = load_config(SHIPPED_CONFIG, {})

    assert caplog.records == []
    assert config.agents.response.client_args == {"base_url": "https://api.openai.com/v1"}
    with pytest.raises(ConfigError) as excinfo:
        config.require("slack.bot_token", "agents.memory")
    assert excinfo.value.problems == (
        "slack.bot_token: environment variable SLACK_BOT_TOKEN is not set",
        "agents.memory.client_args.api_key: environment variable OPENAI_API_KEY is not set",
    )


def test_config_is_frozen() -> None:
    with pytest.raises(ValueError):
        Config().persona.name = "other"  # type: ignore[misc]


def test_retention_defaults_and_order(tmp_path: Path) -> None:
    retention = load_text(tmp_path, "").memory.retention
    assert (retention.digest_after_days, retention.condense_after_days, retention.delete_after_days) == (3, 7, 14)
    off = load_text(tmp_path, "memory: {retention: {digest_after_days: 0, condense_after_days: 0}}").memory.retention
    assert off.delete_after_days == 14
    with pytest.raises(ConfigError, match="^memory.retention: delete_after_days must be more than condense_after_days"):
        load_text(tmp_path, "memory: {retention: {condense_after_days: 20}}")
    with pytest.raises(ConfigError, match="^memory.retention.digest_after_days: must be greater than or equal to 0"):
        load_text(tmp_path, "memory: {retention: {digest_after_days: -1}}")
