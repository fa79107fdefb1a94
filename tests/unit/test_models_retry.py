"""Retries, timeouts and error translation, against injected failures over real HTTP."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from executor.config import Settings
from executor.errors import (
    ModelResponseError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from executor.hooks import Event, HookBus
from executor.messages import Message
from executor.models import OllamaModel, OpenAIModel, RetryPolicy
from executor.models.retry import backoff
from tests.fakes import ModelServer
from tests.fakes.providers import PROVIDERS, ProviderName, make_model

HELLO = [Message.user("hello")]


@pytest.fixture
def events() -> tuple[HookBus, list[Event]]:
    bus, seen = HookBus(), []
    bus.subscribe(seen.append, "retry")
    return bus, seen


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_503_is_retried_and_each_retry_is_an_event(
    provider: ProviderName, stream: bool, model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    model_server.error(503, "overloaded").error(502).reply("finally")
    with make_model(provider, model_server, stream=stream, hooks=bus) as model:
        reply = model.chat(HELLO, [])
    assert reply.message.content == "finally"
    assert len(model_server.chat_requests) == 3
    assert [e.data["attempt"] for e in seen] == [1, 2]
    assert [e.data["reason"] for e in seen] == ["HTTP 503", "HTTP 502"]
    assert all(e.data["url"].endswith(("/api/chat", "/v1/chat/completions")) for e in seen)
    assert all(0 <= e.data["delay"] <= 0.05 for e in seen)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_obeys_retry_after_instead_of_backoff(
    provider: ProviderName, model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    model_server.error(429, "slow down", retry_after=0).reply("ok")
    slow_backoff = RetryPolicy(max_attempts=3, base_delay=30.0)  # would take 30 s if used
    started = time.monotonic()
    with make_model(provider, model_server, hooks=bus, retry=slow_backoff) as model:
        assert model.chat(HELLO, []).message.content == "ok"
    assert time.monotonic() - started < 5
    assert [(e.data["reason"], e.data["delay"]) for e in seen] == [("HTTP 429", 0.0)]


def test_retry_after_is_capped(model_server: ModelServer, events: tuple[HookBus, list]) -> None:
    bus, seen = events
    model_server.error(429, retry_after=3600).reply("ok")
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05)
    with make_model("ollama", model_server, hooks=bus, retry=policy) as model:
        assert model.chat(HELLO, []).message.content == "ok"
    assert [e.data["delay"] for e in seen] == [0.05]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_5xx_gives_up_after_max_attempts_with_the_servers_message(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.error(503, "model is loading").error(503, "model is loading")
    model_server.error(503, "model is loading").reply("never reached")
    with make_model(provider, model_server) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    assert caught.value.status_code == 503
    assert "model is loading" in str(caught.value)
    assert model_server.url in str(caught.value)
    assert len(model_server.chat_requests) == 3
    assert model_server.pending == 1


def test_max_attempts_is_configurable(model_server: ModelServer) -> None:
    for _ in range(4):
        model_server.error(500)
    model_server.reply("fifth time lucky")
    policy = RetryPolicy(max_attempts=5, base_delay=0.001)
    with make_model("openai", model_server, retry=policy) as model:
        assert model.chat(HELLO, []).message.content == "fifth time lucky"
    assert len(model_server.chat_requests) == 5


def test_settings_configure_the_policy() -> None:
    policy = RetryPolicy.from_settings(Settings(max_retries=6, retry_base_delay=0.25))
    assert (policy.max_attempts, policy.base_delay) == (7, 0.25)
    assert RetryPolicy.from_settings(Settings()).max_attempts == 3


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0)
    assert 1.0 <= backoff(policy, 1) <= 2.0
    assert 2.0 <= backoff(policy, 2) <= 3.0
    assert 4.0 <= backoff(policy, 3) <= 5.0
    assert backoff(policy, 10) == 5.0


@pytest.mark.parametrize("status", [400, 401, 404, 422])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_other_4xx_is_never_retried(
    provider: ProviderName, status: int, model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    model_server.error(status, "bad request: messages missing").reply("not reached")
    with make_model(provider, model_server, hooks=bus) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    assert caught.value.status_code == status
    assert "bad request: messages missing" in str(caught.value)
    assert len(model_server.chat_requests) == 1
    assert seen == []


def test_ollama_404_says_how_to_pull_the_model(model_server: ModelServer) -> None:
    model_server.error(404, "model 'fake-model' not found")
    with make_model("ollama", model_server) as model, pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    assert caught.value.fix == (
        "pull the model with `ollama pull fake-model` or choose one with --model")


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_dropped_connection_is_retried(
    provider: ProviderName, stream: bool, model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    model_server.drop().reply("after the drop")
    with make_model(provider, model_server, stream=stream, hooks=bus) as model:
        assert model.chat(HELLO, []).message.content == "after the drop"
    assert len(model_server.chat_requests) == 2
    assert [e.data["reason"] for e in seen] == ["connection dropped"]


def test_dropped_connections_are_retried_at_most_twice(
    model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    for _ in range(5):
        model_server.drop()
    generous = RetryPolicy(max_attempts=5, base_delay=0.001)
    with make_model("ollama", model_server, hooks=bus, retry=generous) as model, \
            pytest.raises(ModelUnavailableError) as caught:
        model.chat(HELLO, [])
    assert len(model_server.chat_requests) == 3
    assert len(seen) == 2
    assert "closed the connection" in str(caught.value)
    assert "ollama serve" in str(caught.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_cut_after_tokens_were_shown_is_not_replayed(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply("one two three four", cut_after=2).reply("replayed")
    tokens: list[str] = []
    with make_model(provider, model_server, stream=True) as model, \
            pytest.raises(ModelUnavailableError):
        model.chat(HELLO, [], on_token=tokens.append)
    assert len(model_server.chat_requests) == 1
    assert "replayed" not in "".join(tokens)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_never_answers_times_out(
    provider: ProviderName, stream: bool, model_server: ModelServer,
    events: tuple[HookBus, list],
) -> None:
    bus, seen = events
    model_server.hang(30).hang(30)
    policy = RetryPolicy(max_attempts=2, base_delay=0.001)
    started = time.monotonic()
    with make_model(provider, model_server, stream=stream, hooks=bus, timeout=0.2,
                    retry=policy) as model, pytest.raises(ModelTimeoutError) as caught:
        model.chat(HELLO, [])
    assert time.monotonic() - started < 3
    assert isinstance(caught.value, TimeoutError)
    assert "did not answer within 0.2s" in str(caught.value)
    assert "--timeout" in str(caught.value)
    assert len(model_server.chat_requests) == 2
    assert [e.data["reason"] for e in seen] == ["timeout"]


def test_a_timeout_then_an_answer_succeeds(model_server: ModelServer) -> None:
    model_server.hang(30).reply("woke up")
    with make_model("openai", model_server, timeout=0.2) as model:
        assert model.chat(HELLO, []).message.content == "woke up"


@pytest.mark.parametrize(("provider", "fix"), [
    ("ollama", "is Ollama running? start it with `ollama serve` or pass --host"),
    ("openai", "is the server running?"),
])
def test_connection_refused_names_the_url_and_the_fix(
    provider: ProviderName, fix: str, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    port = free_port()
    policy = RetryPolicy(max_attempts=5, base_delay=0.001)
    model: OllamaModel | OpenAIModel = (
        OllamaModel("m", host=f"127.0.0.1:{port}", retry=policy, hooks=bus)
        if provider == "ollama"
        else OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", retry=policy, hooks=bus)
    )
    with model, pytest.raises(ModelUnavailableError) as caught:
        model.chat(HELLO, [])
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message
    assert fix in message
    assert isinstance(caught.value, ConnectionError)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)  # chained, not leaked
    assert [e.data["reason"] for e in seen] == ["connection refused"] * 2  # 3 attempts


def test_a_reply_that_is_not_json_is_a_response_error_not_retried(
    model_server: ModelServer,
) -> None:
    model_server.raw(200, b"<html>proxy login</html>", "text/html").reply("not reached")
    with make_model("openai", model_server, stream=False) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    assert "not JSON" in str(caught.value) and "proxy login" in str(caught.value)
    assert len(model_server.chat_requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_error_inside_the_stream_is_reported(
    provider: ProviderName, model_server: ModelServer
) -> None:
    line = (b'{"error": "out of memory"}\n' if provider == "ollama"
            else b'data: {"error": {"message": "out of memory"}}\n\n')
    model_server.raw(200, line, "text/event-stream")
    with make_model(provider, model_server, stream=True) as model, \
            pytest.raises(ModelResponseError, match="out of memory"):
        model.chat(HELLO, [])


def test_retry_after_as_an_http_date_is_understood(events: tuple[HookBus, list]) -> None:
    bus, seen = events
    answers = iter([
        httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        httpx.Response(200, json={"message": {"role": "assistant", "content": "ok"},
                                  "done": True}),
    ])
    transport = httpx.MockTransport(lambda request: next(answers))
    with OllamaModel("m", host="http://ollama.test", stream=False, hooks=bus,
                     retry=RetryPolicy(base_delay=30.0), transport=transport) as model:
        assert model.chat(HELLO, []).message.content == "ok"
    assert [e.data["delay"] for e in seen] == [0.0]  # a date in the past: retry at once


def test_an_unexpected_transport_error_is_translated_once() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("no such protocol", request=request)

    with OllamaModel("m", host="http://ollama.test", transport=httpx.MockTransport(broken),
                     retry=RetryPolicy(base_delay=0.001)) as model, \
            pytest.raises(ModelUnavailableError, match="no such protocol") as caught:
        model.chat(HELLO, [])
    assert isinstance(caught.value.__cause__, httpx.UnsupportedProtocol)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_max_retries_zero_means_one_attempt_for_every_kind_of_failure(
    provider: ProviderName, model_server: ModelServer, events: tuple[HookBus, list]
) -> None:
    bus, seen = events
    policy = RetryPolicy.from_settings(Settings(max_retries=0))
    assert (policy.max_attempts, min(policy.connect_attempts, policy.max_attempts)) == (1, 1)
    model_server.error(503).drop().reply("never asked for")
    with make_model(provider, model_server, retry=policy, hooks=bus) as model:
        with pytest.raises(ModelResponseError):
            model.chat(HELLO, [])
        assert len(model_server.chat_requests) == 1
        with pytest.raises(ModelUnavailableError):
            model.chat(HELLO, [])
    assert len(model_server.chat_requests) == 2 and model_server.pending == 1 and seen == []


def test_a_host_name_that_does_not_resolve_is_not_called_refused(
        events: tuple[HookBus, list]) -> None:
    bus, seen = events

    def unresolved(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno -2] Name or service not known", request=request) \
            from socket.gaierror(-2, "Name or service not known")

    policy = RetryPolicy(max_attempts=2, base_delay=0.001)
    with OllamaModel("m", host="http://not-a-url:11434", retry=policy, hooks=bus,
                     transport=httpx.MockTransport(unresolved)) as model, \
            pytest.raises(ModelUnavailableError) as caught:
        model.chat(HELLO, [])
    assert "'not-a-url' does not resolve" in caught.value.message
    assert caught.value.fix is not None and caught.value.fix.startswith("check --host")
    assert "refused" not in str(caught.value) and "ollama serve" not in str(caught.value)
    assert [e.data["reason"] for e in seen] == ["host name not resolved"]
