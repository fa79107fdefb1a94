"""Ollama's native chat API: `POST /api/chat` (NDJSON when streaming), `POST /api/show`."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

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

DEFAULT_OLLAMA_MODEL = "qwen2.5-coder:7b"
"""Tool-capable, code-tuned, and runs on a laptop CPU/GPU with ~6 GB of memory."""
DEFAULT_OLLAMA_HOST = "http://localhost:11434"
_DEFAULT_PORT = "11434"
_PULL = "ollama pull {model}"
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)", re.MULTILINE)
OLLAMA_WINDOW = 8192
"""The window asked for (`num_ctx`) when neither --max-tokens nor the Modelfile sets one:
Ollama's own default (2048 or 4096, by version) is too small for a coding agent's system
prompt and a file, and Ollama cuts an overlong prompt from the front without an error."""

def ollama_base_url(host: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The server URL: `host`, else $OLLAMA_HOST, else http://localhost:11434.

    As in Ollama's own client, a value without a scheme gets `http://` and, when it has no
    port, port 11434 (`127.0.0.1`, `:11434` and `[::1]` all work); a value with a scheme
    is used as given.
    """
    environ = os.environ if env is None else env
    raw = (host or environ.get("OLLAMA_HOST", "")).strip()
    flag = "--host" if host else "OLLAMA_HOST"
    if not raw:
        return DEFAULT_OLLAMA_HOST
    typed = None
    if "://" not in raw:
        hostport, slash, path = raw.partition("/")
        typed = hostport if host else None  # OLLAMA_HOST is Ollama's too: its bare names stand
        raw = f"http://{_with_default_port(hostport)}{slash}{path}"
    return check_http_url(raw, flag=flag, typed=typed, port=_DEFAULT_PORT)


def _with_default_port(hostport: str) -> str:
    try:
        ip = ipaddress.ip_address(hostport.strip("[]"))
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip}]:{_DEFAULT_PORT}" if ip.version == 6 else f"{ip}:{_DEFAULT_PORT}"
    if not hostport or hostport.startswith(":"):
        return f"127.0.0.1{hostport or ':' + _DEFAULT_PORT}"
    host, _, port = hostport.rpartition(":")
    return hostport if host and port.isdigit() else f"{hostport}:{_DEFAULT_PORT}"


class OllamaModel(HttpChatModel):
    """A model served by Ollama, spoken to through its native API."""

    chat_path = "/api/chat"
    pull_hint = _PULL

    def __init__(
        self,
        model: str = DEFAULT_OLLAMA_MODEL,
        *,
        host: str | None = None,
        tool_protocol: ToolProtocol = "native",
        stream: bool = True,
        temperature: float | None = None,
        options: Mapping[str, Any] | None = None,
        think: bool | str | None = None,
        keep_alive: str | int | None = None,
        num_ctx: int | None = None,
        timeout: float = 300.0,
        retry: RetryPolicy | None = None,
        hooks: HookBus | None = None,
        transport: httpx.BaseTransport | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        deadline: float | None = None,
    ) -> None:
        http = HttpClient(_hint(model), timeout=timeout, policy=retry or RetryPolicy(),
                          hooks=hooks, transport=transport,
                          limits=ReplyLimits(max_reply_bytes), deadline=deadline)
        super().__init__(model, ollama_base_url(host), http, tool_protocol=tool_protocol,
                         stream=stream)
        self.options = {**(options or {}), **({} if temperature is None else
                                               {"temperature": temperature})}
        self.think = think
        self.keep_alive = keep_alive
        if num_ctx is not None:
            self.options["num_ctx"] = num_ctx
        self._send_window: int | None = None
        """`num_ctx` sent with every request when the Modelfile sets none (see find_context)."""

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The JSON body `chat` sends (no I/O)."""
        wire = prepare_messages(messages, tools, self.tool_protocol)
        body: dict[str, Any] = {
            "model": self.name, "messages": [_wire(m) for m in wire], "stream": self.stream,
        }
        if self.tool_protocol == "native" and tools:
            body["tools"] = [function_schema(t) for t in tools]
        if self.tool_protocol == "constrained":
            body["format"] = reply_schema(tools)
        options = dict(self.options)
        if self._send_window and "num_ctx" not in options:
            options["num_ctx"] = self._send_window
        optional = {"options": options, "think": self.think, "keep_alive": self.keep_alive}
        body.update({k: v for k, v in optional.items() if v not in (None, {})})
        return body

    def read_reply(self, data: Any) -> Reply:
        """Text, calls and usage of a non-streamed reply."""
        return _reply(data)

    def read_stream(self, lines: Iterator[str], on_token: TokenCallback | None,
                    on_thinking: TokenCallback | None) -> Reply:
        """An NDJSON stream, accumulated."""
        return _read(lines, on_token, on_thinking)

    def find_context(self) -> int | None:
        """The window Ollama will really use: `num_ctx` if set (--max-tokens), else the
        Modelfile's, else `OLLAMA_WINDOW` (capped at the model's own length), which is then
        sent as `num_ctx` with every request so that the budget and the server agree."""
        if self.options.get("num_ctx"):
            return int(self.options["num_ctx"])
        configured, trained = self._show_context()
        if configured:
            return configured
        self._send_window = min(trained or OLLAMA_WINDOW, OLLAMA_WINDOW)
        return self._send_window

    def ping(self) -> str:
        """Ollama's version (one short attempt); ModelUnavailableError with the fix otherwise."""
        answer = self._http.get_json(f"{self.base_url}/api/version", probe=True)
        version = answer.get("version", "?") if isinstance(answer, dict) else "?"
        return f"Ollama {version} at {self.base_url}"

    def list_models(self) -> list[str]:
        """The models the server has (`GET /api/tags`, one short attempt)."""
        answer = self._http.get_json(f"{self.base_url}/api/tags", probe=True)
        models = answer.get("models") if isinstance(answer, dict) else None
        names = [m.get("name") or m.get("model") for m in models or [] if isinstance(m, dict)]
        return sorted(str(name) for name in names if name)

    def _show_context(self) -> tuple[int | None, int | None]:
        url = f"{self.base_url}/api/show"
        try:
            shown = self._http.post_json(url, {"model": self.name}, probe=True)
        except ModelError:
            return None, None
        return _shown_context(shown) if isinstance(shown, dict) else (None, None)


