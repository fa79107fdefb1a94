"""The one retry policy for every model HTTP request (tenacity).

What is retried, and how often:

    timeout, HTTP 429, HTTP 5xx          up to `max_attempts` (1 + Settings.max_retries: 3)
    connection refused / dropped         up to `connect_attempts` (3, i.e. retried at most twice)
    any other HTTP 4xx, unusable payload never
    a reply past SANDBOX_AGENT_MAX_REPLY_BYTES never (the same request would most likely get
                                         the same runaway reply; limits.py)

Waits grow exponentially from `base_delay` (Settings.retry_base_delay) with jitter; a
`Retry-After` header is obeyed instead. Every wait is capped at `max_delay`. Each retry
emits a `retry` event (attempt, delay, reason, url) on the HookBus before sleeping.

The HTTP layer (`_http.py`) signals a retryable failure by raising `Retryable`, which
carries the already translated error; `call_with_retry` raises that error once the
attempts are used up, so `Retryable` never leaves this package.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from executor.config import Settings
from executor.errors import ModelError
from executor.hooks import HookBus, RetryEvent

log = logging.getLogger(__name__)

T = TypeVar("T")
RetryKind = Literal["transient", "connect"]


@dataclass(frozen=True)
class RetryPolicy:
    """How model requests are retried."""

    max_attempts: int = 3
    """Attempts for timeouts, 429 and 5xx (1 disables retries)."""
    base_delay: float = 0.5
    """First backoff delay in seconds; doubles per attempt, plus up to as much jitter."""
    max_delay: float = 30.0
    """Cap on any single wait, including one asked for by `Retry-After`."""
    connect_attempts: int = 3
    """Attempts when the server refuses or drops the connection (never more than max_attempts)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        """The policy configured by SANDBOX_AGENT_MAX_RETRIES / SANDBOX_AGENT_RETRY_BASE_DELAY."""
        # The setting counts retries (0: none), the policy counts attempts.
        return cls(max_attempts=settings.max_retries + 1, base_delay=settings.retry_base_delay)

    @classmethod
    def once(cls) -> RetryPolicy:
        """A single attempt (for cheap probes whose failure is not an error)."""
        return cls(max_attempts=1, connect_attempts=1)


class Retryable(Exception):
    """A failed attempt that may be retried; `error` is what the caller sees if it is not."""

    def __init__(
        self, error: ModelError, kind: RetryKind, reason: str, retry_after: float | None = None
    ) -> None:
        super().__init__(reason)
        self.error = error
        self.kind = kind
        self.reason = reason
        self.retry_after = retry_after


def call_with_retry(
    attempt: Callable[[], T], policy: RetryPolicy, *, hooks: HookBus | None, url: str
) -> T:
    """Run `attempt` under `policy`; raise the translated error of the last failure."""
    retrying = Retrying(
        retry=retry_if_exception_type(Retryable),
        stop=_stop(policy),
        wait=_wait(policy),
        before_sleep=_announce(hooks, url),
        reraise=True,
    )
    try:
        return retrying(attempt)
    except Retryable as failure:
        raise failure.error from failure.__cause__


def _failure(state: RetryCallState) -> Retryable | None:
    exc = state.outcome.exception() if state.outcome else None
    return exc if isinstance(exc, Retryable) else None


def _stop(policy: RetryPolicy) -> Callable[[RetryCallState], bool]:
    connect_limit = min(policy.connect_attempts, policy.max_attempts)

    def stop(state: RetryCallState) -> bool:
        failure = _failure(state)
        limit = connect_limit if failure and failure.kind == "connect" else policy.max_attempts
        return state.attempt_number >= limit

    return stop


def backoff(policy: RetryPolicy, attempt: int) -> float:
    """Wait after failed `attempt` (1-based): base * 2^(attempt-1) plus up to base of jitter."""
    delay = policy.base_delay * 2.0 ** (attempt - 1) + random.uniform(0, policy.base_delay)
    return min(delay, policy.max_delay)


def _wait(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    def wait(state: RetryCallState) -> float:
        failure = _failure(state)
        if failure and failure.retry_after is not None:
            return max(0.0, min(failure.retry_after, policy.max_delay))
        return backoff(policy, state.attempt_number)

    return wait


def _announce(hooks: HookBus | None, url: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        failure = _failure(state)
        reason = failure.reason if failure else "unknown failure"
        delay = state.next_action.sleep if state.next_action else 0.0
        log.info("retrying %s in %.2fs after attempt %d: %s", url, delay, state.attempt_number,
                 reason)
        if hooks is not None:
            hooks.emit(RetryEvent(attempt=state.attempt_number, delay=delay, reason=reason,
                                  url=url))

    return before_sleep
