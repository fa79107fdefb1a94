"""The audit format's values: time stamps, the audit directory, fields made JSON-native and
tool arguments capped (executor/audit.py writes the records; these shape what goes in them)."""

from __future__ import annotations

import enum
import getpass
import hashlib
import math
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Any

from executor.state import project_dir


def utc_now() -> datetime:
    """The current time in UTC (the default clock)."""
    return datetime.now(UTC)


def format_ts(moment: datetime) -> str:
    """ISO-8601 UTC with microseconds and a `Z` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_audit_dir(root: Path) -> Path:
    """`<project state dir>/audit` (not created)."""
    return project_dir(root) / "audit"


def audit_dir_for(root: Path, override: Path | str | None = None) -> Path:
    """The audit directory for `root`: `override` (relative to the working dir) or the default."""
    if override is None or str(override) == "":
        return default_audit_dir(root)
    return Path(override).expanduser().absolute()


def _plain(value: Any) -> Any:
    """`value` as JSON-native data (what is hashed is exactly what will be read back)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # most values: at once
        return value
    if kind is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        return _plain(dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, datetime):
        return format_ts(value)
    if isinstance(value, PurePath | bytes | bytearray):
        return os.fsdecode(value) if isinstance(value, PurePath) else bytes(value).hex()
    return str(value)


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (e.g. an arbitrary uid in a container)
        return str(os.getuid())


ARGUMENT_MAX_BYTES = 16 * 1024
"""A longer string argument (a write's content) is kept as its head, length and SHA-256."""


def _capped(arguments: Mapping[str, Any], redact: Callable[[str], str]) -> dict[str, Any]:
    """Tool arguments with long strings cut: the model chooses their size, the log must not.

    Redacted before the cut, so a secret across the cut cannot leave its head behind.
    """
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else b""
        if len(data) <= ARGUMENT_MAX_BYTES:
            out[key] = value
            continue
        kept = redact(value).encode("utf-8", "surrogatepass")
        head = kept[:ARGUMENT_MAX_BYTES].decode("utf-8", "ignore")
        digest = hashlib.sha256(data).hexdigest()
        out[key] = f"{head}[... {len(data)} bytes in all, sha256 {digest}]"
    return out
