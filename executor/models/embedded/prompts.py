"""The KV cache of a system prompt kept on disk between runs (`PromptStore`)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from executor.models.embedded.server import LlamaServer


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
