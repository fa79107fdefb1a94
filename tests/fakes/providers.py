"""Model providers pointed at a stand-in ModelServer, with test-sized timeouts and delays."""

from __future__ import annotations

from typing import Any, Literal

from executor.hooks import HookBus
from executor.models import OllamaModel, OpenAIModel, RetryPolicy
from tests.fakes.model_server import ModelServer

ProviderName = Literal["ollama", "openai"]
PROVIDERS: tuple[ProviderName, ...] = ("ollama", "openai")
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)


def make_model(
    provider: ProviderName,
    server: ModelServer,
    *,
    hooks: HookBus | None = None,
    retry: RetryPolicy = FAST_RETRY,
    timeout: float = 5.0,
    **kwargs: Any,
) -> OllamaModel | OpenAIModel:
    """An OllamaModel or OpenAIModel talking to `server` (kwargs go to the constructor)."""
    common: dict[str, Any] = {"hooks": hooks, "retry": retry, "timeout": timeout, **kwargs}
    if provider == "ollama":
        return OllamaModel(server.model, host=server.url, **common)
    return OpenAIModel(server.model, base_url=server.openai_url, **common)
