"""Thinking mode: the request fields, the reasoning read apart from the answer (both providers,
streamed or not), its place in the context budget, and how it is shown."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from executor.config import Settings
from executor.context import TokenCounter
from executor.hooks import HookBus, ModelRequestEvent, ThinkingEvent, TokenEvent
from executor.messages import Message
from executor.models import build_model
from executor.models.ollama import _wire
from executor.ui import ProgressView
from tests.fakes import ModelServer
from tests.fakes.providers import PROVIDERS, ProviderName, make_model

HELLO = [Message.user("What is 6 * 7?")]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_reasoning_is_kept_apart_from_the_answer(
        provider: ProviderName, stream: bool, model_server: ModelServer) -> None:
    model_server.reply("It is 42.", thinking="Six sevens are forty-two.")
    tokens: list[str] = []
    thoughts: list[str] = []
    with make_model(provider, model_server, stream=stream) as model:
        reply = model.chat(HELLO, [], on_token=tokens.append, on_thinking=thoughts.append)
    assert reply.message.content == "It is 42." and reply.raw == "It is 42."
    assert reply.message.thinking == "Six sevens are forty-two."
    assert "".join(tokens) == ("It is 42." if stream else "")
    assert "".join(thoughts) == ("Six sevens are forty-two." if stream else "")


@pytest.mark.parametrize("level, think, effort", [
    ("on", True, None), ("off", False, None), ("low", "low", "low"), ("high", "high", "high"),
    (None, None, None),
])
def test_the_level_becomes_ollamas_think_and_openais_reasoning_effort(
        level: str | None, think: object, effort: str | None, model_server: ModelServer) -> None:
    for provider, host in (("ollama", model_server.url), ("openai", model_server.openai_url)):
        model_server.reply("ok")
        settings = Settings(provider=provider, host=host, model="fake-model", think=level)
        model = build_model(settings)
        try:
            model.chat(HELLO, [])
        finally:
            model.close()
        body = model_server.last_chat.body
        if provider == "ollama":
            assert body.get("think", None) == think and "reasoning_effort" not in body
        else:
            assert body.get("reasoning_effort") == effort and "think" not in body


def test_ollama_gets_the_reasoning_back_and_the_budget_counts_it() -> None:
    plain = Message.assistant("It is 42.")
    thought = Message.assistant("It is 42.")
    thought.thinking = "Six sevens are forty-two. " * 50
    assert _wire(thought)["thinking"] == thought.thinking and "thinking" not in _wire(plain)
    counter = TokenCounter(None)  # chars/4: the figures are plain
    assert counter.count(thought) >= counter.count(plain) + len(thought.thinking) // 4


def test_the_reasoning_streams_dimmed_and_inert_on_its_own_line() -> None:
    buffer = io.StringIO()
    view = ProgressView(Console(file=buffer, force_terminal=False, width=200), stream=True)
    bus = HookBus()
    view.attach(bus)
    bus.emit(ThinkingEvent(text="first \x1b[2Kthink"))
    bus.emit(TokenEvent(text="Answer"))
    bus.emit(ModelRequestEvent(model="m", duration_ms=1.0, reply="Answer"))
    assert buffer.getvalue() == "thinking: first \\x1b[2Kthink\nAnswer\n"


def test_hidden_when_not_streaming() -> None:
    buffer = io.StringIO()
    view = ProgressView(Console(file=buffer, force_terminal=False, width=200), stream=False)
    bus = HookBus()
    view.attach(bus)
    bus.emit(ThinkingEvent(text="secret plan"))
    assert buffer.getvalue() == ""
