"""The model reads what the network refused in the call's own result.

Clients show a proxy's refusal in their own words (curl: "CONNECT tunnel failed, response
403"; git hides the body), so a call during which the proxy refused a connection gets one line
per refusal appended to its result, with the proxy's reason: what to do is then never lost.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Self

from executor.messages import ToolResult
from executor.network.proxy import Connection
from executor.protocols import OutputCallback, Sandbox, SandboxInfo

MAX_NOTES = 5
"""Refusals named in one result; the rest are counted."""


class Refusals:
    """The connections the proxy refused, in order (filled from the proxy's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Connection] = []

    def add(self, connection: Connection) -> None:
        """Note `connection` when it was not allowed."""
        if connection.decision != "allowed":
            with self._lock:
                self._seen.append(connection)

    def since(self, mark: int) -> tuple[int, list[Connection]]:
        """The count now, and the refusals after `mark`."""
        with self._lock:
            return len(self._seen), self._seen[mark:]


def noted(result: ToolResult, refused: list[Connection]) -> ToolResult:
    """`result` with a line per refusal (at most MAX_NOTES, then how many more)."""
    if not refused:
        return result
    lines = [f"network: {c.decision} {c.host}:{c.port}: {c.reason}" for c in refused[:MAX_NOTES]]
    if len(refused) > MAX_NOTES:
        lines.append(f"network: {len(refused) - MAX_NOTES} more connections refused")
    return result.model_copy(update={"output": result.output.rstrip("\n") + "\n"
                                     + "\n".join(lines)})


class NotedSandbox:
    """Satisfies `Sandbox`: the one given, each call's result noted with what was refused."""

    def __init__(self, inner: Sandbox, refusals: Refusals) -> None:
        self.inner, self.refusals = inner, refusals

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what the wrapped sandbox offers beyond the Protocol

    def start(self) -> None:
        """Start the wrapped sandbox."""
        self.inner.start()

    def stop(self) -> None:
        """Stop the wrapped sandbox."""
        self.inner.stop()

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """The wrapped sandbox's result, and what the network refused meanwhile."""
        mark, _ = self.refusals.since(0)
        result = self.inner.call(tool, args, timeout=timeout, on_output=on_output)
        return noted(result, self.refusals.since(mark)[1])

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """The wrapped sandbox's preview."""
        return self.inner.preview(tool, args)

    def is_alive(self) -> bool:
        """Whether the wrapped sandbox is up."""
        return self.inner.is_alive()

    @property
    def info(self) -> SandboxInfo:
        """The wrapped sandbox's identity."""
        return self.inner.info