def _shown_context(shown: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(`num_ctx` of the Modelfile, which Ollama really uses; the model's trained length)."""
    match = _NUM_CTX.search(str(shown.get("parameters") or ""))
    info = shown.get("model_info") or {}
    sizes = [v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)]
    return (int(match.group(1)) if match else None), (sizes[0] if sizes else None)


def _hint(model: str) -> ServerHint:
    return ServerHint(
        label="Ollama",
        unreachable_fix="is Ollama running? start it with `ollama serve` or pass --host",
        status_fixes={404: f"pull the model with `ollama pull {model}` or choose one with --model"},
        overflow_fix="raise --max-tokens (sent to Ollama as num_ctx) or set num_ctx in the "
                     "model's Modelfile",
    )


def _wire(message: Message) -> dict[str, Any]:
    """A neutral message in Ollama's shape (arguments stay objects; results name their tool)."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.role == "tool" and message.name:
        wire["tool_name"] = message.name
    if message.thinking:
        wire["thinking"] = message.thinking  # Ollama takes it back: it is part of the context
    return wire


def _reply(data: Any) -> Reply:
    """Text, calls and usage of a non-streamed reply."""
    chunk = _chunk(data)
    message = chunk.get("message") or {}
    return (str(message.get("content") or ""), _calls(message), _usage(chunk),
            str(message.get("thinking") or ""), chunk.get("done_reason") == "length")


def _read(lines: Iterator[str], on_token: TokenCallback | None,
          on_thinking: TokenCallback | None = None) -> Reply:
    """Accumulate an NDJSON stream, passing each content piece to `on_token` and each piece
    of thinking to `on_thinking`."""
    pieces: list[str] = []
    thoughts: list[str] = []
    calls: list[RawCall] = []
    usage, cut = Usage(), False
    for line in lines:
        if not line.strip():
            continue
        chunk = _chunk(_decode_line(line))
        message = chunk.get("message") or {}
        _relay(str(message.get("thinking") or ""), thoughts, on_thinking)
        _relay(str(message.get("content") or ""), pieces, on_token)
        calls += _calls(message)
        if len(calls) > MAX_CALLS:  # each costs ~100 times the bytes that can make one
            raise too_many_calls("Ollama")
        if chunk.get("done"):
            usage, cut = _usage(chunk), chunk.get("done_reason") == "length"
    return "".join(pieces), calls, usage, "".join(thoughts), cut


def _relay(piece: str, pieces: list[str], callback: TokenCallback | None) -> None:
    if piece:
        pieces.append(piece)
        if callback is not None:
            callback(piece)


def _decode_line(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ModelResponseError(f"Ollama sent a stream line that is not JSON: {line[:200]!r}",
                                 fix="check that --host points at an Ollama server") from exc


def _chunk(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ModelResponseError(f"Ollama sent an unexpected reply: {str(data)[:200]!r}")
    if data.get("error"):
        raise ModelResponseError(f"Ollama reported an error: {str(data['error'])[:300]}")
    return data


def _calls(message: Mapping[str, Any]) -> list[RawCall]:
    calls = []
    items = message.get("tool_calls") or []
    if len(items) > MAX_CALLS:
        raise too_many_calls("Ollama")
    for item in items:
        function = item.get("function") or {}
        calls.append(RawCall(function.get("name"), function.get("arguments"), item.get("id")))
    return calls


def _usage(chunk: Mapping[str, Any]) -> Usage:
    return Usage(prompt_tokens=chunk.get("prompt_eval_count"),
                 completion_tokens=chunk.get("eval_count"))
