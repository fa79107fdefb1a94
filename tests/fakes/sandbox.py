"""An in-memory sandbox for unit tests: satisfies the `Sandbox` protocol and runs nothing.

    box = FakeSandbox({"read_file": ToolResult(ok=True, output="1\tprint('hi')")})
    box.start()
    box.call("read_file", {"path": "a.py"})     # the canned result
    box.call("list_files", {})                  # ToolResult(ok=True, output="list_files ok")
    box.calls                                   # [("read_file", {...}), ("list_files", {})]

A canned answer may also be a function of the arguments (`lambda args: ToolResult(...)`).
`box.preview(tool, args)` answers from `results["preview"]` the same way (its args are
`{"tool": ..., "args": ...}`), else with an empty diff of a new file and no error.

With `files` it is also a copy workspace over those files (path -> bytes): `write_file`
changes them, `copy_manifest()` says what the start copied, and the host operations
`manifest` and `read_files` answer from them as the toolbox would.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from executor.errors import SandboxError
from executor.lifecycle import StartStop
from executor.messages import ToolResult
from executor.protocols import OutputCallback, SandboxInfo
from executor.workspace.manifest import Entry, Manifest

Answer = ToolResult | Callable[[dict[str, Any]], ToolResult]


class FakeSandbox(StartStop):
    """Records every call and answers from canned results (default: ok, '<tool> ok')."""

    def __init__(self, results: Mapping[str, Answer] | None = None, *,
                 files: dict[str, bytes] | None = None) -> None:
        self.results: dict[str, Answer] = dict(results or {})
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.timeouts: list[float | None] = []
        self.started = False
        self.stopped = False
        self.files = files
        self.copied: Manifest | None = None
        self.reattached = False

    def start(self) -> None:
        """Mark the sandbox started (and, with files, take the copy)."""
        self.started, self.stopped = True, False
        if self.files is not None and self.copied is None:
            self.copied = manifest_of(self.files)

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
        if answer is None and self.files is not None and tool in _FILE_OPS:
            return _FILE_OPS[tool](self.files, args)
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
            container_id="fake0000", container_name="sandbox-agent-fa4efa4efa4e",
            image="fake:latest", image_digest="sha256:" + "f" * 64, mount_mode="rw",
            network="none", user="1000:1000",
            workspace="copy" if self.files is not None else "bind",
        )

    def copy_manifest(self) -> Manifest | None:
        """What the start copied (None: not a copy workspace)."""
        return self.copied

    @property
    def copy_notes(self) -> list[str]:
        """Nothing is ever left out of a fake copy."""
        return []

    @property
    def tools_called(self) -> list[str]:
        """Names of the tools called, in order."""
        return [tool for tool, _ in self.calls]


def manifest_of(files: Mapping[str, bytes]) -> Manifest:
    """Files (and their directories) as entries."""
    found: Manifest = {}
    for path, data in files.items():
        parts = path.split("/")
        for i in range(1, len(parts)):
            found["/".join(parts[:i])] = Entry("dir", 0o755)
        found[path] = Entry("file", 0o644, len(data), hashlib.sha256(data).hexdigest())
    return found


def _write(files: dict[str, bytes], args: dict[str, Any]) -> ToolResult:
    data = str(args["content"]).encode()
    files[str(args["path"])] = data
    return ToolResult(ok=True, output=f"wrote {len(data)} bytes",
                      meta={"sha256_after": hashlib.sha256(data).hexdigest()})


def _manifest(files: dict[str, bytes], args: dict[str, Any]) -> ToolResult:
    rows = [[path, e.kind, e.mode, e.size, e.sha256, e.target]
            for path, e in sorted(manifest_of(files).items())]
    return ToolResult(ok=True, output=f"{len(rows)} entries",
                      meta={"entries": rows, "skipped": [], "complete": True})


def _read_files(files: dict[str, bytes], args: dict[str, Any]) -> ToolResult:
    found = []
    for path, offset, length in args["files"]:
        data = files.get(path)
        if data is None:
            found.append({"path": path, "error": "No such file"})
        else:
            chunk = data[offset:offset + length]
            found.append({"path": path, "offset": offset, "size": len(data),
                          "length": len(chunk), "data": base64.b64encode(chunk).decode()})
    return ToolResult(ok=True, output=f"{len(found)} files", meta={"files": found})


_FILE_OPS: dict[str, Callable[[dict[str, bytes], dict[str, Any]], ToolResult]] = {
    "write_file": _write, "manifest": _manifest, "read_files": _read_files,
}
