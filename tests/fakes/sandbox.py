"""An in-memory sandbox for unit tests: satisfies the `Sandbox` protocol and runs nothing.

    box = FakeSandbox({"read_file": ToolResult(ok=True, output="1\tprint('hi')")})
    box.start()
    box.call("read_file", {"path": "a.py"})     # the canned result
    box.call("list_files", {})                  # ToolResult(ok=True, output="list_files ok")
    box.calls                                   # [("read_file", {...}), ("list_files", {})]

A canned answer may also be a function of the arguments (`lambda args: ToolResult(...)`).
`box.preview(tool, args)` answers from `results["preview"]` the same way (its args are
`{"tool": ..., "args": ...}`), else with an empty diff of a new file and no error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

from executor.errors import SandboxError
from executor.messages import ToolResult
from executor.protocols import OutputCallback, SandboxInfo

Answer = ToolResult | Callable[[dict[str, Any]], ToolResult]


class FakeSandbox:
    """Records every call and answers from canned results (default: ok, '<tool> ok')."""

    def __init__(self, results: Mapping[str, Answer] | None = None) -> None:
        self.results: dict[str, Answer] = dict(results or {})
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.timeouts: list[float | None] = []
        self.started = False
        self.stopped = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Mark the sandbox started."""
        self.started, self.stopped = True, False

    def stop(self) -> None:
        """Mark the sandbox stopped."""
        self.started, self.stopped = False, True

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Record the call and return its canned result (its `output` first told `on_output`)."""
        if not self.started:
            raise SandboxError("the fake sandbox is not started")
        self.calls.append((tool, dict(args)))
        self.timeouts.append(timeout)
        answer = self.results.get(tool)
        if on_output is not None and answer is not None and not callable(answer):
            on_output("stdout", answer.output)
        if answer is None:
            return ToolResult(ok=True, output=f"{tool} ok")
        return answer(dict(args)) if callable(answer) else answer.model_copy(deep=True)

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """Record the preview as a call of `preview` and return its canned result."""
        request = {"tool": tool, "args": dict(args)}
        if "preview" in self.results:
            return self.call("preview", request)
        if not self.started:
            raise SandboxError("the fake sandbox is not started")
        self.calls.append(("preview", request))
        path = str(args.get("path", ""))
        return ToolResult(ok=True, output="", meta={
            "path": path, "resolved": path, "symlink": False, "exists": False, "binary": False,
            "sha256_before": None, "error": None,
        })

    def is_alive(self) -> bool:
        """Started and not stopped."""
        return self.started

    @property
    def info(self) -> SandboxInfo:
        """A fixed identity."""
        return SandboxInfo(
            container_id="fake0000", container_name="sandbox-agent-fake", image="fake:latest",
            image_digest="sha256:fake", mount_mode="rw", network="none", user="1000:1000",
        )

    @property
    def tools_called(self) -> list[str]:
        """Names of the tools called, in order."""
        return [tool for tool, _ in self.calls]
