"""OpenAI-compatible chat: `POST {base}/chat/completions` (SSE when streaming).

Works with Ollama's `/v1`, llama.cpp's server, vLLM, LM Studio and OpenAI. The API key
is sent as a Bearer header only: it is kept as a SecretStr, redacted from error texts and
absent from every repr.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from executor.config import DEFAULT_MAX_REPLY_BYTES, ToolProtocol
from executor.errors import ModelError, ModelResponseError
from executor.hooks import HookBus
from executor.messages import Message, ToolSpec, Usage, function_schema
from executor.models._http import HttpChatModel, HttpClient, Reply, ServerHint, check_http_url
from executor.models.limits import MAX_CALLS, ReplyLimits, too_many_calls
from executor.models.parsing import RawCall
from executor.models.retry import RetryPolicy
from executor.models.toolproto import prepare_messages, reply_schema
from executor.protocols import TokenCallback

DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8080/v1"
"""llama.cpp's `llama-server` on its default port."""
_CONTEXT_KEYS = ("max_model_len", "context_length", "max_context_length")

_REASONING_KEYS = ("reasoning_content", "reasoning")
"""Where servers put the reasoning: llama.cpp, vLLM and DeepSeek; Ollama's /v1, OpenRouter."""


def openai_base_url(base: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The API base: `base`, else $OPENAI_BASE_URL, else http://127.0.0.1:8080/v1.

    A URL without a path gets `/v1` (`http://host:8080` -> `http://host:8080/v1`); any
    other path is used as given, minus a trailing slash or `/chat/completions`, so
    `https://host/api/v1` and `.../v1beta/openai` work. A missing scheme means http.
    """
    environ = os.environ if env is None else env
    raw = (base or environ.get("OPENAI_BASE_URL", "")).strip() or DEFAULT_OPENAI_BASE_URL
    flag = "--host" if base else "OPENAI_BASE_URL"
    typed = None
    if "://" not in raw:
        typed, raw = (raw if base else None), f"http://{raw}"
    url = check_http_url(raw, flag=flag, typed=typed, port="8080").removesuffix(
        "/chat/completions")
    return url if urlsplit(url).path.strip("/") else f"{url}/v1"


def server_root(base_url: str) -> str:
    """The server's root, where llama.cpp serves `/props` (the base minus `/v1`)."""
    return base_url.removesuffix("/v1")


class OpenAIModel(HttpChatModel):
    """A model behind an OpenAI-compatible `/chat/completions` endpoint."""

    chat_path = "/chat/completions"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | SecretStr | None = None,
        tool_protocol: ToolProtocol = "native",
        stream: bool = True,
        temperature: float | None = None,
        max_tokens: int | None = None,
        reasoning_effort: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float = 300.0,
        retry: RetryPolicy | None = None,
        hooks: HookBus | None = None,
        transport: httpx.BaseTransport | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        server: ServerHint | None = None,
        deadline: float | None = None,
    ) -> None:
        key = api_key if isinstance(api_key, SecretStr) or api_key is None else SecretStr(api_key)
        http = HttpClient(
            server or _hint(), timeout=timeout, policy=retry or RetryPolicy(), hooks=hooks,
            headers=_auth(key), secrets=[key.get_secret_value()] if key else [],
            transport=transport, limits=ReplyLimits(max_reply_bytes), deadline=deadline,
        )
        super().__init__(model or "auto", openai_base_url(base_url), http,
                         tool_protocol=tool_protocol, stream=stream)
        self._model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.reasoning_effort = reasoning_effort
        self.extra_body = dict(extra_body or {})

    def prepare(self) -> None:
        """Without a model name, the first one the server lists (llama.cpp, LM Studio)."""
        self._resolve_model()

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The JSON body `chat` sends (no I/O)."""
        wire = prepare_messages(messages, tools, self.tool_protocol)
        body: dict[str, Any] = {
            "model": self._model or self.name, "messages": [_wire(m) for m in wire],
            "stream": self.stream,
        }
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.tool_protocol == "native" and tools:
            body["tools"] = [function_schema(t) for t in tools]
        if self.tool_protocol == "constrained":
            body["response_format"] = response_format(tools)
        optional = {"temperature": self.temperature, "max_tokens": self.max_tokens,
                    "reasoning_effort": self.reasoning_effort}
        body.update({k: v for k, v in optional.items() if v is not None})
        return {**body, **self.extra_body}

    def read_reply(self, data: Any) -> Reply:
        """Text, calls, usage and reasoning of a non-streamed reply."""
        return _reply(data)

    def read_stream(self, lines: Iterator[str], on_token: TokenCallback | None,
                    on_thinking: TokenCallback | None) -> Reply:
        """A server-sent-events stream, accumulated."""
        return _read(lines, on_token, on_thinking)

    def find_context(self) -> int | None:
        """llama.cpp's `n_ctx` (GET /props), else the model's length in /models."""
        return self._props_context() or self._listed_context()

    def ping(self) -> str:
        """The models the server lists (one short attempt); ModelUnavailableError otherwise."""
        listed = _listed(self._http.get_json(f"{self.base_url}/models", probe=True))
        names = [str(m.get("id")) for m in listed[:3]]
        return f"{self.base_url} serves {', '.join(names) or 'no models'}"

    def list_models(self) -> list[str]:
        """The models the server lists (`GET /models`, one short attempt)."""
        listed = _listed(self._http.get_json(f"{self.base_url}/models", probe=True))
        return sorted(str(m["id"]) for m in listed if isinstance(m.get("id"), str))

    def _resolve_model(self) -> None:
        """Without a model name, use the first one the server lists (llama.cpp, LM Studio)."""
        if self._model is not None:
            return
        listed = _listed(self._http.get_json(f"{self.base_url}/models"))
        if not listed or not isinstance(listed[0].get("id"), str):
            raise ModelResponseError(
                f"the server at {self.base_url} lists no models", fix="pass --model NAME"
            )
        self._model = self.name = listed[0]["id"]

    def _props_context(self) -> int | None:
        try:
            props = self._http.get_json(f"{server_root(self.base_url)}/props", probe=True)
        except ModelError:
            return None
        if not isinstance(props, dict):
            return None
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        n_ctx = n_ctx or props.get("n_ctx")
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None

    def _listed_context(self) -> int | None:
        try:
            listed = _listed(self._http.get_json(f"{self.base_url}/models", probe=True))
        except ModelError:
            return None
        for entry in listed:
            if entry.get("id") in (self._model, None) or len(listed) == 1:
                sizes = [entry[k] for k in _CONTEXT_KEYS if isinstance(entry.get(k), int)]
                if sizes:
                    return int(sizes[0])
        return None


def response_format(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The `response_format` that constrains replies to `reply_schema(tools)`."""
    schema = reply_schema(tools)
    return {"type": "json_schema", "json_schema": {"name": "reply", "strict": True,
                                                   "schema": schema}}


