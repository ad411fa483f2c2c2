"""Deferred package initialisers (myao2.infrastructure.llm.deferred_inits): a package's __init__ runs when one of
its names is first read, never when one of its modules is imported; what it then holds is what it would have."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from myao2.infrastructure.llm import deferred_inits
from myao2.infrastructure.llm.deferred_inits import defer_package_inits
from tests.unit.test_start_up import printed


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package `deferred_pkg` whose __init__ counts its runs (in `runs`) and imports its module `heavy`;
    its modules `light` and `sub.leaf` import nothing of it."""
    root = tmp_path / "deferred_pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(
        "import builtins\n"
        "builtins.deferred_pkg_runs = getattr(builtins, 'deferred_pkg_runs', 0) + 1\n"
        "from deferred_pkg.heavy import HEAVY\n"
        "GATE = getattr(builtins, 'deferred_pkg_gate', None)\n"
        "if GATE is not None:\n"
        "    GATE()\n"
        "NAME = 'from init'\n",
        encoding="utf-8",
    )
    (root / "heavy.py").write_text("HEAVY = 'heavy'\n", encoding="utf-8")
    (root / "light.py").write_text("LIGHT = 'light'\n", encoding="utf-8")
    (root / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (root / "sub" / "leaf.py").write_text("LEAF = 'leaf'\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    finders, deferred = list(sys.meta_path), set(deferred_inits._finder.packages)
    yield "deferred_pkg"
    sys.meta_path[:] = finders
    deferred_inits._finder.packages = deferred
    for name in [name for name in sys.modules if name.split(".")[0] == "deferred_pkg"]:
        del sys.modules[name]
    import builtins

    for name in ("deferred_pkg_runs", "deferred_pkg_gate"):
        if hasattr(builtins, name):
            delattr(builtins, name)


def runs() -> int:
    import builtins

    return getattr(builtins, "deferred_pkg_runs", 0)


def test_importing_a_module_of_a_deferred_package_does_not_run_its_init(package: str) -> None:
    defer_package_inits(package)
    from deferred_pkg.light import LIGHT
    from deferred_pkg.sub.leaf import LEAF

    assert (LIGHT, LEAF) == ("light", "leaf")
    assert runs() == 0
    assert "deferred_pkg.heavy" not in sys.modules


def test_the_first_name_read_runs_the_init_once_and_it_holds_what_it_would_have(package: str) -> None:
    defer_package_inits(package)
    import deferred_pkg
    import deferred_pkg.light

    assert deferred_pkg.NAME == "from init"
    assert (deferred_pkg.HEAVY, deferred_pkg.light.LIGHT) == ("heavy", "light")
    from deferred_pkg import HEAVY, heavy

    assert (HEAVY, heavy.HEAVY) == ("heavy", "heavy")
    assert runs() == 1
    with pytest.raises(AttributeError):
        deferred_pkg.MISSING  # noqa: B018
    assert runs() == 1
    assert "__getattr__" not in vars(deferred_pkg)


def test_a_package_imported_already_is_left_as_it_is(package: str) -> None:
    import deferred_pkg

    defer_package_inits(package)
    assert runs() == 1 and deferred_pkg.NAME == "from init"


def test_a_reader_in_another_thread_waits_for_the_init_under_way(package: str) -> None:
    import builtins

    entered, go = threading.Event(), threading.Event()

    def gate() -> None:
        entered.set()
        assert go.wait(60)

    builtins.deferred_pkg_gate = gate  # type: ignore[attr-defined]
    defer_package_inits(package)
    import deferred_pkg

    read: dict[str, object] = {}

    def reader(key: str) -> None:
        try:
            read[key] = deferred_pkg.NAME
        except AttributeError as exc:
            read[key] = exc

    first = threading.Thread(target=reader, args=("first",))
    first.start()
    assert entered.wait(60)
    second = threading.Thread(target=reader, args=("second",))
    second.start()
    for _ in range(6000):  # until the second reader waits in the deferred init's lock
        frame = sys._current_frames().get(second.ident or 0)
        if frame is not None and frame.f_code.co_name == "__getattr__":
            break
        second.join(0.01)
    go.set()
    first.join(60)
    second.join(60)
    assert read == {"first": "from init", "second": "from init"}
    assert runs() == 1


def test_the_model_libraries_load_without_openais_unused_types() -> None:
    """openai's type packages import all their ~500 modules (~1,000 M instructions); a chat client needs a few dozen."""
    code = (
        "import sys\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        "import_model_libraries()\n"
        "print(sorted(name for name in ('openai.types.responses.response', 'openai.types.batch') if name in sys.modules))\n"
    )
    assert printed(code) == "[]"


def test_openais_types_read_the_same_deferred_as_imported_at_once() -> None:
    names = (
        "import openai.types, openai.types.responses\n"
        "print(openai.types.Batch.__module__, openai.types.responses.Response.__module__)\n"
        "print(sorted(vars(openai.types)), sorted(vars(openai.types.responses)))\n"
    )
    deferred = printed(
        "from myao2.infrastructure.llm.agents import import_model_libraries\nimport_model_libraries()\n" + names
    )
    assert deferred == printed(names)


def test_the_model_libraries_load_without_strands_unused_features() -> None:
    """strands.experimental's ``__init__`` imports its agent config (jsonschema, ~120 M instructions), strands.session's
    its session managers and bidirectional agents: features the bot never uses. The agent imports the modules it
    needs of them (checkpoint, session_manager) by their own names."""
    code = (
        "import sys\n"
        "from myao2.infrastructure.llm.agents import import_model_libraries\n"
        "import_model_libraries()\n"
        "unused = ('jsonschema', 'strands.experimental.agent_config', 'strands.session.s3_session_manager', 'strands.bidi')\n"
        "print(sorted(name for name in unused if name in sys.modules))\n"
    )
    assert printed(code) == "[]"


def test_strands_unused_features_read_the_same_deferred_as_imported_at_once() -> None:
    names = (
        "import strands.experimental, strands.experimental.steering, strands.session\n"
        "print(strands.experimental.config_to_agent.__module__, strands.experimental.steering.SteeringHandler.__module__)\n"
        "print(strands.session.FileSessionManager.__module__)\n"
        "print(sorted(vars(strands.experimental)), sorted(vars(strands.experimental.steering)), sorted(vars(strands.session)))\n"
    )
    deferred = printed(
        "from myao2.infrastructure.llm.agents import import_model_libraries\nimport_model_libraries()\n" + names
    )
    assert deferred == printed(names)
