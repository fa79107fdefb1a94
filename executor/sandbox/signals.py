"""The host's reading of a toolbox reply's `signals` (declared in toolbox/wire.py): parsed
once, at the call, into one typed value the sandbox reacts to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Unrestored:
    """A protected mount a command moved that could not be put back."""

    path: str
    error: str


@dataclass(frozen=True, slots=True)
class Signals:
    """What a reply asks of the host, beside the result the model reads."""

    remount: tuple[str, ...] = ()
    """`.git` paths that appeared from outside: a new container, then the call once more."""
    unstoppable: bool = False
    """A process the command started could not be stopped: a new container ends it."""
    unrestored: tuple[Unrestored, ...] = ()
    """Protected mounts left moved: the session ends."""
    undisabled: tuple[str, ...] = ()
    """`.git` entries the toolbox could not disable: renamed after the session."""


NONE = Signals()


def parse(raw: Any) -> Signals:
    """A reply's `signals` (anything else than the declared shape is ignored, field by field)."""
    if not raw or not isinstance(raw, dict):
        return NONE  # the common case: no work per call
    return Signals(
        remount=_strings(raw.get("remount")),
        unstoppable=raw.get("unstoppable") is True,
        unrestored=tuple(Unrestored(str(r.get("path")), str(r.get("error")))
                         for r in _list(raw.get("unrestored")) if isinstance(r, dict)),
        undisabled=_strings(raw.get("undisabled")),
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in _list(value))
