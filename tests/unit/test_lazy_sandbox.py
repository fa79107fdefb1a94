"""LazySandbox: the container starts when first needed, or in the background; never twice."""

from __future__ import annotations

import threading
import time

import pytest

from executor.errors import SandboxError
from executor.sandbox.lazy import LazySandbox
from tests.fakes.sandbox import FakeSandbox


class SlowSandbox(FakeSandbox):
    """A fake whose start takes a while and is counted."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        super().__init__()
        self.delay, self.fail, self.starts = delay, fail, 0
        self.threads: list[str] = []

    def start(self) -> None:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise SandboxError("no engine")
        self.starts += 1
        super().start()


def test_nothing_starts_until_a_call_needs_it() -> None:
    inner, starts = SlowSandbox(), []
    lazy = LazySandbox(inner, starts.append)
    assert not inner.started and not lazy.is_alive()
    lazy.call("read_file", {"path": "a"})
    lazy.call("read_file", {"path": "b"})
    assert inner.starts == 1 and len(starts) == 1 and inner.tools_called == ["read_file"] * 2
    lazy.stop()
    assert inner.stopped


def test_a_warm_up_starts_it_in_the_background_and_the_call_waits() -> None:
    inner, starts = SlowSandbox(delay=0.2), []
    lazy = LazySandbox(inner, starts.append)
    lazy.warm_up(0)
    lazy.call("list_files", {})
    assert inner.starts == 1 and inner.threads == ["sandbox-warm-up"]
    assert len(starts) == 1 and starts[0] >= 0.19  # announced on the caller's thread
    lazy.stop()


def test_stop_before_a_delayed_warm_up_starts_nothing() -> None:
    inner = SlowSandbox()
    lazy = LazySandbox(inner)
    lazy.warm_up(5.0)
    began = time.monotonic()
    lazy.stop()
    assert time.monotonic() - began < 1 and inner.starts == 0 and inner.threads == []


def test_a_failed_warm_up_is_raised_where_the_sandbox_is_needed() -> None:
    lazy = LazySandbox(SlowSandbox(fail=True))
    lazy.warm_up(0)
    with pytest.raises(SandboxError, match="no engine"):
        lazy.call("read_file", {"path": "a"})
    lazy.stop()
