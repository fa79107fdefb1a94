"""A sandbox started when it is first needed, or in the background while the model thinks.

Starting a hardened container and its toolbox takes about half a second; a run whose model
answers without calling a tool needs neither. `LazySandbox` wraps any `Sandbox`: the first
`call`, `preview` or `info` starts it (on the caller's thread), `warm_up(delay)` starts it on a
background thread after `delay` seconds unless the run is over by then, and `stop` cancels a
warm-up that has not begun, waits for one that has, and stops what was started.

`on_start` runs once, on the thread that first needs the sandbox (never the background one),
so hook events and audit records about the start come in order with the rest of the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Self

from executor.lifecycle import StartStop
from executor.messages import ToolResult
from executor.protocols import OutputCallback, Sandbox, SandboxInfo

OnStart = Callable[[float], None]
"""Called with the seconds the start took (0 when a warm-up had already finished)."""


class LazySandbox(StartStop):
    """Satisfies `Sandbox`; starts the wrapped one on first use."""

    def __init__(self, sandbox: Sandbox, on_start: OnStart | None = None) -> None:
        self.inner = sandbox
        self._on_start = on_start
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cancelled = threading.Event()
        self._error: BaseException | None = None
        self._started = False
        self._announced = False
        self._took = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self  # started on first use (or by a warm-up), not here; `__exit__` stops it

    @property
    def started(self) -> bool:
        """Whether the wrapped sandbox is up (a warm-up in progress does not count)."""
        return self._started

    def start(self) -> None:
        """Start it now (on this thread), or wait for a warm-up in progress."""
        self.ensure()

    def warm_up(self, delay: float = 0.0) -> None:
        """Start it on a background thread in `delay` seconds, unless needed or stopped first."""
        if self._thread is not None or self._started:
            return
        self._thread = threading.Thread(target=self._warm, args=(delay,), daemon=True,
                                        name="sandbox-warm-up")
        self._thread.start()

    def _warm(self, delay: float) -> None:
        if self._cancelled.wait(delay):
            return
        with self._lock:
            if self._cancelled.is_set() or self._started:
                return
            try:
                self._start_inner()
            except BaseException as exc:  # re-raised where the sandbox is needed
                self._error = exc

    def _start_inner(self) -> None:
        began = time.monotonic()
        self.inner.start()
        self._took, self._started = time.monotonic() - began, True

    def ensure(self) -> None:
        """The wrapped sandbox, started: a warm-up's error is raised here."""
        if not self._announced:
            self._cancelled.set()  # a warm-up still waiting for its delay need not wait
            self._join()
            with self._lock:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                if not self._started:
                    self._start_inner()
            self._announced = True
            if self._on_start is not None:
                self._on_start(self._took)

    def _join(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def stop(self) -> None:
        """Cancel a warm-up not yet begun, wait for one under way, stop what was started."""
        self._cancelled.set()
        self._join()
        self._thread = None
        with self._lock:
            self._started = False
            self.inner.stop()

    # -- the work ----------------------------------------------------------------------------

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run one built-in tool, starting the sandbox first when needed."""
        self.ensure()
        if on_output is None:
            return self.inner.call(tool, args, timeout=timeout)
        return self.inner.call(tool, args, timeout=timeout, on_output=on_output)

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The toolbox's preview of a write, starting the sandbox first when needed."""
        self.ensure()
        return self.inner.preview(tool, args)

    def is_alive(self) -> bool:
        """Started and alive (a sandbox not started yet is not alive)."""
        return self._started and self.inner.is_alive()

    @property
    def info(self) -> SandboxInfo:
        """Identity of the running sandbox (starting it when needed)."""
        self.ensure()
        return self.inner.info
