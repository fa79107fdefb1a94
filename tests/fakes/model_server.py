"""A stand-in model server: a real HTTP server on 127.0.0.1 speaking Ollama's and the OpenAI API.

It runs `http.server.ThreadingHTTPServer` in a background thread on a free port, is
scripted per test with a queue of steps, and records every request it receives.

Start and stop::

    with ModelServer(model="fake-model") as server:      # or the `model_server` fixture
        server.url          # http://127.0.0.1:PORT       (Ollama base, `--host` for ollama)
        server.openai_url   # http://127.0.0.1:PORT/v1    (OpenAI base; PORT alone works too)

Script the chat endpoints (`POST /api/chat`, `POST /v1/chat/completions`); each request
takes the next step, in order, whichever protocol it speaks. Every method returns the
server, so calls chain::

    server.reply("Hello")                                       # plain content
    server.reply(tool_calls=[Call("read_file", {"path": "a.py"})])   # structured calls
    server.reply('```json\\n{"name": "read_file", "arguments": {}}\\n```')  # text-embedded
    server.reply("Hi", prompt_tokens=1234, completion_tokens=7, delay=0.1)
    server.reply("Hi there", cut_after=2)  # when streamed: 2 chunks, then the connection drops
    server.reply("42", thinking="Let me add.")  # reasoning first: Ollama's `thinking`,
                                          # OpenAI's `reasoning_content`
    server.reply('{"answer": "The', finish="length")  # cut at the server's token limit:
                                          # finish_reason / done_reason "length"
    server.error(503)                     # HTTP error with a JSON error body
    server.error(429, retry_after=0)      # ... and a Retry-After header
    server.error(400, "bad request")
    server.drop()                         # read the request, close the socket, no response
    server.hang(5)                        # say nothing for 5 s (or until stop), then drop
    server.raw(200, b"not json")          # any status, body and content type
    server.flood(64 << 20)                # a 64 MiB reply, made as it is sent (never held);
    server.flood(n, field="thinking")     # ... of reasoning, or of tool-call "arguments";
                                          # `server.wait_flooded()`: bytes each flood wrote
    server.trickle("tokens", seconds=8)   # a whole reply, but a piece a second for 8 s:
                                          # "tokens" (a streamed word a second), "comments"
                                          # (an SSE keep-alive comment a second, then the
                                          # reply), "body" (a JSON body a few bytes a second)
    server.respond(lambda request: Reply(f"got {len(request.body['messages'])}"))
    server.default = Reply("done")        # answer with this once the queue is empty

A window, like llama.cpp's `n_ctx`::

    server.window = 2000     # a chat request longer than this gets HTTP 400 in llama.cpp's
                             # words and fields (n_prompt_tokens, n_ctx); it takes no step
    server.window_style = "vllm"      # ... or vLLM's message (no fields), or "plain" (none)
    server.prompt_size(request)       # the server's own count: UTF-8 bytes / 3, rounded up,
                                      # of every message and tool spec (not tiktoken's count)
    server.rejected                   # the chat requests refused as too long

With a window, a reply reports that count as its `prompt_tokens` (unless scripted).

With the queue empty and no default, a chat request gets HTTP 409 whose message says so
(not retried by the client, so a test fails fast and clearly).

Replies are rendered in the protocol of the path, streamed when the request's `stream`
flag asks for it (Ollama streams by default, OpenAI does not): NDJSON chunks for Ollama,
server-sent events for OpenAI (tool-call arguments split into fragments, usage in a
last chunk when `stream_options.include_usage` is set), both with chunked encoding.

Also served, from attributes you may change: `GET /api/version`, `GET /api/tags`,
`POST /api/show` (`model_info.<arch>.context_length` = `context_length`, plus
`num_ctx` in `parameters` when set), `GET /v1/models` (with `max_model_len` when
`list_context_length`), and llama.cpp's `GET /props` (`default_generation_settings.n_ctx`;
404 when `context_length` is None or `serve_props` is False). Anything else is a 404.

Inspect what was received::

    server.requests         # every RecordedRequest: method, path, headers, body (parsed JSON)
    server.chat_requests    # only the chat ones
    server.last_chat.body["messages"]
    server.pending          # steps not used yet

Thread-safe; `stop()` wakes hanging handlers and joins every thread.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

OLLAMA_CHAT = "/api/chat"
OPENAI_CHAT = "/v1/chat/completions"
CHAT_PATHS = (OLLAMA_CHAT, OPENAI_CHAT)


@dataclass(frozen=True)
class Call:
    """A structured tool call the server returns (rendered in each protocol's shape)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """A successful chat reply."""

    content: str = ""
    tool_calls: tuple[Call, ...] | list[Call] = ()
    prompt_tokens: int | None = None
    """None: the server's `prompt_tokens`."""
    completion_tokens: int | None = None
    """None: the server's `completion_tokens`."""
    delay: float = 0.0
    """Seconds to wait before the reply (and between streamed chunks)."""
    cut_after: int | None = None
    """Streaming only: close the connection after this many chunks, mid-stream."""
    thinking: str = ""
    """The model's reasoning, sent before the content (Ollama `message.thinking`, OpenAI
    `reasoning_content`)."""
    finish: str | None = None
    """Why the reply ended (OpenAI `finish_reason`, Ollama `done_reason`), e.g. "length" for
    a reply the server cut at its token limit; None: "stop" (or "tool_calls")."""


@dataclass(frozen=True)
class HttpError:
    """An HTTP error status with a JSON error body in the protocol's shape."""

    status: int
    message: str = ""
    retry_after: float | str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More fields of the error object (OpenAI shape only)."""


@dataclass(frozen=True)
class Drop:
    """Read the request, then close the connection without any response."""


@dataclass(frozen=True)
class Hang:
    """Say nothing for `seconds` (cut short when the server stops), then drop."""

    seconds: float


@dataclass(frozen=True)
class Raw:
    """Any status, body and content type, as given."""

    status: int
    body: bytes
    content_type: str = "application/json"


FloodField = Literal["content", "thinking", "arguments"]


@dataclass(frozen=True)
class Flood:
    """A reply of `size` characters of text in `field`, made while it is written (the server
    never holds it), streamed when asked in lines of `piece` characters; it stops when the
    client hangs up. Tool-call arguments come as one call (non-streamed), fragments of one
    call (OpenAI) or a call a line (Ollama, which sends each call whole)."""

    size: int
    field: FloodField = "content"
    piece: int = 65536


TrickleShape = Literal["tokens", "comments", "body"]


@dataclass(frozen=True)
class Trickle:
    """A valid reply ("done", or `content`) spread over `seconds`, a piece every `every`
    seconds: a slow or hostile server that is never silent long enough for a read timeout.

    "tokens": streamed, one word a piece (NDJSON or SSE, as the request asks); "comments":
    streamed SSE, one `: keep-alive` comment a piece, then the reply at once (an OpenAI
    path only); "body": not streamed, the JSON document (Content-Length given) cut into as
    many pieces. It stops early when the client hangs up or the server stops."""

    shape: TrickleShape
    seconds: float = 8.0
    every: float = 1.0
    content: str = "done"


Step = Reply | HttpError | Drop | Hang | Raw | Flood | Trickle
Responder = Callable[["RecordedRequest"], Step]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: Any
    """The body parsed as JSON (None when empty or not JSON)."""
    raw: bytes

    @property
    def protocol(self) -> Literal["ollama", "openai"] | None:
        """Which chat protocol the request spoke, if it is a chat request."""
        if self.path == OLLAMA_CHAT:
            return "ollama"
        return "openai" if self.path == OPENAI_CHAT else None

    @property
    def streaming(self) -> bool:
        """Whether the client asked for a streamed reply."""
        default = self.protocol == "ollama"
        return bool(self.body.get("stream", default)) if isinstance(self.body, dict) else default


class ModelServer:
    """A scripted Ollama + OpenAI-compatible server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, model: str = "fake-model", context_length: int | None = 8192) -> None:
        self.model = model
        self.context_length = context_length
        self.num_ctx: int | None = None
        self.list_context_length = False
        self.serve_props = True
        self.prompt_tokens = 100
        self.completion_tokens = 10
        self.default: Step | Responder | None = None
        self.window: int | None = None
        self.window_style: Literal["llama.cpp", "vllm", "plain"] = "llama.cpp"
        self.rejected: list[RecordedRequest] = []
        self._steps: deque[Step | Responder] = deque()
        self._requests: list[RecordedRequest] = []
        self.flooded: list[int] = []
        """Body bytes each Flood step wrote before it ended or the client hung up."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> ModelServer:
        """Bind a free port on 127.0.0.1 and serve in a background thread."""
        self._stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01},
            name="model-server", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake hanging handlers and join every thread."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = self._thread = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        if self._httpd is None:
            raise RuntimeError("ModelServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL (what Ollama clients and `--host` take)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """OpenAI API base URL."""
        return f"{self.url}/v1"

    # scripting
    def enqueue(self, *steps: Step | Responder) -> ModelServer:
        """Append steps to the chat script."""
        with self._lock:
            self._steps.extend(steps)
        return self

    def reply(
        self,
        content: str = "",
        *,
        tool_calls: list[Call] | tuple[Call, ...] = (),
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        delay: float = 0.0,
        cut_after: int | None = None,
        thinking: str = "",
        finish: str | None = None,
    ) -> ModelServer:
        """Script a successful reply."""
        return self.enqueue(Reply(content, tuple(tool_calls), prompt_tokens, completion_tokens,
                                  delay, cut_after, thinking, finish))

    def error(
        self, status: int, message: str = "", *, retry_after: float | str | None = None
    ) -> ModelServer:
        """Script an HTTP error."""
        return self.enqueue(HttpError(status, message, retry_after))

    def drop(self) -> ModelServer:
        """Script a connection closed without a response."""
        return self.enqueue(Drop())

    def hang(self, seconds: float) -> ModelServer:
        """Script a request that is not answered for `seconds`."""
        return self.enqueue(Hang(seconds))

    def raw(self, status: int, body: bytes, content_type: str = "application/json") -> ModelServer:
        """Script a response with exactly this status and body."""
        return self.enqueue(Raw(status, body, content_type))

    def flood(self, size: int, *, field: FloodField = "content",
              piece: int = 65536) -> ModelServer:
        """Script a reply of `size` characters of `field` (see Flood)."""
        return self.enqueue(Flood(size, field, piece))

    def trickle(self, shape: TrickleShape, *, seconds: float = 8.0, every: float = 1.0,
                content: str = "done") -> ModelServer:
        """Script a reply that takes `seconds` to arrive, a piece at a time (see Trickle)."""
        return self.enqueue(Trickle(shape, seconds, every, content))

    def respond(self, responder: Responder) -> ModelServer:
        """Script a step computed from the request when it arrives."""
        return self.enqueue(responder)

    # inspection
    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The chat requests received, in order."""
        return [r for r in self.requests if r.path in CHAT_PATHS]

    @property
    def last_chat(self) -> RecordedRequest:
        """The latest chat request (AssertionError when there is none)."""
        chats = self.chat_requests
        assert chats, "the model server received no chat request"
        return chats[-1]

    def wait_flooded(self, count: int = 1, timeout: float = 10.0) -> list[int]:
        """`flooded` once `count` floods ended (the client hung up or read it all)."""
        deadline = time.monotonic() + timeout
        while len(self.flooded) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            return list(self.flooded)

    @property
    def pending(self) -> int:
        """Scripted steps not used yet."""
        with self._lock:
            return len(self._steps)

    @staticmethod
    def prompt_size(request: RecordedRequest) -> int:
        """The server's count of a chat request's prompt: UTF-8 bytes / 3 of its messages'
        text and its tool specs, plus 4 per message (a tokenizer unlike tiktoken on purpose)."""
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        texts = [json.dumps(m.get("content") or "", ensure_ascii=False)[1:-1] for m in messages]
        texts += [json.dumps(m["tool_calls"]) for m in messages if m.get("tool_calls")]
        texts += [json.dumps(body["tools"])] if body.get("tools") else []
        return sum(-(-len(t.encode()) // 3) for t in texts) + 4 * len(messages)

    def _over_window(self, request: RecordedRequest) -> HttpError | None:
        if self.window is None:
            return None
        size = self.prompt_size(request)
        if size <= self.window:
            return None
        with self._lock:
            self.rejected.append(request)
        if self.window_style == "vllm":
            return HttpError(400, f"This model's maximum context length is {self.window} "
                                  f"tokens. However, you requested {size} tokens.")
        if self.window_style == "plain":
            return HttpError(400, "the prompt is too long for the context window")
        return HttpError(400, f"request ({size} tokens) exceeds the available context size "
                              f"({self.window} tokens), try increasing it",
                         extra={"type": "exceed_context_size_error", "n_prompt_tokens": size,
                                "n_ctx": self.window})

    # used by the handler
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_step(self, request: RecordedRequest) -> Step:
        with self._lock:
            step = self._steps.popleft() if self._steps else self.default
            count = len(self._requests)
        if step is None:
            return HttpError(409, f"stand-in model server: no scripted step left for "
                                  f"{request.method} {request.path} (request #{count})")
        return step(request) if callable(step) else step


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = True  # server_close() joins handler threads
    request_queue_size = 128  # the default 5 resets bursts of concurrent clients

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 owner: ModelServer) -> None:
        self.owner = owner
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # a client that connects and never sends cannot block shutdown
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        self.close_connection = True
        request = self._read_request()
        owner = self.server.owner
        owner._record(request)
        if request.path in CHAT_PATHS:
            refusal = owner._over_window(request)
            self._chat(request, refusal or owner._next_step(request))
        else:
            self._metadata(request, owner)

    def _read_request(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        return RecordedRequest(self.command, self.path.split("?")[0], headers, body, raw)

    # chat
    def _chat(self, request: RecordedRequest, step: Step) -> None:
        if isinstance(step, Drop):
            return  # nothing written; the socket is closed after this handler returns
        if isinstance(step, Hang):
            self.server.owner._stopping.wait(step.seconds)
            return
        if isinstance(step, HttpError):
            self._error(request, step)
        elif isinstance(step, Raw):
            self._send(step.status, step.body, step.content_type)
        elif isinstance(step, Flood):
            self._flood(request, step)
        elif isinstance(step, Trickle):
            self._trickle(request, step)
        else:
            self._reply(request, step)

    def _error(self, request: RecordedRequest, step: HttpError) -> None:
        message = step.message or f"stand-in error {step.status}"
        if request.protocol == "openai":
            body: Any = {"error": {"message": message, "type": "server_error", "code": step.status,
                                   **step.extra}}
        else:
            body = {"error": message}
        extra = {} if step.retry_after is None else {"Retry-After": str(step.retry_after)}
        self._send_json(step.status, body, extra)

    def _reply(self, request: RecordedRequest, step: Reply) -> None:
        owner = self.server.owner
        measured = owner.prompt_size(request) if owner.window is not None else owner.prompt_tokens
        usage = (step.prompt_tokens if step.prompt_tokens is not None else measured,
                 step.completion_tokens if step.completion_tokens is not None
                 else owner.completion_tokens)
        time.sleep(step.delay)
        render = _OllamaWire if request.protocol == "ollama" else _OpenAIWire
        if request.streaming:
            chunks = render.chunks(owner.model, step, usage, request)
            self._send_stream(request, chunks, step.delay, step.cut_after)
        else:
            self._send_json(200, render.whole(owner.model, step, usage))

    # metadata
    def _metadata(self, request: RecordedRequest, owner: ModelServer) -> None:
        found = _metadata(request, owner)
        if found is None:
            self._send_json(404, {"error": f"stand-in model server: no route {request.path}"})
        else:
            self._send_json(200, found)

    # writing
    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream_head(self, request: RecordedRequest) -> None:
        """A 200 whose body is a chunked stream in the request's protocol."""
        content_type = "application/x-ndjson" if request.protocol == "ollama" else \
            "text/event-stream"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()

    def _send_stream(self, request: RecordedRequest, chunks: Iterator[bytes], delay: float,
                     cut_after: int | None) -> None:
        self._stream_head(request)
        try:
            for sent, chunk in enumerate(chunks):
                if sent == cut_after:
                    return  # the socket closes without the final chunk
                self.wfile.write(b"%X\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(delay)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client went away mid-stream

    def _trickle(self, request: RecordedRequest, step: Trickle) -> None:
        owner = self.server.owner
        pieces = max(1, round(step.seconds / step.every))
        usage = (owner.prompt_tokens, owner.completion_tokens)
        render = _OllamaWire if request.protocol == "ollama" else _OpenAIWire
        if step.shape == "body":
            body = json.dumps(render.whole(owner.model, Reply(step.content), usage)).encode()
            size = -(-len(body) // pieces)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            chunks = [body[i:i + size] for i in range(0, len(body), size)]
            self._write_slowly(chunks, step.every, chunked=False)
            return
        if step.shape == "tokens":
            words = " ".join([step.content] * pieces)
            chunks = list(render.chunks(owner.model, Reply(words), usage, request))
        else:
            reply = list(render.chunks(owner.model, Reply(step.content), usage, request))
            chunks = [b": keep-alive\n\n"] * pieces + [b"".join(reply)]
        self._stream_head(request)
        self._write_slowly(chunks, step.every, chunked=True)

    def _write_slowly(self, chunks: list[bytes], every: float, *, chunked: bool) -> None:
        """Each chunk, then a wait of `every` seconds (cut short when the server stops)."""
        stopping = self.server.owner._stopping
        try:
            for chunk in chunks:
                self.wfile.write(b"%X\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                self.wfile.flush()
                if stopping.wait(every):
                    return
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client hung up

    def _flood(self, request: RecordedRequest, step: Flood) -> None:
        wire = _FLOODS[request.protocol or "ollama", request.streaming]
        if request.streaming:
            content_type = "application/x-ndjson" if request.protocol == "ollama" else \
                "text/event-stream"
        else:
            content_type = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        written = 0
        try:
            for chunk in wire(self.server.owner.model, step):
                self.wfile.write(b"%X\r\n%s\r\n" % (len(chunk), chunk))
                written += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client hung up: what a bounded reader does
        finally:
            with self.server.owner._lock:
                self.server.owner.flooded.append(written)


def _flood_pieces(step: Flood) -> Iterator[str]:
    """`step.size` characters in pieces of `step.piece`."""
    left = step.size
    while left > 0:
        yield "A" * min(step.piece, left)
        left -= step.piece


def _around(head: str, tail: str, step: Flood) -> Iterator[bytes]:
    """One JSON document whose one long string is written piece by piece."""
    yield head.encode()
    for piece in _flood_pieces(step):
        yield piece.encode()
    yield tail.encode()


def _ollama_whole(model: str, step: Flood) -> Iterator[bytes]:
    start = f'{{"model": "{model}", "done": true, "message": {{"role": "assistant", '
    if step.field == "arguments":
        head = start + ('"content": "", "tool_calls": [{"function": {"name": "write_file", '
                        '"arguments": {"path": "big.txt", "content": "')
        return _around(head, '"}}}]}}', step)
    name = "thinking" if step.field == "thinking" else "content"
    return _around(start + f'"content": "", "{name}": "', '"}}', step)


def _openai_whole(model: str, step: Flood) -> Iterator[bytes]:
    start = f'{{"model": "{model}", "choices": [{{"index": 0, "message": {{"role": "assistant", '
    if step.field == "arguments":
        head = start + ('"content": null, "tool_calls": [{"id": "c1", "type": "function", '
                        '"function": {"name": "write_file", "arguments": "')
        return _around(head, '"}}]}}]}', step)
    name = "reasoning_content" if step.field == "thinking" else "content"
    return _around(start + f'"{name}": "', '"}}]}', step)


def _ollama_lines(model: str, step: Flood) -> Iterator[bytes]:
    for piece in _flood_pieces(step):
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if step.field == "arguments":
            message["tool_calls"] = [{"function": {"name": "write_file",
                                                   "arguments": {"content": piece}}}]
        else:
            message["thinking" if step.field == "thinking" else "content"] = piece
        yield json.dumps({"model": model, "done": False, "message": message}).encode() + b"\n"
    yield json.dumps({"model": model, "done": True, "message": {"role": "assistant",
                                                               "content": ""}}).encode() + b"\n"


def _openai_events(model: str, step: Flood) -> Iterator[bytes]:
    def event(delta: dict[str, Any]) -> bytes:
        chunk = {"model": model, "choices": [{"index": 0, "delta": delta}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    if step.field == "arguments":
        yield event({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                     "function": {"name": "write_file", "arguments": ""}}]})
    for piece in _flood_pieces(step):
        if step.field == "arguments":
            yield event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        else:
            yield event({"reasoning_content" if step.field == "thinking" else "content": piece})
    yield b"data: [DONE]\n\n"


_FLOODS: dict[tuple[str, bool], Callable[[str, Flood], Iterator[bytes]]] = {
    ("ollama", False): _ollama_whole, ("ollama", True): _ollama_lines,
    ("openai", False): _openai_whole, ("openai", True): _openai_events,
}


def _metadata(request: RecordedRequest, owner: ModelServer) -> Any:
    ctx = owner.context_length
    routes: dict[tuple[str, str], Callable[[], Any]] = {
        ("GET", "/api/version"): lambda: {"version": "0.0.0-standin"},
        ("GET", "/api/tags"): lambda: {"models": [{"name": owner.model, "model": owner.model}]},
        ("POST", "/api/show"): lambda: _show(owner),
        ("GET", "/v1/models"): lambda: {"object": "list", "data": [_listed(owner)]},
        ("GET", "/props"): lambda: {"default_generation_settings": {"n_ctx": ctx},
                                    "total_slots": 1} if ctx and owner.serve_props else None,
    }
    route = routes.get((request.method, request.path))
    return route() if route else None


def _show(owner: ModelServer) -> dict[str, Any]:
    info: dict[str, Any] = {"general.architecture": "standin"}
    if owner.context_length:
        info["standin.context_length"] = owner.context_length
    params = f"num_ctx {owner.num_ctx}" if owner.num_ctx else ""
    return {"model_info": info, "parameters": params, "capabilities": ["completion", "tools"]}


def _listed(owner: ModelServer) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": owner.model, "object": "model", "owned_by": "standin"}
    if owner.list_context_length and owner.context_length:
        entry["max_model_len"] = owner.context_length
    return entry


def _pieces(text: str) -> list[str]:
    """Word-sized pieces, as a model streams them."""
    return re.findall(r"\s*\S+\s*|\s+", text)


class _OllamaWire:
    """Renders a Reply as Ollama's /api/chat does."""

    @staticmethod
    def _calls(step: Reply) -> list[dict[str, Any]]:
        return [{**({"id": c.id} if c.id else {}),
                 "function": {"name": c.name, "arguments": c.arguments}} for c in step.tool_calls]

    @staticmethod
    def _final(model: str, usage: tuple[int, int], finish: str | None = None) -> dict[str, Any]:
        return {"model": model, "created_at": _now(), "done": True,
                "done_reason": finish or "stop",
                "prompt_eval_count": usage[0], "eval_count": usage[1]}

    @staticmethod
    def whole(model: str, step: Reply, usage: tuple[int, int]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.thinking:
            message["thinking"] = step.thinking
        if step.tool_calls:
            message["tool_calls"] = _OllamaWire._calls(step)
        return {**_OllamaWire._final(model, usage, step.finish), "message": message}

    @staticmethod
    def chunks(model: str, step: Reply, usage: tuple[int, int],
               request: RecordedRequest) -> Iterator[bytes]:
        def line(obj: Any) -> bytes:
            return json.dumps(obj).encode() + b"\n"

        for piece in _pieces(step.thinking):
            yield line({"model": model, "created_at": _now(), "done": False,
                        "message": {"role": "assistant", "content": "", "thinking": piece}})
        for piece in _pieces(step.content):
            yield line({"model": model, "created_at": _now(), "done": False,
                        "message": {"role": "assistant", "content": piece}})
        if step.tool_calls:
            yield line({"model": model, "created_at": _now(), "done": False,
                        "message": {"role": "assistant", "content": "",
                                    "tool_calls": _OllamaWire._calls(step)}})
        yield line({**_OllamaWire._final(model, usage, step.finish),
                    "message": {"role": "assistant", "content": ""}})


class _OpenAIWire:
    """Renders a Reply as an OpenAI-compatible /chat/completions does."""

    @staticmethod
    def _id(i: int, call: Call) -> str:
        return call.id or f"call_standin_{i}"

    @staticmethod
    def _usage(usage: tuple[int, int]) -> dict[str, int]:
        return {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1]}

    @staticmethod
    def whole(model: str, step: Reply, usage: tuple[int, int]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.content or None}
        if step.thinking:
            message["reasoning_content"] = step.thinking
        if step.tool_calls:
            message["tool_calls"] = [
                {"id": _OpenAIWire._id(i, c), "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in enumerate(step.tool_calls)
            ]
        finish = step.finish or ("tool_calls" if step.tool_calls else "stop")
        return {"id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                "model": model, "usage": _OpenAIWire._usage(usage),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]}

    @staticmethod
    def chunks(model: str, step: Reply, usage: tuple[int, int],
               request: RecordedRequest) -> Iterator[bytes]:
        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            chunk = {"id": "chatcmpl-standin", "object": "chat.completion.chunk",
                     "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        yield event({"role": "assistant", "content": ""})
        for piece in _pieces(step.thinking):
            yield event({"reasoning_content": piece})
        for piece in _pieces(step.content):
            yield event({"content": piece})
        for i, call in enumerate(step.tool_calls):
            yield from _OpenAIWire._call_fragments(event, i, call)
        yield event({}, step.finish or ("tool_calls" if step.tool_calls else "stop"))
        options = request.body.get("stream_options") if isinstance(request.body, dict) else None
        if isinstance(options, dict) and options.get("include_usage"):
            usage_chunk = {"id": "chatcmpl-standin", "object": "chat.completion.chunk",
                           "model": model, "choices": [], "usage": _OpenAIWire._usage(usage)}
            yield b"data: " + json.dumps(usage_chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    @staticmethod
    def _call_fragments(event: Callable[[dict[str, Any]], bytes], i: int,
                        call: Call) -> Iterator[bytes]:
        """The first fragment names the call; the arguments follow in two pieces."""
        arguments = json.dumps(call.arguments)
        half = len(arguments) // 2
        yield event({"tool_calls": [{"index": i, "id": _OpenAIWire._id(i, call), "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        for part in (arguments[:half], arguments[half:]):
            yield event({"tool_calls": [{"index": i, "function": {"arguments": part}}]})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
