"""The hook bus: the agent reports what it does as events; any number of subscribers listen.

A subscriber that raises is reported once on the logger and never breaks the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

EventKind = Literal[
    "run_start", "token", "model_request", "tool_call", "tool_result", "retry", "complete",
    "error", "warning",
]


class Event(BaseModel):
    """Something that happened during a run."""

    kind: EventKind
    data: dict[str, Any] = Field(default_factory=dict)
    at: float = Field(default_factory=time.time)
    """Unix time the event was emitted."""


Subscriber = Callable[[Event], None]


class HookBus:
    """Fan-out of events to subscribers, each optionally filtered by kind."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[frozenset[str] | None, Subscriber]] = []

    def subscribe(self, fn: Subscriber, *kinds: EventKind) -> Subscriber:
        """Call `fn` for events of `kinds` (all events when none are given)."""
        self._subscribers.append((frozenset(kinds) or None, fn))
        return fn

    def unsubscribe(self, fn: Subscriber) -> None:
        """Stop calling `fn`."""
        self._subscribers = [(k, f) for k, f in self._subscribers if f is not fn]

    def emit(self, kind: EventKind, **data: Any) -> Event:
        """Deliver an event to every interested subscriber; failures are logged, not raised."""
        event = Event(kind=kind, data=data)
        for kinds, fn in list(self._subscribers):
            if kinds is None or kind in kinds:
                try:
                    fn(event)
                except Exception:  # a broken subscriber must never break the run
                    log.exception("hook subscriber %r failed on %s", fn, kind)
        return event
