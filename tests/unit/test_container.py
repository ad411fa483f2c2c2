"""The container recipe: installed as the README says, not as root, data on a volume, health checked on /live."""

from __future__ import annotations

import json
import re
import shlex
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from myao2.config import CONFIG_ENV_VAR, HealthCheckConfig
from myao2.infrastructure.health import Health, HealthServer, ModelReachability

ROOT = Path(__file__).resolve().parents[2]
SETUP = ("useradd", "mkdir", "chown")
"""Commands a RUN may use besides the README's: making the unprivileged user and the data folder."""


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments left out."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [line for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(keyword.upper(), rest.strip()) for keyword, rest in (line.split(None, 1) for line in lines)]


def arguments(keyword: str) -> list[str]:
    return [rest for kw, rest in instructions() if kw == keyword]


def readme_commands() -> set[str]:
    """Every command line in the README's sh code blocks."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    return {line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()} - {""}


def test_the_install_steps_are_the_readmes() -> None:
    runs = [command.strip() for run in arguments("RUN") for command in run.split("&&")]
    installs = [command for command in runs if shlex.split(command)[0] not in SETUP]
    assert installs == ["python3 dev.py install"]
    assert set(installs) <= readme_commands()
    for source in (path for copy in arguments("COPY") for path in shlex.split(copy)[1:-1] if not path.startswith("--")):
        assert (ROOT / source).exists(), source


def test_it_runs_as_an_unprivileged_user_from_the_install_on() -> None:
    keywords = [keyword for keyword, _ in instructions()]
    [user] = arguments("USER")
    assert user not in ("root", "0") and not user.startswith("0:")
    assert keywords.index("USER") < keywords.index("RUN", keywords.index("COPY"))  # pip runs as that user too
    assert f"useradd --create-home --uid 10001 {user}" in arguments("RUN")[0]
    assert "chown myao2 /data /app" in arguments("RUN")[0]  # it writes .venv in /app and the database in /data


def test_data_is_on_a_volume_and_the_config_is_mounted() -> None:
    [volume] = arguments("VOLUME")
    assert "/data" in volume
    assert f"{CONFIG_ENV_VAR}=/config/config.yaml" in arguments("ENV")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ":/config/config.yaml" in readme and ":/data" in readme and "memory.database_path: /data/" in readme
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", "data"} <= set(ignored)  # neither the host's environment nor its database go into the image


def test_the_health_check_asks_live_on_the_default_port_which_the_bot_serves() -> None:
    [check] = arguments("HEALTHCHECK")
    [url] = re.findall(r"http://[^'\"\s]+", check)
    parts = urlsplit(url)
    assert parts.port == HealthCheckConfig().port
    assert parts.path == "/live"
    assert "EXPOSE" in dict(instructions()) and dict(instructions())["EXPOSE"] == str(parts.port)
    server = HealthServer(Health(lambda: None, ModelReachability(60)), 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{parts.path}", timeout=5) as response:
            assert response.status == 200
    finally:
        server.stop()


def test_it_starts_the_bot_as_the_readme_does() -> None:
    [entrypoint] = arguments("ENTRYPOINT")
    [command] = arguments("CMD")
    assert " ".join(json.loads(entrypoint)) == "python3 dev.py run"
    assert "python3 dev.py run" in readme_commands()
    assert json.loads(command) == ["run"]
