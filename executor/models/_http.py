"""httpx behind the retry policy: the only place model providers touch httpx.

Every httpx exception is translated here, once, into the errors of `executor.errors`:

    httpx.TimeoutException, a response past its
    deadline (below)                               -> ModelTimeoutError      (retried)
    httpx.ConnectError, RemoteProtocolError,
    ReadError, WriteError (refused / dropped)      -> ModelUnavailableError  (retried twice)
    HTTP 429 / 5xx                                 -> ModelResponseError     (retried)
    HTTP 400 / 413 saying the prompt is too long   -> ContextOverflowError   (the agent trims
                                                      and sends it once more)
    other HTTP 4xx, a body that is not JSON        -> ModelResponseError     (never retried)
    a reply past SANDBOX_AGENT_MAX_REPLY_BYTES     -> ModelResponseError     (never retried)

A streamed response is retried only while nothing of it has been read: once a line has
been handed to the consumer, tokens may already be on the user's screen.

`timeout` (`--timeout`) bounds two things: each read (httpx's own timeout, so a silent server
is given up within it) and one whole response, from the request sent to its last byte (a
deadline, so a server that trickles a byte, a token or an SSE comment a second cannot hold a
run). Every request is opened in `_open`, which checks the deadline before and between the
body's chunks (`deadline.DeadlineStream`), whatever reads the body: the JSON reader, the line
reader of every streamed protocol, an error body; a read still waiting when it passes is
ended then (`deadline.watchdog` shuts the socket down), not at its own timeout. A response
past it is the same ModelTimeoutError as a read timeout; what was streamed of it is never
taken as an answer.
Only response headers trickled byte by byte are bounded per read alone (httpcore reads them
before any of this code sees the response).

Every body is read through `limits.py`, in chunks and counted: a reply longer than
SANDBOX_AGENT_MAX_REPLY_BYTES (or a streamed line longer than a sixteenth of it) is a
ModelResponseError, never retried, and its connection is closed unread.

`HttpChatModel` is what the HTTP providers (Ollama's native API, OpenAI-compatible servers)
share on top of it: the `chat` request (streamed or not), the missing-model error, the cached
context length, `close` and the context manager. Each provider says where to post, what to
send and how to read what comes back.
"""

from __future__ import annotations

import email.utils
import functools
import json
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar, cast
from urllib.parse import urlsplit

import httpx

