"""ModelClients.load: the model libraries and the models, loaded off the event loop before their first call."""

from __future__ import annotations

import threading

import openai
import pytest

from myao2.config import AgentConfig, AgentsConfig, ConfigError
from myao2.infrastructure.llm.agents import ModelClients


async def test_load_builds_each_role_model_in_a_worker_thread_and_calls_reuse_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built_in: list[threading.Thread] = []

    class RecordingAsyncOpenAI(openai.AsyncOpenAI):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)  # type: ignore[arg-type]
            built_in.append(threading.current_thread())

    monkeypatch.setattr(openai, "AsyncOpenAI", RecordingAsyncOpenAI)
    config = AgentConfig(model_id="m", client_args={"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"})
    clients = ModelClients(AgentsConfig(response=config, judgment=config, memory=config))
    await clients.load()
    assert built_in and threading.main_thread() not in built_in
    built = len(built_in)
    models = [clients.model(role) for role in ("response", "judgment", "memory")]
    assert [clients.model(role) for role in ("response", "judgment", "memory")] == models
    assert len(built_in) == built
    await clients.close()


def _http_client(clients: ModelClients, role: str) -> object:
    return clients.model(role)._custom_client._client._client  # type: ignore[attr-defined]  # LeanChatClient -> AsyncOpenAI -> httpx


async def test_roles_with_the_same_client_args_share_one_http_client_and_keep_their_own_retries() -> None:
    shared = {"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"}
    clients = ModelClients(
        AgentsConfig(
            response=AgentConfig(model_id="m", client_args=shared, max_retries=5, timeout_seconds=30),
            judgment=AgentConfig(model_id="m", client_args=dict(shared), max_retries=1, timeout_seconds=7),
            memory=AgentConfig(model_id="m", client_args={**shared, "base_url": "http://127.0.0.1:8/v1"}),
        )
    )
    await clients.load()
    assert _http_client(clients, "response") is _http_client(clients, "judgment")
    assert _http_client(clients, "memory") is not _http_client(clients, "response")
    response, judgment = (clients.model(role)._custom_client._client for role in ("response", "judgment"))  # type: ignore[attr-defined]
    assert (response.max_retries, response.timeout) == (5, 30)
    assert (judgment.max_retries, judgment.timeout) == (1, 7)
    await clients.close()


async def test_a_role_whose_model_cannot_be_built_fails_at_its_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = AgentConfig(model_id="m", client_args={"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"})
    clients = ModelClients(AgentsConfig(response=good, judgment=AgentConfig(model_id="m"), memory=good))
    await clients.load()
    assert clients.model("response") is not None
    with pytest.raises(ConfigError, match=r"agents\.judgment\.client_args"):
        clients.model("judgment")
    await clients.close()


def test_without_tracing_the_model_libraries_leave_threads_uninstrumented(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.instrumentation.threading import ThreadingInstrumentor

    from myao2.application import tracing
    from myao2.infrastructure.llm.agents import import_model_libraries

    monkeypatch.setattr(tracing, "_tracer", None)
    import_model_libraries()
    assert not ThreadingInstrumentor().is_instrumented_by_opentelemetry


async def test_clients_share_the_one_loading_of_the_model_libraries() -> None:
    from myao2.infrastructure.llm.agents import load_model_libraries

    config = AgentConfig(model_id="m", client_args={"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"})
    first, second = (ModelClients(AgentsConfig(response=config, judgment=config, memory=config)) for _ in range(2))
    await first.load()
    await second.load()
    assert load_model_libraries() is load_model_libraries() and load_model_libraries().done()


async def test_loaded_clients_load_again_without_waiting_for_anything() -> None:
    """Every model call awaits `load` first: once the models are built, that takes no turn of the event loop."""
    config = AgentConfig(model_id="m", client_args={"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"})
    clients = ModelClients(AgentsConfig(response=config))
    await clients.load()

    again = clients.load()
    with pytest.raises(StopIteration):
        again.send(None)
    await clients.close()
