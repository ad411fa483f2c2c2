"""/ready's parts: Slack, the database, the model (unreachable while its newest call failed, within the window)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from myao2.domain.activity import CallOutcome, ModelCall
from myao2.infrastructure.health import Health, HealthServer, ModelReachability, ready_body

FAILED = ModelCall("response", "m", 0, 0, 30, CallOutcome.ERROR, "APIConnectionError")
ANSWERED = ModelCall("response", "m", 10, 5, 30, CallOutcome.OK, "end_turn")


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
