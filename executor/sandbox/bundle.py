"""The toolbox as it is sent into the container: its command line and its compiled bundle."""

from __future__ import annotations

import base64
import functools
import marshal
import platform
import zlib
from importlib import resources
from importlib.util import MAGIC_NUMBER
from typing import Any

from executor.sandbox import boot, seccomp
from executor.sandbox.config import CHANNEL, WORKSPACE, SandboxConfig
from executor.state import LEGACY_DIR

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


def toolbox_payload(magic: bytes) -> bytes:
    """What boot/bootstrap.py reads once it said its bytecode `magic` (a hex line): the toolbox
    compiled by this interpreter when the formats agree, else its source; zlib-compressed."""
    try:
        same = bytes.fromhex(magic.decode("ascii").strip()) == MAGIC_NUMBER
    except ValueError:
        same = False
    kind, blob = ("code", compiled_toolbox()) if same else ("source", _toolbox_source())
    return f"{kind} {len(blob)}\n".encode() + blob


@functools.cache
def compiled_toolbox() -> bytes:
    """The toolbox package compiled here, as the bundle boot/bootstrap.py imports from (module
    name -> (is a package, code), marshalled, compressed); made once a process."""
    bundle = {name: (package, compile(text, filename, "exec", dont_inherit=True))
              for name, (package, filename, text) in _toolbox_modules().items()}
    return zlib.compress(marshal.dumps(bundle), 6)


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
