"""Model providers: Ollama's native API, OpenAI-compatible servers, the embedded model.

`build_model(settings)` picks one. Defaults: Ollama `qwen2.5-coder:7b` at $OLLAMA_HOST or
http://localhost:11434; OpenAI-compatible at $OPENAI_BASE_URL or http://127.0.0.1:8080/v1
with the first model the server lists; tool protocol `native` for both, `constrained`
for the embedded model. Constructors do no I/O.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, cast

import httpx

from executor import LOCAL_EXTRA_FIX
from executor.config import DEFAULT_TIMEOUT, Provider, Settings, ThinkLevel, ToolProtocol
from executor.errors import ConfigError, EmbeddedModelError
from executor.hooks import HookBus
from executor.models._http import ServerHint
from executor.models.fake import ScriptedCall, ScriptedModel, ScriptExhaustedError
from executor.models.ollama import DEFAULT_OLLAMA_MODEL, OllamaModel, ollama_base_url
from executor.models.openai import DEFAULT_OPENAI_BASE_URL, OpenAIModel, openai_base_url
from executor.models.parsing import RawCall, parse_reply
from executor.models.retry import RetryPolicy
from executor.models.toolproto import reply_schema, tools_prompt
from executor.protocols import Model

DEFAULT_PROTOCOLS: dict[Provider, ToolProtocol] = {
    "ollama": "native", "openai": "native", "embedded": "constrained",
}
"""Small local models only follow tools reliably when constrained (DESIGN.md)."""


def default_protocol(provider: Provider) -> ToolProtocol:
    """The tool protocol a provider uses when none is configured."""
    return DEFAULT_PROTOCOLS[provider]


def build_model(
    settings: Settings,
    *,
    hooks: HookBus | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Model:
    """The model `settings` describe (no I/O until its first request)."""
    if settings.provider == "ollama":
        return OllamaModel(settings.model or DEFAULT_OLLAMA_MODEL, host=settings.host,
                           think=ollama_think(settings.think), num_ctx=settings.max_tokens,
                           **_common(settings, hooks, transport))
    if settings.provider == "openai":
        return OpenAIModel(settings.model, base_url=settings.host, api_key=_api_key(settings),
                           reasoning_effort=reasoning_effort(settings.think),
                           **_common(settings, hooks, transport))
    if settings.provider == "embedded":
        return _embedded(settings, hooks, settings.tool_protocol or default_protocol("embedded"))
    raise ConfigError(f"unknown provider {settings.provider!r}",
                      fix="use --provider ollama, openai or embedded")


def ollama_think(level: ThinkLevel | None) -> bool | str | None:
    """Ollama's `think` field: true/false for on/off, the level itself for low/medium/high."""
    return {"on": True, "off": False}.get(level or "", level)


def reasoning_effort(level: ThinkLevel | None) -> str | None:
    """An OpenAI-compatible `reasoning_effort`: only low, medium and high have one."""
    return level if level in ("low", "medium", "high") else None


def _common(
    settings: Settings, hooks: HookBus | None, transport: httpx.BaseTransport | None
) -> dict[str, Any]:
    return {
        "tool_protocol": settings.tool_protocol or default_protocol(settings.provider),
        "stream": settings.stream,
        "temperature": settings.temperature,
        "timeout": DEFAULT_TIMEOUT if settings.timeout is None else settings.timeout,
        "retry": RetryPolicy.from_settings(settings),
        "hooks": hooks,
        "transport": transport,
        "max_reply_bytes": settings.max_reply_bytes,
    }


def _api_key(settings: Settings) -> str | None:
    return os.environ.get(settings.api_key_env) or None


def _embedded(settings: Settings, hooks: HookBus | None, protocol: ToolProtocol) -> Model:
    """EmbeddedModel.from_settings, imported only when asked for (xllamacpp is optional)."""
    try:
        module = importlib.import_module("executor.models.embedded")
    except ImportError as exc:
        raise EmbeddedModelError(
            f"the embedded model is not available ({exc})",
            fix=LOCAL_EXTRA_FIX,
        ) from exc
    model = module.EmbeddedModel.from_settings(settings, hooks=hooks, tool_protocol=protocol)
    return cast(Model, model)


__all__ = [
    "DEFAULT_OLLAMA_MODEL", "DEFAULT_OPENAI_BASE_URL", "DEFAULT_PROTOCOLS", "OllamaModel",
    "OpenAIModel", "RawCall", "RetryPolicy", "ScriptExhaustedError", "ScriptedCall",
    "ScriptedModel", "ServerHint", "build_model", "default_protocol", "ollama_base_url",
    "openai_base_url", "parse_reply", "reply_schema", "tools_prompt",
]
