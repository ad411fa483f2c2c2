"""Runs ``myao2`` with the memo named ``held`` never done being read (`get_memo` waits for good): a bot killed
meanwhile has that tool's task shown running."""

from __future__ import annotations

import threading

from myao2.infrastructure.db.memo_store import SqlMemoStore

_get = SqlMemoStore.get


def _held_get(self: SqlMemoStore, name: str, *args: object, **kwargs: object) -> object:
    if name == "held":
        threading.Event().wait()
    return _get(self, name, *args, **kwargs)  # type: ignore[arg-type]


SqlMemoStore.get = _held_get  # type: ignore[method-assign]

if __name__ == "__main__":
    from myao2.cli import main

    raise SystemExit(main())
