"""The copy workspace's loader: the project planned, archived and streamed into a container.

It implements the sandbox's `CopyLoader` (executor/sandbox/copy.py): the sandbox knows when a
copy is due, this module knows what a copy is (the plan, the archive, its manifest). Whoever
builds a copy session's sandbox passes one in (`DockerSandbox(config, copy_loader=...)`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from typing import Any

from executor.errors import SandboxAgentError, SandboxError
from executor.sandbox.config import NOBODY, SandboxConfig
from executor.sandbox.copy import WORKSPACE, CopyAbort, chmod, extract
from executor.workspace.archive import Archive, Limits, Prefetch, overlay, plan
from executor.workspace.manifest import Manifest, from_row
from executor.workspace.paths import Excludes
from executor.workspace.store import BlobStore


class ArchiveLoader:
    """One session's copy: planned before its container exists, loaded while its toolbox
    starts; satisfies `CopyLoader`."""

    def __init__(self) -> None:
        self._copy: Archive | None = None
        self._prefetch: Prefetch | None = None
        self._produced: threading.Event | None = None
        self._copying: threading.Thread | None = None
        self._error: BaseException | None = None
        self._abort = CopyAbort()

    def plan(self, config: SandboxConfig, owner: tuple[int, int]) -> int:
        """Walk the root and check the size guard; the main part is read ahead from now."""
        limits = Limits(config.copy_limit, config.copy_max_files, Excludes(config.copy_exclude),
                        git_apart=not (config.allow_git_writes or config.read_only))
        found = plan(config.root, limits)
        pending = {path: from_row(row) if row else None
                   for path, row in config.copy_overlay.items()}
        if pending:
            found = overlay(found, pending)
        blobs = BlobStore(config.blob_dir) if config.blob_dir else None
        uid, gid = owner
        git_uid = NOBODY if uid != NOBODY else 0
        self._copy = Archive(config.root, found, uid=uid, gid=gid, git_uid=git_uid,
                             git_gid=git_uid, blobs=blobs.get if blobs else None)
        self._prefetch = Prefetch(self._copy.main())  # read while the container is made
        self._produced = self._prefetch.produced
        return found.bytes

    def start(self, api: Any, container: Any, *, user: str, read_only: bool) -> None:
        """Load the copy in a thread; `wait` re-raises what stopped it."""
        if self._copy is None or self._prefetch is None:
            return self.drop()
        archive, main = self._copy, self._prefetch
        abort = self._abort = CopyAbort()

        def run() -> None:
            try:
                load_copy(api, container, archive, main, user=user,
                          git_user=f"{archive.git_uid}:{archive.git_gid}", read_only=read_only,
                          abort=abort)
            except BaseException as exc:  # re-raised in the caller's thread by wait
                self._error = exc
            finally:
                self._stop_prefetch()

        self._copying = threading.Thread(target=run, name="sandbox-copy", daemon=True)
        self._copying.start()

    def drop(self) -> None:
        """No copy this start (the container re-attached to holds one)."""
        self._copy, self._produced = None, None
        self._stop_prefetch()

    def abort(self) -> None:
        """A copy still arriving ends now."""
        self._abort.abort()
        if self._copying is not None:
            self._stop_prefetch()

    def wait(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        if self._copying is not None:
            self._copying.join()
            self._copying = None
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, SandboxAgentError):
                raise error
            raise SandboxError(f"the copy into the container failed: {error}") from error

    def close(self) -> None:
        """Its container is gone: a copy still running ends now."""
        if self._copying is not None:
            self._copying.join(timeout=30)
            self._copying, self._error = None, None
        self._stop_prefetch()

    def manifest(self) -> Manifest | None:
        """What this start copied in; None: nothing was (a re-attached container's copy)."""
        return None if self._copy is None else self._copy.manifest

    def sent(self) -> Manifest | None:
        """What this start copies in, as soon as all of it has been read and hashed (it may
        still be arriving); None: nothing is copied, or the reading did not end well."""
        produced = self._produced
        if self._copy is None or produced is None:
            return None
        while not produced.wait(0.1):
            if self._copying is None or not self._copying.is_alive():
                return self._copy.manifest if produced.is_set() else None
        return self._copy.manifest

    @property
    def notes(self) -> list[str]:
        """What the copy left out, and why."""
        return [] if self._copy is None else list(self._copy.notes)

    def _stop_prefetch(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()
            self._prefetch = None


def load_copy(api: Any, container: Any, archive: Archive, main: Iterable[bytes], *,
              user: str, git_user: str, read_only: bool,
              abort: CopyAbort | None = None) -> None:
    """Fill the container's /workspace with `archive`, whose main part is streamed by `main`
    (see executor/sandbox/copy.py's docstring)."""
    abort = abort or CopyAbort()
    if read_only:
        _check(archive, extract(api, container.id, "0:0", main, abort=abort))
        return
    # the tmpfs is made 1777 too, but the engine makes the working directory 0755 at start;
    # the extractor starts meanwhile (it writes nothing before the archive's first bytes)
    writable = functools.partial(chmod, api, container.id, "0:0", "1777", [WORKSPACE])
    _check(archive, extract(api, container.id, user, main, abort=abort, before=writable))
    if archive.plan.git:
        extract(api, container.id, git_user, archive.git(), abort=abort)
        opened = [f"{WORKSPACE}/{d}" for d in sorted(archive.open_dirs) if d]
        if opened:
            chmod(api, container.id, user, "755", opened)


def _check(archive: Archive, count: int) -> None:
    if count != archive.main_entries:  # the extractor wrote what was sent, or said why not
        raise SandboxError(f"the copy is incomplete: {count} of {archive.main_entries} entries")
