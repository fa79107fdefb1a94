"""`EmbeddedModel`: the model file and the server tied to the OpenAI-compatible provider, so
that llama.cpp in this process answers the `Model` protocol."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from executor.config import DEFAULT_TIMEOUT, Settings, ToolProtocol
from executor.hooks import HookBus
from executor.messages import Message, ModelReply, ToolSpec
from executor.models._http import ServerHint
from executor.models.embedded.prompts import PromptStore
from executor.models.embedded.runaway import guarded_chat
from executor.models.embedded.server import EmbeddedOptions, LlamaServer, import_xllamacpp
from executor.models.embedded.spec import QWEN_1_5B, ModelSpec, ProgressCallback, resolve_spec
from executor.models.embedded.weights import ensure_model, find_parts, model_path, sidecar_trusted
from executor.models.limits import DEFAULT_MAX_REPLY_BYTES
from executor.models.openai import OpenAIModel
from executor.models.retry import RetryPolicy
from executor.models.toolproto import prepare_messages
from executor.protocols import TokenCallback


def preflight(spec: ModelSpec = QWEN_1_5B, directory: Path | None = None) -> str:
    """Check, without loading anything, that the model can run; a status line or the error."""
    import_xllamacpp()
    path = model_path(spec, directory)
    if sidecar_trusted(path, spec):
        return f"{spec.name}: verified in the cache at {path}"
    find_parts(spec)
    return f"{spec.name}: parts installed; assembled into {path} on first use"


SLOWEST_TOKENS_PER_SECOND = 2.0
"""The slowest generation an honest reply is given time for: under half the 4.7 tokens/s the
1.5B model made on 2 shared cores (docs/MODELS.md; 28-30 on quiet ones)."""


def reply_deadline(timeout: float | None, max_reply_tokens: int) -> float:
    """Seconds one whole reply may take: `--timeout` when given, else its first byte's wait
    (the prompt read, DEFAULT_TIMEOUT) plus every token the server may generate at the
    slowest rate above (2,048 tokens: 1,324 s)."""
    if timeout is not None:
        return timeout
    return DEFAULT_TIMEOUT + max_reply_tokens / SLOWEST_TOKENS_PER_SECOND


def _server_hint(n_ctx: int) -> ServerHint:
    # KV cache of the 1.5B model: 28 layers x 2 heads x 128 x (K, V) x 2 bytes = 28 KiB/token.
    return ServerHint(
        label="the embedded model server",
        unreachable_fix="the in-process llama.cpp server stopped; run again (it restarts)",
        overflow_fix=f"raise the window with SANDBOX_AGENT_EMBEDDED_N_CTX (now {n_ctx}; "
                     f"e.g. {2 * n_ctx}, about {n_ctx * 28 >> 10} MiB more memory) or make "
                     "the request smaller",
    )


class EmbeddedModel:
    """The `Model` protocol answered by llama.cpp in this process; start() shows the loading."""

    def __init__(
        self,
        spec: ModelSpec = QWEN_1_5B,
        *,
        options: EmbeddedOptions | None = None,
        tool_protocol: ToolProtocol = "constrained",
        stream: bool = True,
        temperature: float = 0.0,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        hooks: HookBus | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        cache: Path | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.options = options or EmbeddedOptions()
        self.tool_protocol: ToolProtocol = tool_protocol
        self.cache = cache
        """Directory of the assembled model (None: `cache_dir()`)."""
        # timeout: --timeout (each read and a whole reply); None: DEFAULT_TIMEOUT a read and
        # reply_deadline() a whole reply
        self.stream, self.temperature, self.timeout = stream, temperature, timeout
        self._retry, self._hooks = retry, hooks
        self._max_reply_bytes = max_reply_bytes
        self._progress = progress
        self._server: LlamaServer | None = None
        self._client: OpenAIModel | None = None
        self._prompts: PromptStore | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        hooks: HookBus | None = None,
        tool_protocol: ToolProtocol | None = None,
        progress: ProgressCallback | None = None,
    ) -> EmbeddedModel:
        """The embedded model `--model` names (default 1.5B), at temperature 0 unless set."""
        return cls(
            resolve_spec(settings.model),
            tool_protocol=tool_protocol or settings.tool_protocol or "constrained",
            stream=settings.stream,
            temperature=0.0 if settings.temperature is None else settings.temperature,
            timeout=settings.timeout,
            retry=RetryPolicy.from_settings(settings),
            hooks=hooks,
            max_reply_bytes=settings.max_reply_bytes,
            progress=progress,
        )

    def __repr__(self) -> str:
        state = self._server.base_url if self._server else "stopped"
        return f"EmbeddedModel({self.name!r}, tool_protocol={self.tool_protocol!r}, {state})"

    def __enter__(self) -> EmbeddedModel:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str | None:
        """The running server's root URL (None before start and after close)."""
        return self._server.base_url if self._server else None

    def start(self, progress: ProgressCallback | None = None) -> EmbeddedModel:
        """Assemble and verify the model if needed, then serve it; does nothing when running."""
        if self._client is None:
            self._start(progress or self._progress)
        return self

    def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_token: TokenCallback | None = None,
        on_thinking: TokenCallback | None = None,
    ) -> ModelReply:
        """One turn from the local model (starting it first if needed)."""
        client = self._client or self._start(self._progress)
        if self._prompts is not None:  # once per server, before its first request
            self._prime(self._prompts, messages, tools)
            self._prompts = None
        reply = guarded_chat(client, messages, tools, cap=self.options.max_reply_tokens,
                             on_token=on_token, on_thinking=on_thinking)
        return reply.model_copy(update={"context_length": self.context_length()})

    def count_tokens(self, text: str) -> int | None:
        """Tokens of `text` as this model reads them (None before the server runs)."""
        return self._server.tokens(text) if self._server is not None else None

    def context_length(self) -> int | None:
        """The served context window (the configured n_ctx before the server runs)."""
        served = self._server.n_ctx if self._server else None
        return served or self.options.n_ctx

    def close(self) -> None:
        """Stop the server and free the model's memory; safe to call twice."""
        client, server, self._client, self._server = self._client, self._server, None, None
        if client is not None:
            client.close()
        if server is not None:
            server.stop()

    def _start(self, progress: ProgressCallback | None) -> OpenAIModel:
        """Bring the server up and connect the client to it."""
        path = ensure_model(self.spec, directory=self.cache, progress=progress)
        server = LlamaServer(path, self.options, alias=self.name, slot_dir=self._slot_dir(path))
        base_url = server.start(progress)
        self._server, self._client = server, self._connect(base_url, server.api_key)
        if server.slot_dir is not None:
            identity = f"{self.spec.sha256}/{server.n_ctx}/{import_xllamacpp().__version__}"
            self._prompts = PromptStore(server, identity, self.options.prompt_files)
        return self._client

    def _slot_dir(self, model_file: Path) -> Path | None:
        """`prompts/` beside the model file (created private), or None when none are kept."""
        if not self.options.prompt_files:
            return None
        directory = model_file.parent / "prompts"
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return None
        return directory

    def _prime(self, store: PromptStore, messages: Sequence[Message],
               tools: Sequence[ToolSpec]) -> None:
        """Restore (or save) the KV cache of the system prompt this request starts with."""
        wire = prepare_messages(messages, tools, self.tool_protocol)
        if wire and wire[0].role == "system":
            store.prime(wire[0].content)

    def _connect(self, base_url: str, api_key: str) -> OpenAIModel:
        """The OpenAI-compatible client for the local server (no I/O)."""
        return OpenAIModel(
            self.name,
            base_url=f"{base_url}/v1",
            api_key=api_key,
            tool_protocol=self.tool_protocol,
            stream=self.stream,
            temperature=self.temperature,
            timeout=DEFAULT_TIMEOUT if self.timeout is None else self.timeout,
            deadline=reply_deadline(self.timeout, self.options.max_reply_tokens),
            max_reply_bytes=self._max_reply_bytes,
            retry=self._retry,
            hooks=self._hooks,
            server=_server_hint(self.context_length() or self.options.n_ctx),
        )
