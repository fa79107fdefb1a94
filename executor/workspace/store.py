"""Where a session's workspace state lives: in the per-user state dir, never in the project.

    <project state dir>/
      workspaces/<session>/
        base.json       what the copy was made from: {"version", "session", "taken_at",
                        "entries": {path: [kind, mode, size, sha256, target]}, "notes"}
        changes.json    the pending changes (changes.py), rewritten when a run ends
        journal.ndjson  one line per apply, undo and (bind mode) recorded write
      blobs/<sha256>    file contents, content-addressed and checked on every read

Every file is created 0600 in a 0700 directory we own (executor/state.py), written to a
temporary name and renamed into place, and opened without following links.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from executor.errors import ConfigError, WorkspaceError
from executor.state import ensure_project_dir, open_private, private_dir, project_dir, read_private

MAX_JSON = 512 * 1024 * 1024
"""Bytes of a base or changes file read back at most."""
_SHA = re.compile(r"[0-9a-f]{64}")
_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_session(name: str) -> str:
    """`name` when it is a valid session name (it becomes a directory name)."""
    if not _SESSION.fullmatch(name):
        raise ConfigError(f"invalid session name {name!r}")
    return name


def workspaces_dir(root: Path) -> Path:
    """Where the workspace state of every session of `root` lives (not created)."""
    return project_dir(root) / "workspaces"


def session_dir(root: Path, session: str) -> Path:
    """One session's workspace state dir (not created)."""
    return workspaces_dir(root) / check_session(session)


def ensure_session_dir(root: Path, session: str) -> Path:
    """One session's workspace state dir, created private."""
    project = ensure_project_dir(root)
    return private_dir(private_dir(project / "workspaces") / check_session(session))


# ---------------------------------------------------------------------------- files


def write_json(path: Path, value: Any) -> None:
    """Write `value` to `path` atomically: a private temporary file, fsync, rename."""
    data = json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    write_bytes(path, data)


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (never through a link)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise WorkspaceError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_json(path: Path) -> Any:
    """The JSON value of a state file; None when it does not exist."""
    try:
        data = read_private(path, MAX_JSON)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise WorkspaceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return json.loads(data)
    except ValueError as exc:
        raise WorkspaceError(f"{path} is not valid JSON ({exc})",
                             fix=f"move it away: mv {path} {path}.bad") from exc


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably (the journal)."""
    line = json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
    try:
        fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:
        raise WorkspaceError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a journal; a torn last line (a killed writer) is skipped."""
    try:
        data = read_private(path, MAX_JSON)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise WorkspaceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    records = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                records.append(value)
    return records


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------------------- blobs


class BlobStore:
    """File contents by sha256, shared by the sessions of one project."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def for_root(cls, root: Path) -> BlobStore:
        """The blob store of `root` (created on the first `put`)."""
        return cls(project_dir(root) / "blobs")

    def path(self, digest: str) -> Path:
        """Where the blob `digest` is kept."""
        if not _SHA.fullmatch(digest):
            raise WorkspaceError(f"not a sha256: {digest[:80]!r}")
        return self.directory / digest

    def has(self, digest: str) -> bool:
        """Whether the blob is kept (its content is checked when read)."""
        try:
            return self.path(digest).is_file()
        except WorkspaceError:
            return False

    def put(self, data: bytes) -> str:
        """Keep `data`; its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        if not self.has(digest):
            private_dir(self.directory, parents=True)
            write_bytes(self.path(digest), data)
        return digest

    def get(self, digest: str) -> bytes:
        """The content of blob `digest`, checked against its name."""
        path = self.path(digest)
        try:
            data = read_private(path)
        except FileNotFoundError:
            raise WorkspaceError(f"the content of {digest[:12]} is not kept") from None
        except OSError as exc:
            raise WorkspaceError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise WorkspaceError(f"{path} does not hold the content it is named after",
                                 fix=f"remove it: rm {path}")
        return data

    def iter_names(self) -> Iterator[str]:
        """Digests of every kept blob."""
        with contextlib.suppress(FileNotFoundError), os.scandir(self.directory) as it:
            for entry in it:
                if _SHA.fullmatch(entry.name):
                    yield entry.name
