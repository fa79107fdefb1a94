"""The hook bus: the agent reports what it does as events; any number of subscribers listen.

A subscriber that raises is logged and never breaks the run, unless it subscribed as
`critical` (the audit log with --audit-required): then its error stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

EventKind = Literal[
    "run_start", "token", "model_request", "tool_call", "tool_output", "tool_result", "retry",
    "complete", "error", "warning", "progress", "notice", "sandbox_start", "instructions",
    "thinking", "skills", "child_event",
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
        self._subscribers: list[tuple[frozenset[str] | None, Subscriber, bool]] = []

    def subscribe(self, fn: Subscriber, *kinds: EventKind, critical: bool = False) -> Subscriber:
        """Call `fn` for events of `kinds` (all when none given); `critical` errors propagate."""
        self._subscribers.append((frozenset(kinds) or None, fn, critical))
        return fn

    def unsubscribe(self, fn: Subscriber) -> None:
        """Stop calling `fn`."""
        self._subscribers = [entry for entry in self._subscribers if entry[1] is not fn]

    def emit(self, kind: EventKind, **data: Any) -> Event:
        """Deliver an event to every interested subscriber."""
        event = Event(kind=kind, data=data)
        for kinds, fn, critical in list(self._subscribers):
            if kinds is None or kind in kinds:
                try:
                    fn(event)
                except Exception:
                    if critical:
                        raise
                    log.exception("hook subscriber %r failed on %s", fn, kind)
        return event
