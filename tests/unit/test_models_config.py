"""Base URLs, build_model, the API key's secrecy, and context_length."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import pytest

from executor.config import Settings
from executor.errors import ConfigError, EmbeddedModelError, ModelResponseError
from executor.hooks import HookBus
from executor.messages import Message
from executor.models import (
    DEFAULT_OLLAMA_MODEL,
    OllamaModel,
    OpenAIModel,
    build_model,
    ollama_base_url,
    openai_base_url,
)
from executor.models.ollama import OLLAMA_WINDOW
from executor.protocols import Model
from tests.fakes import ModelServer
from tests.fakes.providers import FAST_RETRY

SECRET = "sk-test-Zq8vK3mN5pX1"
HELLO = [Message.user("hello")]


@pytest.mark.parametrize(("host", "env", "expected"), [
    (None, {}, "http://localhost:11434"),
    (None, {"OLLAMA_HOST": ""}, "http://localhost:11434"),
    (None, {"OLLAMA_HOST": "127.0.0.1:11434"}, "http://127.0.0.1:11434"),
    (None, {"OLLAMA_HOST": "127.0.0.1"}, "http://127.0.0.1:11434"),
    (None, {"OLLAMA_HOST": "0.0.0.0"}, "http://0.0.0.0:11434"),
    (None, {"OLLAMA_HOST": ":5000"}, "http://127.0.0.1:5000"),
    (None, {"OLLAMA_HOST": "gpu-box"}, "http://gpu-box:11434"),
    (None, {"OLLAMA_HOST": "gpu-box:8000/ollama/"}, "http://gpu-box:8000/ollama"),
    (None, {"OLLAMA_HOST": "::1"}, "http://[::1]:11434"),
    (None, {"OLLAMA_HOST": "[::1]:9000"}, "http://[::1]:9000"),
    (None, {"OLLAMA_HOST": " https://gpu-box "}, "https://gpu-box"),
    (None, {"OLLAMA_HOST": "http://gpu-box:11434/"}, "http://gpu-box:11434"),
    ("http://127.0.0.1:9999", {"OLLAMA_HOST": "gpu-box"}, "http://127.0.0.1:9999"),
    ("127.0.0.1:9999", {}, "http://127.0.0.1:9999"),
    ("localhost", {}, "http://localhost:11434"),
    ("gpu.lan", {}, "http://gpu.lan:11434"),
    ("gpu-box:8000", {}, "http://gpu-box:8000"),
    ("[::1]", {}, "http://[::1]:11434"),
])
def test_ollama_base_url(host: str | None, env: dict[str, str], expected: str) -> None:
    assert ollama_base_url(host, env) == expected


@pytest.mark.parametrize("bad", ["ftp://gpu-box", "http://", "http://gpu-box:notaport",
                                 "not-a-url", "not-a-url/api"])
def test_ollama_base_url_rejects_nonsense_with_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="--host") as caught:
        ollama_base_url(bad, {})
    assert caught.value.fix


def test_ollama_host_env_is_read_from_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:4321")
    assert OllamaModel().base_url == "http://127.0.0.1:4321"
    monkeypatch.setenv("OLLAMA_HOST", "ftp://x")
    with pytest.raises(ConfigError, match="OLLAMA_HOST"):
        OllamaModel()


@pytest.mark.parametrize(("base", "env", "expected"), [
    (None, {}, "http://127.0.0.1:8080/v1"),
    (None, {"OPENAI_BASE_URL": "http://gpu-box:8000/v1"}, "http://gpu-box:8000/v1"),
    ("http://127.0.0.1:8080", {}, "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/", {}, "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/v1/", {}, "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8080/v1/chat/completions", {}, "http://127.0.0.1:8080/v1"),
    ("127.0.0.1:11434", {}, "http://127.0.0.1:11434/v1"),
    ("https://gpu-box/api/v1", {}, "https://gpu-box/api/v1"),
    ("https://gpu-box/v1beta/openai", {}, "https://gpu-box/v1beta/openai"),
])
def test_openai_base_url(base: str | None, env: dict[str, str], expected: str) -> None:
    assert openai_base_url(base, env) == expected


def test_build_model_ollama_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    model = build_model(Settings())
    assert isinstance(model, OllamaModel) and isinstance(model, Model)
    assert model.name == DEFAULT_OLLAMA_MODEL == "qwen2.5-coder:7b"
    assert model.base_url == "http://localhost:11434"
    assert model.tool_protocol == "native"
    assert model.stream is True


def test_build_model_passes_settings_through(model_server: ModelServer) -> None:
    settings = Settings(provider="ollama", model="tiny", host=model_server.url,
                        tool_protocol="constrained", stream=False, temperature=0.2,
                        max_retries=1, retry_base_delay=0.001, timeout=7)
    model_server.error(503).reply('{"answer": "hi"}')
    bus, seen = HookBus(), []
    bus.subscribe(seen.append, "retry")
    with build_model(settings, hooks=bus) as model:  # type: ignore[attr-defined]
        reply = model.chat(HELLO, [])
    assert reply.message.content == "hi"
    body = model_server.last_chat.body
    assert body["model"] == "tiny" and body["stream"] is False
    assert body["options"] == {"temperature": 0.2}
    assert "format" in body
    assert len(seen) == 1


def test_build_model_openai_reads_the_key_from_the_named_env_var(
    monkeypatch: pytest.MonkeyPatch, model_server: ModelServer
) -> None:
    monkeypatch.setenv("MY_KEY", SECRET)
    settings = Settings(provider="openai", model="m", host=model_server.openai_url,
                        api_key_env="MY_KEY", stream=False)
    model_server.reply("ok")
    model = build_model(settings)
    assert isinstance(model, OpenAIModel) and model.tool_protocol == "native"
    model.chat(HELLO, [])
    model.close()
    assert model_server.last_chat.headers["authorization"] == f"Bearer {SECRET}"


def test_no_key_means_no_authorization_header(
    monkeypatch: pytest.MonkeyPatch, model_server: ModelServer
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings(provider="openai", model="m", host=model_server.openai_url)
    model_server.reply("ok")
    model = build_model(settings)
    model.chat(HELLO, [])
    model.close()
    assert "authorization" not in model_server.last_chat.headers


def test_the_api_key_never_shows_in_reprs_errors_or_logs(
    model_server: ModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    model_server.error(401, f"invalid key {SECRET}")
    model = OpenAIModel("m", base_url=model_server.openai_url, api_key=SECRET, retry=FAST_RETRY)
    with pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    model.close()
    assert model_server.last_chat.headers["authorization"] == f"Bearer {SECRET}"
    texts = [repr(model), str(model.__dict__), str(caught.value), repr(caught.value),
             caplog.text]
    assert all(SECRET not in text for text in texts)
    assert "invalid key ***" in str(caught.value)
    assert "OPENAI_API_KEY" in (caught.value.fix or "")


def test_build_model_embedded_uses_the_embedded_module(monkeypatch: pytest.MonkeyPatch) -> None:
    received: dict[str, Any] = {}

    class EmbeddedModel:
        @classmethod
        def from_settings(cls, settings: Settings, **kwargs: Any) -> str:
            received.update(settings=settings, **kwargs)
            return "embedded!"

    fake = types.ModuleType("executor.models.embedded")
    fake.EmbeddedModel = EmbeddedModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "executor.models.embedded", fake)
    bus = HookBus()
    settings = Settings(provider="embedded")
    assert build_model(settings, hooks=bus) == "embedded!"
    assert received == {"settings": settings, "hooks": bus, "tool_protocol": "constrained"}


def test_build_model_embedded_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "executor.models.embedded", None)  # import fails
    with pytest.raises(EmbeddedModelError) as caught:
        build_model(Settings(provider="embedded"))
    assert caught.value.fix == "pip install 'hardened-sandbox-agent[local]'"


def test_constructors_do_no_io() -> None:
    # Nothing listens on port 9; building must not notice.
    OllamaModel(host="127.0.0.1:9").close()
    OpenAIModel(base_url="http://127.0.0.1:9/v1").close()


# context_length

def test_ollama_context_length_from_api_show_is_cached(model_server: ModelServer) -> None:
    model_server.reply("ok")
    with OllamaModel("fake-model", host=model_server.url) as model:
        assert model.context_length() == 8192
        assert model.context_length() == 8192
        reply = model.chat(HELLO, [])
    shows = [r for r in model_server.requests if r.path == "/api/show"]
    assert len(shows) == 1 and shows[0].body == {"model": "fake-model"}
    assert reply.context_length == 8192


def test_ollama_context_length_prefers_num_ctx(model_server: ModelServer) -> None:
    model_server.num_ctx = 4096
    with OllamaModel("fake-model", host=model_server.url) as model:
        assert model.context_length() == 4096
    with OllamaModel("fake-model", host=model_server.url, options={"num_ctx": 2048}) as model:
        assert model.context_length() == 2048
    assert len([r for r in model_server.requests if r.path == "/api/show"]) == 1


def test_ollama_window_unknown_is_asked_for_and_sent(model_server: ModelServer) -> None:
    model_server.context_length = None
    model_server.reply("ok")
    with OllamaModel("fake-model", host=model_server.url) as model:
        assert model.context_length() == OLLAMA_WINDOW
        model.chat(HELLO, [])
    assert model_server.last_chat.body["options"]["num_ctx"] == OLLAMA_WINDOW
    with OllamaModel("m", host="127.0.0.1:9") as unreachable:
        assert unreachable.context_length() == OLLAMA_WINDOW


def test_ollama_sends_the_window_it_budgets_for(model_server: ModelServer) -> None:
    # Ollama serves its own small default, not the model's trained length, unless asked, and
    # cuts a longer prompt without an error: the budget must be what is sent as num_ctx.
    model_server.context_length = 32768
    model_server.reply("ok").reply("ok")
    with OllamaModel("fake-model", host=model_server.url) as model:
        assert model.context_length() == OLLAMA_WINDOW
        model.chat(HELLO, [])
    assert model_server.last_chat.body["options"]["num_ctx"] == OLLAMA_WINDOW
    model_server.num_ctx = 16384  # the Modelfile's num_ctx is what Ollama uses: none sent
    with OllamaModel("fake-model", host=model_server.url) as model:
        assert model.context_length() == 16384
        model.chat(HELLO, [])
    assert "num_ctx" not in model_server.last_chat.body.get("options", {})


def test_openai_context_length_from_llama_cpp_props(model_server: ModelServer) -> None:
    with OpenAIModel("fake-model", base_url=model_server.openai_url) as model:
        assert model.context_length() == 8192
        assert model.context_length() == 8192
    assert [r.path for r in model_server.requests] == ["/props"]


def test_openai_context_length_falls_back_to_the_model_list(model_server: ModelServer) -> None:
    model_server.serve_props = False
    model_server.list_context_length = True
    with OpenAIModel("fake-model", base_url=model_server.openai_url) as model:
        assert model.context_length() == 8192
    model_server.list_context_length = False
    with OpenAIModel("fake-model", base_url=model_server.openai_url) as model:
        assert model.context_length() is None
    with OpenAIModel("m", base_url="http://127.0.0.1:9/v1") as unreachable:
        assert unreachable.context_length() is None


def test_openai_without_a_model_name_uses_the_first_listed(model_server: ModelServer) -> None:
    model_server.reply("ok")
    with OpenAIModel(base_url=model_server.openai_url, stream=False) as model:
        assert model.name == "auto"
        model.chat(HELLO, [])
        assert model.name == "fake-model"
    assert [r.path for r in model_server.requests] == ["/v1/models", "/v1/chat/completions"]
    assert model_server.last_chat.body["model"] == "fake-model"
