"""The benchmark issue 11 asks for runs against the project's fakes and prints each of its figures (their values
are the bench's to print, not a test's to judge: no timed assertions)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.e2e.conftest import ROOT
from tests.fakes import PROXY_VARIABLES

FIGURES = (
    "start-up on a new database: Socket Mode connected",
    "mention sent on connection:",
    "sequential mentions: latency p50",
    "bot CPU per mention:",
    "plain messages: bot CPU per message",
    "simultaneous mentions: 1/1 answered",
    "restart (database at the newest migration)",
    "first token -> first streamed words",
    "Web API calls per streamed answer",
    "ack latency over",
)


def test_mention_latency_bench_runs_and_prints_every_figure() -> None:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    arguments = ["--mentions", "1", "--messages", "1", "--concurrent", "1", "--streamed", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mention_latency.py"), *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output, output
    for figure in FIGURES:
        assert figure in output, f"{figure!r} not printed:\n{output}"
