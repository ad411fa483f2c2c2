"""Deferred package initialisers: a package's ``__init__`` runs when one of its names is first read, not when one of
its modules is imported.

openai's type packages (``openai.types`` and those under it) import every one of their ~570 modules from their
``__init__``: ~1,000 M instructions (~0.3-0.5 s of CPU), on the way to the bot's first answer, of which a chat
client uses a few dozen modules, imported by their own names. Deferred, importing ``openai.types.chat.chat_completion``
runs ``openai/types/__init__.py`` only if something reads a name of ``openai.types`` itself (``openai.types.Batch``,
``from openai.types import Batch``), and then whole, as an import would have: the package holds the same names.

The one difference is when the ``__init__`` runs, and so where its errors are raised (at the read). A read in
another thread while it runs waits for it, as an import under way is waited for. What the ``__init__`` does of its
own accord beyond defining names (none of openai's does anything else) is done at the first read.

Only for packages none of whose modules imports from the package itself (``from .. import x``): such an import,
in a module that the ``__init__`` imports too, would run the ``__init__`` in the middle of that module's import, a
cycle that the eager order avoided (slack_sdk's modules do that; openai's type modules import each other by module).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any


def defer_package_inits(*packages: str) -> None:
    """Defer the ``__init__`` of each of `packages`, and of every package under it, that is not imported yet."""
    _finder.packages.update(packages)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds the deferred packages where the path finder does, with their loader wrapped in `_DeferredInit`."""

    def __init__(self) -> None:
        self.packages: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == package or fullname.startswith(package + ".") for package in self.packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.submodule_search_locations is None or not hasattr(spec.loader, "get_code"):
            return None  # a module, or a package not of files: imported as usual
        spec.loader = _DeferredInit(spec.loader)
        return spec


class _DeferredInit(importlib.abc.Loader):
    """Creates the package with its ``__path__`` and the rest of its import attributes, and a module
    ``__getattr__`` that runs its ``__init__`` at the first name read; otherwise the wrapped loader."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        lock = threading.RLock()
        loader = self._loader
        started = False

        def __getattr__(name: str) -> Any:
            nonlocal started
            with lock:
                if not started:
                    started = True
                    try:
                        exec(loader.get_code(module.__name__), module.__dict__)
                    finally:
                        if module.__dict__.get("__getattr__") is __getattr__:
                            del module.__dict__["__getattr__"]
            try:
                return module.__dict__[name]
            except KeyError:
                own = module.__dict__.get("__getattr__")
                if own is not None and own is not __getattr__:  # the package's own
                    return own(name)
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


_finder = _DeferringFinder()