from executor.config import ToolProtocol
from executor.errors import (
    ConfigError,
    ContextOverflowError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from executor.hooks import HookBus
from executor.messages import Message, ModelReply, ToolSpec, Usage
from executor.models.deadline import DeadlineStream, PastDeadline, watchdog
from executor.models.limits import (
    ReplyLimits,
    check_values,
    iter_lines,
    read_body,
    read_start,
    text_encoding,
)
from executor.models.parsing import RawCall, cut_reply, parse_reply
from executor.models.retry import Retryable, RetryPolicy, call_with_retry
from executor.protocols import TokenCallback

T = TypeVar("T")

_CONNECT_TIMEOUT = 10.0
_PROBE_TIMEOUT = 10.0
_DETAIL_CHARS = 300
_SURROGATE = re.compile("[\ud800-\udfff]")
_OVERFLOW = re.compile(
    r"context[ _-]?(?:size|length|window)|maximum context|exceed|too long|too many tokens",
    re.IGNORECASE)
"""How servers say a prompt is too long: llama.cpp ("exceeds the available context size"),
vLLM ("maximum context length is"), OpenAI (`context_length_exceeded`), LM Studio."""
_TOKENS = re.compile(r"(\d+) tokens")


@dataclass(frozen=True)
class ServerHint:
    """How to name a server in error messages, and how to fix it."""

    label: str
    """E.g. 'Ollama' or 'the OpenAI-compatible server'."""
    unreachable_fix: str
    """What to do when the server cannot be reached."""
    status_fixes: Mapping[int, str] = field(default_factory=dict)
    """What to do for particular HTTP status codes (e.g. 404: pull the model)."""
    overflow_fix: str = "lower --max-tokens to the server's context size, or serve the model " \
        "with a larger one"
    """What raises the window when a request is refused as too long (names the setting)."""


class HttpClient:
    """JSON requests to one model server, with retries and translated errors."""

    def __init__(
        self,
        server: ServerHint,
        *,
        timeout: float,
        policy: RetryPolicy,
        hooks: HookBus | None = None,
        headers: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
        transport: httpx.BaseTransport | None = None,
        limits: ReplyLimits | None = None,
        deadline: float | None = None,
    ) -> None:
        self.server = server
        self.timeout = timeout
        """Seconds each read may wait."""
        self.deadline = timeout if deadline is None else deadline
        """Seconds one whole response may take (None given: `timeout`)."""
        self.policy = policy
        self.limits = limits or ReplyLimits()
        self._hooks = hooks
        # Uncompressed: a compressed body could inflate without bound (limits.py refuses one).
        self._headers = {"Accept-Encoding": "identity", **(headers or {})}
        self._secrets = tuple(s for s in secrets if s)
        self._transport = transport
        self._client: httpx.Client | None = None
        self._tls = False

    def __repr__(self) -> str:
        return (f"HttpClient({self.server.label!r}, timeout={self.timeout}, "
                f"deadline={self.deadline})")

    def post_json(self, url: str, body: Mapping[str, Any], *, probe: bool = False) -> Any:
        """POST `body` and return the decoded JSON reply; a probe gets one short attempt."""
        return self._retrying(url, lambda: self._send("POST", url, body, probe), not probe)

    def get_json(self, url: str, *, probe: bool = False) -> Any:
        """GET a JSON document; a probe gets one short attempt."""
        return self._retrying(url, lambda: self._send("GET", url, None, probe), not probe)

    def post_stream(
        self, url: str, body: Mapping[str, Any], consume: Callable[[Iterator[str]], T]
    ) -> T:
        """POST `body` and hand the reply's lines to `consume`; return what it returns."""
        return self._retrying(url, lambda: self._stream(url, body, consume), True)

    def close(self) -> None:
        """Close pooled connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _http(self, url: str) -> httpx.Client:
        # A CA bundle is loaded (~40 ms) only for a server that speaks TLS.
        tls = url.lower().startswith("https:")
        if self._client is not None and tls and not self._tls:
            self.close()
        if self._client is None:
            self._tls = tls
            self._client = httpx.Client(
                headers=self._headers,
                verify=_ssl_context() if tls else False,
                timeout=_timeouts(self.timeout),
                transport=self._transport,
            )
        return self._client

    def _retrying(self, url: str, attempt: Callable[[], T], retry: bool) -> T:
        policy = self.policy if retry else RetryPolicy.once()
        return call_with_retry(attempt, policy, hooks=self._hooks, url=url)

    def _send(self, method: str, url: str, body: Mapping[str, Any] | None, probe: bool) -> Any:
        timeout, deadline = self._limits(probe)
        try:
            with self._open(method, url, body, timeout, deadline) as resp:
                data = read_body(resp, self.limits, self._where(url))
            check_values(data, self._where(url))
            return self._decode(data.decode(text_encoding(resp), errors="replace"), url)
        except httpx.HTTPError as exc:
            raise self._translate(exc, url, timeout, deadline) from exc

    def _stream(
        self, url: str, body: Mapping[str, Any], consume: Callable[[Iterator[str]], T]
    ) -> T:
        started = False

        def lines(resp: httpx.Response) -> Iterator[str]:
            nonlocal started
            for line in iter_lines(resp, self.limits, self._where(url)):
                started = True
                yield line

        timeout, deadline = self._limits(probe=False)
        try:
            with self._open("POST", url, body, timeout, deadline) as resp:
                return consume(lines(resp))
        except httpx.HTTPError as exc:
            failure = self._translate(exc, url, timeout, deadline)
            if started and isinstance(failure, Retryable):
                failure = failure.error  # tokens may have been shown: never replay
            raise failure from exc

    def _limits(self, probe: bool) -> tuple[float, float]:
        """(seconds a read may wait, seconds the whole response may take): a probe is short."""
        if probe:
            return min(self.timeout, _PROBE_TIMEOUT), min(self.deadline, _PROBE_TIMEOUT)
        return self.timeout, self.deadline

    @contextmanager
    def _open(self, method: str, url: str, body: Mapping[str, Any] | None, timeout: float,
              seconds: float) -> Iterator[httpx.Response]:
        """The one way a request is made: its response, status checked, each read within
        `timeout`, and whose body cannot be read past `seconds` after the request was sent
        (PastDeadline)."""
        deadline = time.monotonic() + seconds
        with self._http(url).stream(method, url, timeout=_timeouts(timeout),
                                    **_json_body(body)) as resp:
            # a sync client's body is always a SyncByteStream
            resp.stream = DeadlineStream(cast(httpx.SyncByteStream, resp.stream), deadline,
                                          seconds)
            with watchdog(resp, deadline, seconds):
                self._check(resp, url)
                yield resp

    def _check(self, resp: httpx.Response, url: str) -> None:
        """Raise for an error status: Retryable for 429/5xx, ModelResponseError otherwise."""
        if resp.status_code < 400:
            return
        resp = _error_response(resp)
        code = resp.status_code
        detail = self._redact(_error_detail(resp.text)) or resp.reason_phrase
        if code in (400, 413) and _OVERFLOW.search(resp.text):
            raise self._overflow(resp.text, detail, code, url)
        error = ModelResponseError(
            f"{self.server.label} at {url} answered HTTP {code}: {detail}",
            status_code=code,
            fix=self.server.status_fixes.get(code),
        )
        if code == 429 or code >= 500:
            raise Retryable(error, "transient", f"HTTP {code}", _retry_after(resp))
        raise error

    def _overflow(self, body: str, detail: str, code: int, url: str) -> ContextOverflowError:
        """The refusal of a too long prompt, with the sizes the server gave when it gave them."""
        sizes = _overflow_sizes(body, detail)
        return ContextOverflowError(
            f"{self.server.label} at {url} refused the request as longer than its context "
            f"window (HTTP {code}: {detail})", status_code=code, fix=self.server.overflow_fix,
            prompt_tokens=sizes[0], context_size=sizes[1])

    def _decode(self, text: str, url: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            snippet = self._redact(text[:_DETAIL_CHARS])
            raise ModelResponseError(
                f"{self.server.label} at {url} sent a reply that is not JSON: {snippet!r}",
                fix="check that --host points at the right kind of server",
            ) from exc

    def _translate(self, exc: httpx.HTTPError, url: str, timeout: float,
                   deadline: float) -> ModelError | Retryable:
        """The error the caller sees for `exc`, wrapped in Retryable when it may be retried."""
        label, fix = self.server.label, self.server.unreachable_fix
        if isinstance(exc, httpx.TimeoutException):
            what, limit = ("finish its response", deadline) if isinstance(exc, PastDeadline) \
                else ("answer", timeout)
            timed_out = ModelTimeoutError(
                f"{label} at {url} did not {what} within {limit:g}s (--timeout)",
                fix="raise --timeout, use a smaller model, or check the server's load",
            )
            return Retryable(timed_out, "transient", "timeout")
        if isinstance(exc, httpx.ConnectError) and _unresolved(exc):
            host = urlsplit(url).hostname or url
            what = (f"cannot connect to {label} at {url}: the host name {host!r} does not "
                    f"resolve ({self._redact(str(exc))})")
            return Retryable(ModelUnavailableError(
                what, fix="check --host: a URL such as http://HOST:PORT whose HOST resolves"),
                "connect", "host name not resolved")
        if isinstance(exc, httpx.ConnectError):
            what = f"cannot connect to {label} at {url} ({self._redact(str(exc)) or 'refused'})"
            return Retryable(ModelUnavailableError(what, fix=fix), "connect", "connection refused")
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            what = f"{label} at {url} closed the connection without a complete reply"
            return Retryable(ModelUnavailableError(what, fix=fix), "connect", "connection dropped")
        return ModelUnavailableError(
            f"request to {label} at {url} failed: {self._redact(str(exc))}", fix=fix
        )

    def _where(self, url: str) -> str:
        return f"{self.server.label} at {url}"

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


_UNRESOLVED = ("Name or service not known", "nodename nor servname", "No address associated",
               "Temporary failure in name resolution", "getaddrinfo failed")
"""How the C library says a host name did not resolve (httpx passes its words on)."""


def _unresolved(exc: BaseException) -> bool:
    """Whether a connect error is a host name that did not resolve (not a refused port)."""

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror) or any(w in str(seen) for w in _UNRESOLVED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


Reply = tuple[str, list[RawCall], Usage, str, bool]
"""Text, calls, usage, thinking (reasoning) of one reply, as a provider read it, and whether
the server cut it at its token limit (OpenAI's `finish_reason`, Ollama's `done_reason`:
"length")."""


class HttpChatModel:
    """The `Model` (and `ServedModel`) of a chat server over HTTP, less what tells servers apart.

    A provider sets `chat_path` (and `pull_hint`, the command that fetches a missing model) and
    implements `request_body`, `read_reply`, `read_stream`, `find_context`, `ping` and
    `list_models`; `prepare` runs before each request (e.g. to pick the server's model).
    """

    chat_path: ClassVar[str]
    """Appended to `base_url` for a chat request."""
    pull_hint: ClassVar[str | None] = None
    """How to fetch a model the server lacks ({model} filled in); None: no such command."""

    def __init__(self, name: str, base_url: str, http: HttpClient, *,
                 tool_protocol: ToolProtocol, stream: bool) -> None:
        self.name = name
        self.base_url = base_url
        self.tool_protocol: ToolProtocol = tool_protocol
        self.stream = stream
        self._http = http
        self._context: int | None = None
        self._context_known = False

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, base_url={self.base_url!r}, "
                f"tool_protocol={self.tool_protocol!r}, stream={self.stream})")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_token: TokenCallback | None = None,
        on_thinking: TokenCallback | None = None,
    ) -> ModelReply:
        """One chat request; the reply parsed according to the tool protocol."""
        self.prepare()
        body = self.request_body(messages, tools)
        url = f"{self.base_url}{self.chat_path}"
        try:
            if self.stream:
                text, calls, usage, thinking, cut = self._http.post_stream(
                    url, body, lambda lines: self.read_stream(lines, on_token, on_thinking))
            else:
                text, calls, usage, thinking, cut = self.read_reply(
                    self._http.post_json(url, body))
        except ModelResponseError as exc:
            if exc.status_code != 404:
                raise
            raise missing_model(exc, self.name, self.list_models, self.pull_hint) from exc
        if cut:  # an answer cut short is kept and flagged; any other cut asks for a short reply
            return cut_reply(text, self.tool_protocol, "length", native_calls=calls,
                             usage=usage, context_length=self._context, thinking=thinking)
        return parse_reply(text, self.tool_protocol, native_calls=calls, usage=usage,
                           context_length=self._context, thinking=thinking)

    def context_length(self) -> int | None:
        """The context window as the server tells it (`find_context`), asked once."""
        if not self._context_known:
            self._context = self.find_context()
            self._context_known = True
        return self._context

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def prepare(self) -> None:
        """Before each request (nothing by default)."""

    def request_body(self, messages: Sequence[Message],
                     tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """The JSON body `chat` sends (no I/O)."""
        raise NotImplementedError

    def read_reply(self, data: Any) -> Reply:
        """A whole (not streamed) reply."""
        raise NotImplementedError

    def read_stream(self, lines: Iterator[str], on_token: TokenCallback | None,
                    on_thinking: TokenCallback | None) -> Reply:
        """A streamed reply, each piece of text and of thinking relayed as it comes."""
        raise NotImplementedError

    def find_context(self) -> int | None:
        """The context window in tokens, asked of the server (None: it does not say)."""
        raise NotImplementedError

    def ping(self) -> str:
        """What the server says it is (one short attempt)."""
        raise NotImplementedError

    def list_models(self) -> list[str]:
        """The models the server has (one short attempt)."""
        raise NotImplementedError


def missing_model(error: ModelResponseError, model: str, available: Callable[[], list[str]],
                  pull: str | None) -> ModelResponseError:
    """The 404 of a chat request, with the models the server does have in its fix."""
    try:
        names = available()
    except ModelError:
        return ModelResponseError(error.message, status_code=404, fix=error.fix)
    if model in names:  # the model exists: the 404 is about the URL
        return ModelResponseError(error.message, status_code=404, fix=error.fix)
    listed = ", ".join(names[:20]) or "none"
    fix = f"the server has: {listed}; pass one with --model"
    if pull:
        fix += " (or " + pull.format(model=model) + ")"
    return ModelResponseError(error.message, status_code=404, fix=fix)


def _json_body(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request body as UTF-8 JSON; text that cannot be UTF-8 is sent as U+FFFD.

    Undecodable bytes (a query or a tool's output that was not UTF-8) live on in Python as
    lone surrogates, which no JSON encoder may send: they must never make a request (and so a
    whole session, on every resume) fail.
    """
    if body is None:
        return {}
    text = _SURROGATE.sub("\ufffd", json.dumps(body, ensure_ascii=False))
    return {"content": text.encode("utf-8"), "headers": {"Content-Type": "application/json"}}


def _timeouts(timeout: float) -> httpx.Timeout:
    """httpx's timeouts for `timeout`: each read and write within it, a connect within 10 s."""
    return httpx.Timeout(timeout, connect=min(timeout, _CONNECT_TIMEOUT))


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default verification, built once: loading the CA bundle takes ~40 ms a client."""
    return httpx.create_ssl_context()


def _error_detail(text: str) -> str:
    """The server's own error message (Ollama, OpenAI and llama.cpp shapes), shortened."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:_DETAIL_CHARS]
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        error = error.get("message", error)
    return str(error).strip()[:_DETAIL_CHARS]


def _overflow_sizes(body: str, detail: str) -> tuple[int | None, int | None]:
    """(prompt tokens, context size) of an overflow refusal: llama.cpp sends both as fields;
    elsewhere the first two token counts in the message, the larger being the prompt."""
    try:
        error = json.loads(body).get("error")
    except (json.JSONDecodeError, AttributeError):
        error = None
    if isinstance(error, dict):
        prompt, size = error.get("n_prompt_tokens"), error.get("n_ctx")
        if isinstance(prompt, int) and isinstance(size, int):
            return prompt, size
    numbers = [int(n) for n in _TOKENS.findall(detail)[:2]]
    if len(numbers) == 2 and numbers[0] != numbers[1]:
        return max(numbers), min(numbers)
    return None, None


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (delta-seconds or an HTTP date), if any."""
    value = resp.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_response(resp: httpx.Response) -> httpx.Response:
    """An error response holding only the start of its body (the rest is never read)."""
    kept = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after")}
    reason = resp.extensions.get("reason_phrase", b"")
    return httpx.Response(resp.status_code, headers=kept, content=read_start(resp),
                          request=resp.request, extensions={"reason_phrase": reason})


def _check_short_form(hostport: str, *, flag: str, port: str) -> None:
    """A --host given without a scheme must look like a host: `127.0.0.1`, `:11434`,
    `HOST:PORT`, `[::1]`, `localhost`, a dotted name. A bare word such as `not-a-url` is a
    mistake, said at once (ConfigError) rather than looked up and retried."""
    _, colon, number = hostport.partition("/")[0].rpartition(":")
    if (colon and number.isdigit()) or hostport.startswith("[") or "." in hostport \
            or hostport.partition("/")[0] == "localhost":
        return
    raise ConfigError(f"{flag} {hostport!r} is not a URL",
                      fix=f"give its scheme or its port: {flag} http://HOST:{port}, or {flag} "
                          f"HOST:{port} (a bare word is not taken for a host name)")


def check_http_url(url: str, *, flag: str = "--host", typed: str | None = None,
                   port: str = "") -> str:
    """`url` without a trailing slash, or ConfigError when it is not an http(s) URL; `typed`:
    the value as given without a scheme (with the port it would get), checked first."""
    if typed is not None:
        _check_short_form(typed, flag=flag, port=port)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{flag} {url!r} is not an http(s) URL",
            fix=f"pass e.g. {flag} http://127.0.0.1:11434",
        )
    try:
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"{flag} {url!r} has an invalid port", fix=f"fix {flag}") from exc
    return url.rstrip("/")
