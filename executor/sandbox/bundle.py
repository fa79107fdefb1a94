"""The toolbox as it is sent into the container: its command line and its compiled bundle."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import marshal
import os
import platform
import secrets
import sys
import zlib
from importlib import resources
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

from executor.errors import SandboxAgentError
from executor.sandbox import boot, seccomp
from executor.sandbox.config import CHANNEL, WORKSPACE, SandboxConfig
from executor.state import LEGACY_DIR, open_private, own_dir, private_dir

INIT_TAG = "# sandbox-agent init"
"""The first line of PID 1's code (boot/init.py): how the kill script knows PID 1 is ours."""
INIT_MARK = b"sandbox-agent-init: the toolbox exited"
"""What the container's first process writes on stderr when its toolbox child is gone."""
EXIT_ORPHANED = 75
"""The toolbox's exit status when its host went away mid-command (init.py ends the container)."""


def toolbox_argv(config: SandboxConfig, git: list[str], *, fifo: bool) -> list[str]:
    """The toolbox's command line (see its docstring); `git`: the git surface's options
    (gitsafety), `fifo`: a channel dir is mounted."""
    # --kill-strays: the container is ours alone, whether the toolbox was exec'd (ppid 0)
    # or forked by PID 1 (boot/init.py; ppid 1), so every process a command leaves can go
    argv = ["--kill-strays", "--root", WORKSPACE,
            "--default-timeout", str(config.tool_timeout),
            "--max-output", str(config.max_output), "--hidden", LEGACY_DIR,
            "--disk-budget", str(config.disk_budget)]
    argv += git
    if fifo:
        argv += ["--channel", CHANNEL]
    return [*argv, "--sign", *filter_argv()]


@functools.cache
def filter_argv() -> list[str]:
    """The toolbox's own seccomp programs, built for this host's machine (none elsewhere)."""
    program = seccomp.toolbox_filter(platform.machine())
    return ["--seccomp-filter", base64.b64encode(program).decode()] if program else []


def toolbox_command(argv: list[str], *, first: bool = False,
                    standby: bool = False) -> list[str]:
    """The toolbox's command line in the container; `first`: as the container's own command,
    under PID 1 (boot/init.py, which stays and reaps); `standby`: that PID 1 waits until a
    session adopts the container (executor/sandbox/warm.py)."""
    program = (boot.standby_toolbox() if standby else boot.first_toolbox() if first
               else boot.source("bootstrap"))
    return ["python3", "-I", "-S", "-u", "-c", program, *argv]


def toolbox_payload(magic: bytes, cache: Path | None = None) -> bytes:
    """What boot/bootstrap.py reads once it said its bytecode `magic` (a hex line): the toolbox
    compiled by this interpreter when the formats agree, else its source; zlib-compressed.
    `cache`: the lock dir, where the compiled bundle is kept between processes."""
    try:
        same = bytes.fromhex(magic.decode("ascii").strip()) == MAGIC_NUMBER
    except ValueError:
        same = False
    kind, blob = ("code", compiled_toolbox(cache)) if same else ("source", _toolbox_source())
    return f"{kind} {len(blob)}\n".encode() + blob


BUNDLES = "bundles"
"""The compiled bundles' directory in the lock dir (host-only: nothing there is mounted)."""
_CACHE_MAGIC = b"sandbox-agent toolbox bundle 1\n"
_MAX_BUNDLE = 16 * 1024 * 1024


@functools.cache
def compiled_toolbox(cache: Path | None = None) -> bytes:
    """The toolbox package compiled here, as the bundle boot/bootstrap.py imports from (module
    name -> (is a package, code), marshalled, compressed); made once a process, and with
    `cache` (the lock dir) once for every process of these sources and this interpreter."""
    modules = _toolbox_modules()
    if cache is None:
        return _compile(modules)
    key = _bundle_key(modules)
    blob = _cached(cache, key)
    if blob is None:
        blob = _compile(modules)
        _keep(cache, key, blob)
    return blob


def _compile(modules: dict[str, tuple[bool, str, bytes]]) -> bytes:
    bundle = {name: (package, compile(text, filename, "exec", dont_inherit=True))
              for name, (package, filename, text) in modules.items()}
    return zlib.compress(marshal.dumps(bundle), 6)


def _bundle_key(modules: dict[str, tuple[bool, str, bytes]]) -> str:
    """What the compiled bundle depends on: every module's name, kind and source, and the
    interpreter's bytecode format and optimization level."""
    digest = hashlib.sha256(MAGIC_NUMBER + bytes([sys.flags.optimize]))
    for name, (package, filename, text) in sorted(modules.items()):
        for part in (name.encode(), b"p" if package else b"m", filename.encode(), text):
            digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def _bundle_file(cache: Path, key: str) -> Path:
    return cache / BUNDLES / f"toolbox-{key[:32]}.bin"


def _cached(cache: Path, key: str) -> bytes | None:
    """The bundle kept for `key`, or None when there is none or it is not exactly what we
    wrote (a short, foreign or edited file is never trusted: the next write replaces it)."""
    path = _bundle_file(cache, key)
    try:
        own_dir(path.parent)
        fd = open_private(path, os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(_MAX_BUNDLE)
    header, sep, blob = data.partition(b"\n\n")
    return blob if sep and header + sep == _cache_header(key, blob) else None


def _cache_header(key: str, blob: bytes) -> bytes:
    """The first lines of a kept bundle: format, key, the payload's size and sha256."""
    return (_CACHE_MAGIC + f"{key}\n{len(blob)}\n".encode()
            + hashlib.sha256(blob).hexdigest().encode() + b"\n\n")


def _keep(cache: Path, key: str, blob: bytes) -> None:
    """Write the bundle for the next process: a 0600 file in a 0700 directory of ours, written
    beside and renamed over, never through a link; bundles of other sources go. Best effort:
    a lock dir we cannot write only costs the next process a compile."""
    path = _bundle_file(cache, key)
    with contextlib.suppress(OSError, SandboxAgentError):
        private_dir(path.parent, parents=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
        fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(_cache_header(key, blob) + blob)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        for entry in os.scandir(path.parent):
            if entry.name.startswith("toolbox-") and entry.name != path.name:
                os.unlink(entry.path)


@functools.cache
def _toolbox_source() -> bytes:
    """The same bundle with each module's source, for a Python of another bytecode format."""
    bundle = {name: (package, text) for name, (package, _, text) in _toolbox_modules().items()}
    return zlib.compress(marshal.dumps(bundle), 6)


def _toolbox_modules() -> dict[str, tuple[bool, str, bytes]]:
    """Every module of executor/toolbox as it is named in the container (`toolbox`,
    `toolbox.tools.shell`, ...): (is a package, its file name there, its source)."""
    found: dict[str, tuple[bool, str, bytes]] = {}

    def walk(folder: Any, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and entry.joinpath("__init__.py").is_file():
                walk(entry, f"{prefix}.{entry.name}")
            elif entry.name.endswith(".py"):
                package = entry.name == "__init__.py"
                name = prefix if package else f"{prefix}.{entry.name[:-3]}"
                filename = name.replace(".", "/") + ("/__init__.py" if package else ".py")
                found[name] = (package, filename, entry.read_bytes())

    walk(resources.files("executor.toolbox"), "toolbox")
    return found
