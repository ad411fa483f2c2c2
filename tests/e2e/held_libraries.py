"""Runs ``myao2`` with its model libraries never done loading (`import_model_libraries` waits for good): a bot
stopped meanwhile has that load, and nothing of its answers, in progress."""

from __future__ import annotations

import threading

from myao2.infrastructure.llm import agents

agents.import_model_libraries = threading.Event().wait  # type: ignore[assignment]

if __name__ == "__main__":
    from myao2.cli import main

    raise SystemExit(main())
