"""Requests in, replies out: the tool table and the serving loop."""

from __future__ import annotations

import json
import os
import sys
import time

from .host_ops import _identity, op_baseline, op_manifest, op_read_files, op_snapshot
from .limits import EXIT_ORPHANED
from .paths import os_error_text
from .procs import _Progress
from .tools.listing import tool_list_files
from .tools.preview import tool_preview
from .tools.read import tool_read_file
from .tools.search import tool_search_files
from .tools.shell import tool_run_shell_command
from .tools.write import tool_edit_file, tool_write_file
from .wire import (
    HOST_OP_SPECS,
    PREVIEW_SPEC,
    SPECS,
    VERSION,
    ToolError,
    fail,
    ok,
    send,
    signals_of,
    validate,
)

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable

    from .context import Context
    from .wire import Reader, Response, Result, Spec, Writer
    pass

TOOLS: dict[str, tuple[Callable[..., Result], Spec]] = {
    "read_file": (tool_read_file, SPECS["read_file"]),
    "write_file": (tool_write_file, SPECS["write_file"]),
    "edit_file": (tool_edit_file, SPECS["edit_file"]),
    "search_files": (tool_search_files, SPECS["search_files"]),
    "list_files": (tool_list_files, SPECS["list_files"]),
    "run_shell_command": (tool_run_shell_command, SPECS["run_shell_command"]),
}
HOST_OPS: dict[str, tuple[Callable[..., Result], Spec]] = {
    "baseline": (op_baseline, HOST_OP_SPECS["baseline"]),
    "manifest": (op_manifest, HOST_OP_SPECS["manifest"]),
    "read_files": (op_read_files, HOST_OP_SPECS["read_files"]),
    "snapshot": (op_snapshot, HOST_OP_SPECS["snapshot"]),
}


def call_tool(ctx: Context, tool: str, args: object) -> Result:
    """One tool call as a result dict; nothing a request holds can raise out of here."""
    try:
        if tool == "ping":
            return ok("pong")
        if tool == "preview":
            return tool_preview(ctx, **validate(tool, PREVIEW_SPEC, args))
        entry = TOOLS.get(tool) or HOST_OPS.get(tool)
        if entry is None:
            raise ToolError(f"unknown tool '{tool}'; available: {', '.join(TOOLS)}")
        handler, spec = entry
        return handler(ctx, **validate(tool, spec, args))
    except ToolError as exc:
        return fail(str(exc), **exc.meta)
    except OSError as exc:
        return fail(os_error_text(ctx, exc), errno=exc.errno)
    except Exception as exc:
        import traceback  # only when something went wrong: not at every start

        traceback.print_exc()
        return fail(f"internal error in {tool}: {type(exc).__name__}: {exc}")


def respond(ctx: Context, line: str | bytes,
            out: Writer | None = None) -> tuple[Response, bool]:
    """(response, stop) for one request line; progress lines (when asked for) go to `out`."""
    started = time.perf_counter()
    error: str | None
    try:
        request = json.loads(line)
    except Exception as exc:  # not JSON, bad UTF-8, absurd nesting
        request, error = None, f"bad request: not valid JSON ({str(exc)[:200]})"
    else:
        error = _request_error(request)
    rid = request.get("id") if isinstance(request, dict) else None
    rid = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
    stop = not error and request["tool"] == "shutdown"
    if error:
        result = fail(error)
    elif stop:
        result = ok("bye")
    else:
        args = request.get("args")
        wants = request.get("progress") is True
        ctx.progress = _Progress(out, rid) if out is not None and wants else None
        try:
            result = call_tool(ctx, request["tool"], {} if args is None else args)
        finally:
            ctx.progress = None
    result["meta"]["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return {"id": rid, **result, "signals": signals_of(result["meta"])}, stop


def _request_error(request: object) -> str | None:
    if not isinstance(request, dict):
        return "bad request: a request is a JSON object"
    if not isinstance(request.get("tool"), str):
        return "bad request: missing 'tool' (a string)"
    return None


def serve(ctx: Context, inp: Reader, out: Writer, filtered: str = "not given") -> int:
    """Answer request lines until EOF or shutdown."""
    send(out, {"ready": True, "pid": os.getpid(), "version": VERSION,
               "guarded": getattr(ctx, "guarded", False),
               "python": ".".join(map(str, sys.version_info[:3])), "rg": bool(ctx.rg),
               "filter": filtered, "root": _identity(ctx.root), "channel": ctx.channel})
    while True:
        line = inp.readline()
        if not line:
            return 0
        response, stop = respond(ctx, line, out)
        if ctx.orphaned:  # nobody reads the answer: what the command left is gone already
            return EXIT_ORPHANED
        send(out, response)
        if stop:
            return 0