def _hint() -> ServerHint:
    key_fix = ("check the API key: it is read from the environment variable named by "
               "SANDBOX_AGENT_API_KEY_ENV (default OPENAI_API_KEY)")
    return ServerHint(
        label="the OpenAI-compatible server",
        unreachable_fix="is the server running? start it (e.g. `llama-server --port 8080`) "
                        "or pass --host http://HOST:PORT/v1",
        status_fixes={
            401: key_fix, 403: key_fix,
            404: "check --host (the API base, usually ending in /v1) and --model",
        },
        overflow_fix="serve the model with a larger context (llama-server -c N, vLLM "
                     "--max-model-len N) or lower --max-tokens to the server's context size",
    )


def _auth(key: SecretStr | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def _listed(data: Any) -> list[dict[str, Any]]:
    entries = data.get("data") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict)]


def _wire(message: Message) -> dict[str, Any]:
    """A neutral message in the OpenAI shape (arguments as a JSON string)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "",
                "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls
        ]
    return wire


def _reply(data: Any) -> Reply:
    """Text, calls and usage of a non-streamed completion."""
    chunk = _chunk(data)
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ModelResponseError(f"the server sent a completion without choices: {chunk!r:.200}")
    message = choices[0].get("message") or {}
    if len(message.get("tool_calls") or []) > MAX_CALLS:
        raise too_many_calls("the server")
    calls = [
        RawCall((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"),
                c.get("id"))
        for c in message.get("tool_calls") or []
    ]
    return (str(message.get("content") or ""), calls, _usage(chunk.get("usage")),
            _reasoning(message), choices[0].get("finish_reason") == "length")


def _reasoning(message: Mapping[str, Any]) -> str:
    """The reasoning a server sent beside the content, under whichever name it uses."""
    return next((str(message[k]) for k in _REASONING_KEYS if message.get(k)), "")


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    decoded: Any = None


@dataclass
class _Stream:
    """What the SSE chunks add up to; tool-call fragments are joined by their index."""

    pieces: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    cut: bool = False
    """The server said it stopped at its token limit (`finish_reason: "length"`)."""

    def add(self, chunk: Mapping[str, Any], on_token: TokenCallback | None,
            on_thinking: TokenCallback | None = None) -> None:
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            self.cut = self.cut or choice.get("finish_reason") == "length"
            delta = choice.get("delta") or {}
            thought = _reasoning(delta)
            if thought:
                self.thoughts.append(thought)
                if on_thinking is not None:
                    on_thinking(thought)
            piece = str(delta.get("content") or "")
            if piece:
                self.pieces.append(piece)
                if on_token is not None:
                    on_token(piece)
            for fragment in delta.get("tool_calls") or []:
                self._add_fragment(fragment)

    def _add_fragment(self, fragment: Mapping[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):  # some servers omit it: a new id starts a new call
            index = len(self.calls) - (0 if fragment.get("id") or not self.calls else 1)
        if index not in self.calls and len(self.calls) >= MAX_CALLS:
            raise too_many_calls("the server")
        call = self.calls.setdefault(index, _PartialCall())
        call.id = call.id or fragment.get("id")
        function = fragment.get("function") or {}
        call.name = call.name or str(function.get("name") or "")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:
            call.decoded = arguments

    def result(self) -> Reply:
        calls = [
            RawCall(c.name, c.decoded if c.decoded is not None else "".join(c.arguments), c.id)
            for _, c in sorted(self.calls.items())
        ]
        return "".join(self.pieces), calls, self.usage, "".join(self.thoughts), self.cut


def _read(lines: Iterator[str], on_token: TokenCallback | None,
          on_thinking: TokenCallback | None = None) -> Reply:
    """Accumulate a server-sent-event stream up to `data: [DONE]`."""
    stream, events, stray = _Stream(), 0, ""
    for line in lines:
        if not line.startswith("data:"):  # blank separators, comments, `event:` lines…
            stray = stray or ("" if _SSE_FIELD.match(line) else line)  # …or an HTML page
            continue
        events += 1
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            break
        stream.add(_chunk(_decode(data)), on_token, on_thinking)
    if not events and stray:  # a web server's page, not the API: the host's fault, not the model's
        raise ModelResponseError(
            f"the server's reply is not an event stream of JSON: {stray[:200]!r}",
            fix="check --host: it must be an OpenAI-compatible API base (usually ending in /v1)",
        )
    return stream.result()


_SSE_FIELD = re.compile(r"^(?:$|:|(?:event|id|retry)(?::|$))")
"""A line of an event stream that is not data (blank, a comment, another field)."""


def _decode(data: str) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise ModelResponseError(
            f"the server sent an event that is not JSON: {data[:200]!r}",
            fix="check that --host points at an OpenAI-compatible API",
        ) from exc


def _chunk(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ModelResponseError(f"the server sent an unexpected reply: {str(data)[:200]!r}")
    if data.get("error"):
        error = data["error"]
        detail = error.get("message", error) if isinstance(error, dict) else error
        raise ModelResponseError(f"the server reported an error: {str(detail)[:300]}")
    return data


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    return Usage(prompt_tokens=usage.get("prompt_tokens"),
                 completion_tokens=usage.get("completion_tokens"))
