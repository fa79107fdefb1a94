"""`--timeout` bounds one whole response, not one read: servers that trickle, over real HTTP.

Each trickle below sends something well within every read timeout (a piece every 0.25 s),
so only a deadline on the whole response can stop it; each would end with a whole, valid
reply after 8 s. The client must give up at its deadline (2 s) with the timeout error.
"""

from __future__ import annotations

import time

import pytest

from executor.config import DEFAULT_TIMEOUT, Settings
from executor.errors import ModelTimeoutError
from executor.hooks import Event, HookBus
from executor.messages import Message
from executor.models import OllamaModel, OpenAIModel, RetryPolicy, build_model
from executor.models._http import HttpClient, ServerHint
from executor.models.embedded.model import reply_deadline
from tests.fakes import ModelServer
from tests.fakes.model_server import TrickleShape
from tests.fakes.providers import ProviderName, make_model

HELLO = [Message.user("hello")]
DEADLINE = 2.0
MARGIN = 1.0
"""Past the deadline, a trickle ends within one piece (0.25 s); the rest is a busy machine."""
ONCE = RetryPolicy.once()

SHAPES: list[tuple[ProviderName, bool, TrickleShape]] = [
    ("openai", True, "comments"),   # SSE keep-alive comments: nothing on screen
    ("openai", True, "tokens"),     # SSE events, a word each
    ("ollama", True, "tokens"),     # NDJSON lines, a word each
    ("openai", False, "body"),      # one JSON document, a few bytes at a time
    ("ollama", False, "body"),
]


@pytest.mark.parametrize(("provider", "stream", "shape"), SHAPES)
def test_a_trickled_response_ends_at_its_deadline_with_the_timeout_error(
    provider: ProviderName, stream: bool, shape: TrickleShape, model_server: ModelServer
) -> None:
    model_server.trickle(shape, seconds=8, every=0.25)
    shown: list[str] = []
    started = time.monotonic()
    with make_model(provider, model_server, stream=stream, timeout=DEADLINE, retry=ONCE) as model, \
            pytest.raises(ModelTimeoutError) as caught:
        model.chat(HELLO, [], on_token=shown.append)
    elapsed = time.monotonic() - started
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + MARGIN, elapsed
    assert "did not finish its response within 2s (--timeout)" in str(caught.value)
    assert caught.value.exit_code == 22
    assert len(model_server.chat_requests) == 1
    if shape == "tokens":
        assert shown  # it did stream; what was shown is still not taken as an answer


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_whole_body_past_its_deadline_is_retried_like_a_timeout(
    provider: ProviderName, model_server: ModelServer
) -> None:
    bus, retries = HookBus(), list[Event]()
    bus.subscribe(retries.append, "retry")
    model_server.trickle("body", seconds=8, every=0.25).reply("in time")
    policy = RetryPolicy(max_attempts=2, base_delay=0.001)
    with make_model(provider, model_server, stream=False, timeout=DEADLINE, retry=policy,
                    hooks=bus) as model:
        reply = model.chat(HELLO, [])
    assert reply.message.content == "in time"
    assert [e.data["reason"] for e in retries] == ["timeout"]
    assert len(model_server.chat_requests) == 2


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_stream_past_its_deadline_after_tokens_is_not_replayed(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.trickle("tokens", seconds=8, every=0.25).reply("replayed")
    policy = RetryPolicy(max_attempts=3, base_delay=0.001)
    with make_model(provider, model_server, stream=True, timeout=DEADLINE,
                    retry=policy) as model, pytest.raises(ModelTimeoutError):
        model.chat(HELLO, [])
    assert len(model_server.chat_requests) == 1


@pytest.mark.parametrize(("provider", "stream", "shape"), SHAPES)
def test_a_slow_reply_within_the_deadline_is_read_whole(
    provider: ProviderName, stream: bool, shape: TrickleShape, model_server: ModelServer
) -> None:
    model_server.trickle(shape, seconds=1.5, every=0.25, content="slow")
    with make_model(provider, model_server, stream=stream, timeout=4, retry=ONCE) as model:
        reply = model.chat(HELLO, [])
    assert reply.message.content.split()[-1] == "slow"


def test_each_read_keeps_its_own_timeout_under_a_longer_deadline(
    model_server: ModelServer
) -> None:
    model_server.hang(30)
    client = HttpClient(ServerHint("the stand-in", "start it"), timeout=0.5, deadline=20,
                        policy=ONCE)
    started = time.monotonic()
    with pytest.raises(ModelTimeoutError) as caught:
        client.post_json(f"{model_server.url}/api/chat", {"model": "m", "stream": False})
    client.close()
    assert time.monotonic() - started < 3
    assert "did not answer within 0.5s (--timeout)" in str(caught.value)


def test_a_deadline_shorter_than_the_read_timeout_still_ends_a_trickle(
    model_server: ModelServer
) -> None:
    model_server.trickle("body", seconds=8, every=0.25)
    client = HttpClient(ServerHint("the stand-in", "start it"), timeout=30, deadline=1,
                        policy=ONCE)
    started = time.monotonic()
    with pytest.raises(ModelTimeoutError, match="finish its response within 1s"):
        client.post_json(f"{model_server.url}/api/chat", {"model": "m", "stream": False})
    client.close()
    assert time.monotonic() - started < 1 + MARGIN


@pytest.mark.parametrize(("provider", "stream", "shape"), [
    ("openai", True, "comments"), ("ollama", True, "tokens"), ("openai", False, "body"),
])
def test_a_read_still_waiting_at_the_deadline_ends_then_not_at_its_own_timeout(
    provider: ProviderName, stream: bool, shape: TrickleShape, model_server: ModelServer
) -> None:
    model_server.trickle(shape, seconds=60, every=30)  # a first piece, then 30 s of silence
    started = time.monotonic()
    with make_model(provider, model_server, stream=stream, timeout=20, deadline=DEADLINE,
                    retry=ONCE) as model, pytest.raises(ModelTimeoutError) as caught:
        model.chat(HELLO, [])
    elapsed = time.monotonic() - started
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + MARGIN, elapsed
    assert "did not finish its response within 2s (--timeout)" in str(caught.value)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_reply_whose_headers_come_after_the_deadline_is_not_taken(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.reply("late", delay=3)  # within each read's timeout, not the deadline
    with make_model(provider, model_server, stream=False, timeout=10, deadline=DEADLINE,
                    retry=ONCE) as model, pytest.raises(ModelTimeoutError, match="finish its"):
        model.chat(HELLO, [])


def test_a_servers_default_is_300_seconds_for_a_read_and_for_a_whole_response(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SANDBOX_AGENT_TIMEOUT", raising=False)
    model = build_model(Settings(provider="ollama", host="http://127.0.0.1:1"))
    assert isinstance(model, OllamaModel)
    assert (model._http.timeout, model._http.deadline) == (DEFAULT_TIMEOUT, DEFAULT_TIMEOUT)
    model = build_model(Settings(provider="openai", host="http://127.0.0.1:1", timeout=7))
    assert isinstance(model, OpenAIModel)
    assert (model._http.timeout, model._http.deadline) == (7, 7)


def test_the_embedded_models_own_default_gives_a_slow_whole_reply_time() -> None:
    # 300 s for the prompt's read, then 2,048 tokens at 2 a second (4.7 measured on 2 busy
    # cores); a --timeout given is the whole reply's bound, as for any server
    assert reply_deadline(None, 2048) == DEFAULT_TIMEOUT + 1024
    assert reply_deadline(None, 4096) == DEFAULT_TIMEOUT + 2048
    assert reply_deadline(60, 2048) == 60
