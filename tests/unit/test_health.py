"""/ready's parts: Slack, the database, the model (unreachable while its newest call failed, within the window)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from myao2.domain.activity import CallOutcome, ModelCall
from myao2.infrastructure.health import Health, HealthServer, ModelReachability, ready_body

FAILED = ModelCall("response", "m", 0, 0, 30, CallOutcome.ERROR, "APIConnectionError")
ANSWERED = ModelCall("response", "m", 10, 5, 30, CallOutcome.OK, "end_turn")
CUT_SHORT = ModelCall("response", "m", 0, 0, 30, CallOutcome.ABORTED, "cancelled")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_model_is_unreachable_after_a_failure_until_a_call_succeeds() -> None:
    model = ModelReachability(60)
    assert model() is None
    model.observe(FAILED)
    assert "APIConnectionError" in model()
    model.observe(ANSWERED)
    assert model() is None


def test_a_call_cut_short_neither_clears_a_failure_nor_counts_as_one() -> None:
    model = ModelReachability(60)
    model.observe(CUT_SHORT)
    assert model() is None
    model.observe(FAILED)
    model.observe(CUT_SHORT)
    assert "APIConnectionError" in model()


def test_a_failure_older_than_the_window_no_longer_counts() -> None:
    clock = Clock()
    model = ModelReachability(60, clock)
    model.observe(FAILED)
    clock.now += 59
    assert model() == "the last model call failed 59 s ago (APIConnectionError)"
    clock.now += 2
    assert model() is None


def test_the_body_names_each_part_that_is_not_ready() -> None:
    body = ready_body({"slack": None, "database": None, "model": "the last model call failed 3 s ago (X)"})
    assert body == {
        "ready": False,
        "not_ready": ["model"],
        "checks": {
            "slack": {"ready": True},
            "database": {"ready": True},
            "model": {"ready": False, "reason": "the last model call failed 3 s ago (X)"},
        },
    }
    assert ready_body({"slack": None, "database": None, "model": None})["ready"] is True


def get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_the_server_answers_ready_in_json_and_live_in_text() -> None:
    model = ModelReachability(60)
    health = Health(lambda: None, model)
    server = HealthServer(health, 0)
    server.start()
    try:
        status, kind, body = get(server.port, "/ready")
        assert (status, kind) == (503, "application/json")
        assert json.loads(body)["not_ready"] == ["slack"]
        health.slack_connected = True
        model.observe(FAILED)
        status, _, body = get(server.port, "/ready")
        assert status == 503 and json.loads(body)["not_ready"] == ["model"]
        model.observe(ANSWERED)
        status, _, body = get(server.port, "/ready")
        assert status == 200 and json.loads(body)["ready"] is True
        assert get(server.port, "/live")[:2] == (200, "text/plain")
    finally:
        server.stop()


@pytest.mark.skipif(sys.platform != "linux", reason="reads the thread's context switches from /proc")
def test_the_idle_server_sleeps_until_stopped_and_stops_at_once() -> None:
    """Its thread never wakes while no request comes (serve_forever woke every 0.5 s to look for a stop, and
    stopping waited for that wake-up: every exit of the bot took up to half a second longer)."""
    server = HealthServer(Health(lambda: None, ModelReachability(60)), 0)
    server.start()
    try:
        assert get(server.port, "/live")[0] in (200, 503)
        switches = Path(f"/proc/self/task/{server._thread.native_id}/status")

        def field(name: str) -> str:
            return next(line for line in switches.read_text().splitlines() if line.startswith(f"{name}:")).split()[1]

        def wake_ups() -> int:
            return int(field("voluntary_ctxt_switches"))

        before, deadline = wake_ups(), time.monotonic() + 30
        while time.monotonic() < deadline:  # until the request just answered is over
            time.sleep(0.2)
            before, settled = wake_ups(), before
            # Asleep too: a thread that a busy machine kept waiting for a CPU on its way back to its wait (state R)
            # made no switch for a while, and then one more, which was taken for a wake-up.
            if before == settled and field("State") == "S":
                break
        time.sleep(1.5)
        assert wake_ups() == before
    finally:
        server.stop()
    assert not server._thread.is_alive()
