"""dev.py: the installed bot's modules are compiled, so no start compiles them again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_installing_compiles_the_bots_modules_for_the_venvs_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    import dev

    module = tmp_path / "src" / "myao2" / "sub" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.setattr(dev, "ROOT", tmp_path)
    monkeypatch.setattr(dev, "PYTHON", Path(sys.executable))  # the venv's python, as dev.PYTHON is once installed
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    dev.compile_sources()
    assert Path(importlib.util.cache_from_source(str(module))).is_file()


def test_locking_keeps_the_platform_markers_of_pyprojects_dependencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    import dev

    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["aiohttp>=3", "UVLoop>=0.21; sys_platform == \'linux\'"]\n', encoding="utf-8"
    )
    monkeypatch.setattr(dev, "ROOT", tmp_path)

    assert dev.with_markers("aiohttp==3.14.5\nuvloop==0.23.0\nyarl==1.25.1\n").splitlines() == [
        "aiohttp==3.14.5",
        "uvloop==0.23.0 ; sys_platform == 'linux'",
        "yarl==1.25.1",
    ]

