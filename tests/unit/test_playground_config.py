"""The playground's settings: refused, naming the key, with exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from myao2.cli import main
from myao2.config import load_config
from myao2.playground import check_playground_settings
from tests.unit.test_cli import restore_root_logger  # noqa: F401 - autouse: main() configures logging


def write(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], **sections: object) -> str:
    assert main(["playground", "--config", str(write(tmp_path, **sections))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_host_others_can_reach_needs_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(tmp_path, capsys, playground={"host": "0.0.0.0"})
    assert "playground.token" in err and "0.0.0.0" in err
    err = refused(tmp_path, capsys, playground={"host": "myhost.example", "token": "  "})
    assert "playground.token" in err


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_host_needs_no_token(tmp_path: Path, host: str) -> None:
    check_playground_settings(load_config(write(tmp_path, playground={"host": host})))


def test_a_host_with_a_token_is_accepted(tmp_path: Path) -> None:
    check_playground_settings(load_config(write(tmp_path, playground={"host": "0.0.0.0", "token": "s3cret"})))


def test_a_port_out_of_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "playground.port" in refused(tmp_path, capsys, playground={"port": 70000})


def test_an_avatar_that_is_not_there_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(tmp_path, capsys, persona={"avatar": "missing.svg"})
    assert "persona.avatar" in err and "no such file" in err


def test_an_avatar_that_is_not_a_picture_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hi", encoding="utf-8")
    err = refused(tmp_path, capsys, persona={"avatar": "notes.txt"})
    assert "persona.avatar" in err and "image file" in err


def test_an_avatar_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "me.png").write_bytes(b"\x89PNG")
    assert load_config(write(tmp_path, persona={"avatar": "me.png"})).persona.avatar == tmp_path / "me.png"
