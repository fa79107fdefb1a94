"""llama.cpp's OpenAI-compatible server (xllamacpp) in this process, on 127.0.0.1 and a free
port: its options, starting it, and reading why it failed."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from executor import LOCAL_EXTRA_FIX
from executor.errors import EmbeddedModelError
from executor.models.embedded.spec import ProgressCallback
from executor.protocols import LoadProgress
from executor.text import inert


class EmbeddedOptions(BaseSettings):
    """How the embedded server runs; each field also reads `SANDBOX_AGENT_EMBEDDED_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="SANDBOX_AGENT_EMBEDDED_", extra="ignore")

    n_ctx: int = Field(default=8192, ge=512)
    """Context window in tokens (left unset, llama.cpp would allocate the model's full 32k)."""
    cache_ram_mib: int = Field(default=256, ge=0)
    """Cap of the prompt cache llama.cpp keeps in RAM between requests (its default is 8 GiB)."""
    threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation and prompt processing; None: every core this process may use."""
    n_batch: int = Field(default=512, ge=32)
    """Prompt tokens llama.cpp reads in one step of its loop (its default: 2,048). A stop
    (Ctrl-C, SIGTERM) waits for the step under way (docs/MODELS.md); 512 is the size of its
    compute unit (n_ubatch) anyway."""
    max_reply_tokens: int = Field(default=2048, ge=16)
    """Tokens one reply may generate when the request sets no limit (stops runaway output)."""
    repeat_penalty: float = Field(default=1.0, ge=1.0, le=2.0)
    """llama.cpp's penalty on tokens of the last 64 (1.0: off). Off by default: a runaway is
    stopped while it streams instead (`runaway.py`), and a penalty also hits what an agent
    must repeat (JSON keys, the exact `old_text` of an edit)."""
    dry_multiplier: float = Field(default=0.0, ge=0.0, le=5.0)
    """llama.cpp's DRY penalty on extending a sequence already seen (0: off); see above."""
    start_timeout: float = Field(default=120.0, gt=0)
    """Seconds to wait for the server to answer once llama.cpp has loaded the model."""
    verbosity: int = Field(default=0, ge=0, le=4)
    """llama.cpp's log threshold on stderr: 0 nothing, 1 errors, 2 warnings, 3 info, 4 debug.
    Its errors while serving (a prompt over the window) reach the user as our own errors;
    when the server does not start, its error lines are read again at 1 to say why."""
    prompt_files: int = Field(default=4, ge=0)
    """System prompts whose KV cache is kept on disk for the next run (0: none are kept)."""


def _cores() -> int:
    """Cores this process may run on (respects CPU affinity, unlike os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def import_xllamacpp() -> Any:
    """The xllamacpp module, or EmbeddedModelError saying how to install it."""
    try:
        import xllamacpp
    except (ImportError, OSError) as exc:
        raise EmbeddedModelError(
            f"the embedded model is an optional extra and xllamacpp is not usable ({exc})",
            fix=LOCAL_EXTRA_FIX,
        ) from exc
    return xllamacpp


@contextlib.contextmanager
def _stderr_into(sink: IO[bytes]) -> Iterator[None]:
    """Point file descriptor 2 at `sink`: llama.cpp logs there from native code."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _error_lines(log: str, limit: int = 2) -> str:
    """The distinct error lines of a llama.cpp log ('<time> E <source>: <message>'), joined."""
    lines = (line.split(" E ", 1) for line in log.splitlines())
    errors = dict.fromkeys(" ".join(parts[1].split()) for parts in lines if len(parts) == 2)
    return "; ".join(list(errors)[:limit])


def _await_error_line(log: Any, wait: float = 2.0) -> None:
    """Give llama.cpp's logging thread a moment to write the error that explains a failure
    (on a loaded machine it came after the exception, and the reason was lost)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # pread: the writer shares the file's offset
        if _error_lines(os.pread(log.fileno(), 1 << 20, 0).decode(errors="replace")):
            return
        time.sleep(0.02)


class LlamaServer:
    """llama.cpp's OpenAI-compatible server in this process, on 127.0.0.1 and a free port."""

    def __init__(
        self,
        model_file: Path,
        options: EmbeddedOptions | None = None,
        *,
        alias: str = "",
        slot_dir: Path | None = None,
    ) -> None:
        self.model_file = model_file
        self.options = options or EmbeddedOptions()
        self.alias = alias or model_file.stem
        """The model name the server reports and accepts."""
        self.slot_dir = slot_dir
        """Where `slot` may save and restore the KV cache (None: nowhere)."""
        self.api_key = secrets.token_urlsafe(24)
        """Random per server: other local users cannot borrow it."""
        self.base_url: str | None = None
        """`http://127.0.0.1:<port>` while running, else None."""
        self.n_ctx: int | None = None
        """Context window the running server reports."""
        self._server: Any = None

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is up (started and not stopped)."""
        return self._server is not None

    def start(self, progress: ProgressCallback | None = None) -> str:
        """Load the model and serve it; returns the base URL once the server answers.

        xllamacpp loads the model inside Server() while holding the GIL (about 4 s here), so
        `progress` hears 'load' before and 'ready' after, but no Python thread (a spinner
        included) runs in between.
        """
        if self.base_url is not None:
            return self.base_url
        xllamacpp = import_xllamacpp()
        started = time.monotonic()
        if progress:
            progress(LoadProgress("load"))
        self._server = self._construct(xllamacpp, self._params(xllamacpp))
        try:
            self.base_url = _loopback_url(str(self._server.listening_address))
            self.n_ctx = self._wait_ready(started, progress)
        except BaseException:
            self.stop()
            raise
        if progress:
            progress(LoadProgress("ready", elapsed=time.monotonic() - started))
        return self.base_url

    def stop(self) -> None:
        """Stop serving and free the model; safe to call twice."""
        # xllamacpp has no stop(): the Server's destructor terminates its loop and joins the
        # thread, so dropping the only reference here is what stops it, deterministically.
        server, self._server, self.base_url = self._server, None, None
        del server

    def _params(self, xllamacpp: Any) -> Any:
        """llama.cpp's parameters for one private, local, single-slot server."""
        params, opts = xllamacpp.CommonParams(), self.options
        params.model.path = str(self.model_file)
        params.model_alias = {self.alias}
        params.hostnames, params.port = ["127.0.0.1"], 0  # 0: the OS picks a free port
        params.api_keys = [self.api_key]
        params.n_ctx, params.n_parallel = opts.n_ctx, 1
        params.n_batch, params.n_ubatch = opts.n_batch, min(params.n_ubatch, opts.n_batch)
        params.cache_ram_mib, params.n_predict = opts.cache_ram_mib, opts.max_reply_tokens
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = opts.threads or _cores()
        params.sampling.penalty_repeat = opts.repeat_penalty
        params.sampling.dry_multiplier = opts.dry_multiplier
        params.ui = params.endpoint_slots = params.endpoint_props = False
        params.verbosity = opts.verbosity
        if self.slot_dir is not None:  # save/restore; llama.cpp joins the path without a '/'
            params.endpoint_slots, params.slot_save_path = True, f"{self.slot_dir}/"
        return params

    def slot(self, action: Literal["save", "restore"], filename: str) -> bool:
        """Save the KV cache to, or restore it from, `filename` in `slot_dir`; whether it did."""
        return self._post(f"/slots/0?action={action}", {"filename": filename})

    def warm(self, system: str) -> bool:
        """Have the server read `system` as a conversation's system prompt (one token out)."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "."}]
        return self._post("/v1/chat/completions",
                          {"messages": messages, "max_tokens": 1, "temperature": 0})

    def tokens(self, text: str) -> int | None:
        """How many tokens the model reads in `text` (llama.cpp's /tokenize); None if unknown."""
        reply = self._request("/tokenize", {"content": text, "add_special": False})
        try:
            tokens = reply.json()["tokens"] if reply is not None else None
        except (ValueError, KeyError, TypeError):
            return None
        return len(tokens) if isinstance(tokens, list) else None

    def _post(self, path: str, body: dict[str, Any]) -> bool:
        reply = self._request(path, body)
        return reply is not None and reply.status_code == 200

    def _request(self, path: str, body: dict[str, Any]) -> httpx.Response | None:
        if self.base_url is None:
            return None
        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            return httpx.post(f"{self.base_url}{path}", json=body, headers=headers,
                              timeout=self.options.start_timeout)
        except httpx.HTTPError:
            return None

    def _construct(self, xllamacpp: Any, params: Any) -> Any:
        """Create the Server (it loads the model; the GIL stays held until it returns).

        A silent server (verbosity 0) that fails is tried once more logging its errors, so
        that the message can say why."""
        try:
            return self._construct_logged(xllamacpp, params)
        except EmbeddedModelError:
            if params.verbosity >= 1:
                raise
        params.verbosity = 1
        return self._construct_logged(xllamacpp, params)

    def _construct_logged(self, xllamacpp: Any, params: Any) -> Any:
        with tempfile.TemporaryFile() as log:
            try:
                with _stderr_into(log):
                    try:
                        server = xllamacpp.Server(params)
                    except Exception:
                        _await_error_line(log)
                        raise
            except Exception as exc:
                log.seek(0)
                reason = _error_lines(log.read().decode(errors="replace")) or str(exc)
                raise EmbeddedModelError(
                    f"llama.cpp could not serve {self.model_file}: {reason}",
                    fix="set SANDBOX_AGENT_EMBEDDED_VERBOSITY=3 to see llama.cpp's full log",
                ) from exc
            log.seek(0)
            sys.stderr.write(inert(log.read().decode(errors="replace")))  # llama.cpp's own log
        return server

    def _wait_ready(self, started: float, progress: ProgressCallback | None) -> int | None:
        """Poll until the server lists its model; returns the context size it reports."""
        deadline = time.monotonic() + self.options.start_timeout
        headers = {"Authorization": f"Bearer {self.api_key}"}
        while True:
            try:
                reply = httpx.get(f"{self.base_url}/v1/models", headers=headers, timeout=5.0)
                if reply.status_code == 200:
                    return _served_n_ctx(reply.json())
            except (httpx.HTTPError, ValueError):
                pass  # not listening yet, or still loading: keep waiting until the deadline
            if time.monotonic() > deadline:
                raise EmbeddedModelError(
                    f"the embedded model server did not answer within "
                    f"{self.options.start_timeout:.0f} s",
                    fix="raise SANDBOX_AGENT_EMBEDDED_START_TIMEOUT or free some memory and CPU",
                )
            if progress:
                progress(LoadProgress("load", elapsed=time.monotonic() - started))
            time.sleep(0.2)


def _loopback_url(address: str) -> str:
    """`address` as a base URL, refusing anything that is not 127.0.0.1."""
    url = address if "://" in address else f"http://{address}"
    if urlsplit(url).hostname != "127.0.0.1":
        raise EmbeddedModelError(f"the embedded model server listens on {address}, not 127.0.0.1")
    return url.rstrip("/")


def _served_n_ctx(models: Any) -> int | None:
    """The n_ctx llama.cpp reports in /v1/models (its 'meta'), if present."""
    try:
        return int(models["data"][0]["meta"]["n_ctx"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
