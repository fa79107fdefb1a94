"""Trust in project files, granted only by the person and recorded outside the project.

A project may ship files that would change what sandbox-agent does (today: its policy,
`.sandbox-agent/policy.toml`). They are the repository's words, not the person's, so they count
only once the person trusts their exact content (`sandbox-agent policy trust`): the file's
SHA-256 is recorded in the project's state dir (`trust.json`), and any change makes it untrusted
again. Project files are read without following links (no component of the path may be a
symlink) and without blocking, and only when they are small regular files.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from executor.errors import ConfigError, SessionError
from executor.state import ensure_project_dir, open_private, project_dir

TRUST_FILE = "trust.json"
MAX_PROJECT_FILE = 1 << 20
"""Bytes a trusted project file may have (a policy is a few KB)."""


@dataclass(frozen=True)
class ProjectFile:
    """A file read from the project tree, with its hash and whether the person trusts it."""

    rel: str
    """Path relative to the root, as recorded in the trust file."""
    path: Path
    data: bytes
    sha256: str
    trusted: bool
    changed: bool
    """Trusted once, but its content changed since."""


def read_project_file(root: Path, rel: str) -> ProjectFile | None:
    """`rel` under `root` if it is a small regular file reached without links, else None.

    A symlinked component, a FIFO, a device or an oversized file raise ConfigError: the person
    should know a file they may rely on is not used.
    """
    data = _read_beneath(root, rel)
    if data is None:
        return None
    digest = hashlib.sha256(data).hexdigest()
    recorded = trusted_hash(root, rel)
    return ProjectFile(rel, root / rel, data, digest, recorded == digest,
                       recorded is not None and recorded != digest)


def _read_beneath(root: Path, rel: str) -> bytes | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    parts = Path(rel).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                child = os.open(part, flags | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file where a dir should be
                raise ConfigError(f"{root / rel} is not used: {exc.strerror} (a link or a "
                                  "special file where a regular file should be)") from exc
            os.close(fd)
            fd = child
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PROJECT_FILE:
            raise ConfigError(f"{root / rel} is not used: not a regular file under "
                              f"{MAX_PROJECT_FILE // 1024} KB")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as stream:
            return stream.read(MAX_PROJECT_FILE + 1)
    finally:
        os.close(fd)


def trusted_hash(root: Path, rel: str) -> str | None:
    """The SHA-256 the person trusted for `rel` of `root`, if any."""
    entry = _load(root).get("files", {}).get(rel)
    digest = entry.get("sha256") if isinstance(entry, dict) else None
    return digest if isinstance(digest, str) and len(digest) == 64 else None


def trust(root: Path, file: ProjectFile) -> None:
    """Record that the person trusts this exact content of `file`."""
    data = _load(root)
    files = data.setdefault("files", {})
    files[file.rel] = {"sha256": file.sha256, "trusted_at": datetime.now(UTC).isoformat(),
                       "by": _user()}
    _save(root, data)


def untrust(root: Path, rel: str) -> bool:
    """Forget the trust in `rel`; whether there was any."""
    data = _load(root)
    found = data.get("files", {}).pop(rel, None) is not None
    if found:
        _save(root, data)
    return found


def _path(root: Path) -> Path:
    return project_dir(root) / TRUST_FILE


def _load(root: Path) -> dict[str, Any]:
    try:
        fd = open_private(_path(root), os.O_RDONLY)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SessionError(f"cannot read the trust records {_path(root)}: {exc}") from exc
    with os.fdopen(fd, "rb") as stream:
        try:
            data = json.loads(stream.read(MAX_PROJECT_FILE))
        except ValueError:
            return {}  # unreadable records trust nothing
    return data if isinstance(data, dict) else {}


def _save(root: Path, data: dict[str, Any]) -> None:
    """Write the records atomically (a temp file renamed over the old one)."""
    directory = ensure_project_dir(root)
    temp = directory / f".{TRUST_FILE}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"version": 1, **data}, out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, directory / TRUST_FILE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
