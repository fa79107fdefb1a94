"""The wire contract: what a request may hold and what every reply and record looks like."""

from __future__ import annotations

import json

from .contract import BOOL, INT, LIST, NUMBER, OBJECT, STR, TOOL_ARGS

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Mapping
    from typing import Any, Optional, Protocol, TypedDict, TypeVar, Union

    T = TypeVar("T")

    class Result(TypedDict):
        """What a tool call answers (a response, once "id" is added)."""

        ok: bool
        output: str
        meta: dict[str, Any]

    class Signals(TypedDict, total=False):
        """A reply's `signals`: what the host must do about it (the meta records they come
        from stay in meta, for the audit trail; `signals_of` derives them)."""

        remount: list[str]  # .git that appeared from outside: a new container, the call again
        unstoppable: bool  # a process the command started could not be stopped
        unrestored: list[MountRecord]  # protected mounts moved and not put back: the end
        undisabled: list[str]  # .git entries the toolbox could not disable: renamed after

    class Response(Result):
        id: int | None
        signals: Signals

    class Sink(Protocol):
        """Where _pump puts what a pipe gave: _Capture, _Lines or _Tee."""

        def add(self, chunk: bytes) -> None: ...

    class Writer(Protocol):
        """Our protocol stream: stdout's buffer, or Signed around it."""

        def write(self, line: bytes, /) -> object: ...

        def flush(self) -> object: ...

    class Reader(Protocol):
        """Where requests come from: stdin's buffer, or Verified around the channel's `in`."""

        def readline(self) -> bytes: ...

    class Quarantined(TypedDict):
        """An entry of meta["git_quarantined"]: a .git or repository look-alike disabled."""

        path: str
        kind: str
        renamed_to: str | None

    class QuarantineRecord(Quarantined, total=False):
        error: str

    class WriteMeta(TypedDict):
        """The meta of write_file and edit_file."""

        bytes: int
        sha256_before: str | None
        sha256_after: str
        lines_changed: int
        created: bool

    class WriteRecord(WriteMeta, total=False):
        git_quarantined: list[QuarantineRecord]

    class PreviewFacts(TypedDict):
        """The meta of a preview."""

        path: str
        resolved: str | None
        symlink: bool
        exists: bool
        binary: bool
        sha256_before: str | None
        sha256_after: str | None
        error: str | None

    class ChangeFields(TypedDict):
        """An entry of meta["changes"] / meta["outside_changes"]."""

        path: str
        change: str
        kind: str
        sha256_before: str | None
        sha256_after: str | None
        size_before: int | None
        size_after: int | None
        mode_before: str | None
        mode_after: str | None
        target: str | None

    class ChangeRecord(ChangeFields, total=False):
        unhashed: str

    class SetidFields(TypedDict):
        """An entry of meta["setid_cleared"]."""

        path: str
        removed: list[str]
        mode_before: str | None

    class SetidRecord(SetidFields, total=False):
        mode_after: str | None
        error: str

    class MountFields(TypedDict):
        """An entry of meta["protected_restored"]."""

        path: str
        moved_to: str

    class MountRecord(MountFields, total=False):
        replaced_by: str
        error: str

    class ChunkFields(TypedDict):
        """An entry of read_files' meta["files"]: a chunk, or an error."""

        path: str

    class Chunk(ChunkFields, total=False):
        error: str
        offset: int
        size: int
        length: int
        data: str

    class RootIdentity(TypedDict):
        dev: int
        ino: int
        mtime_ns: int

    # lstat fields kept per path: mode, size, mtime_ns, ctime_ns, ino, blocks, nlink (_entry)
    Lstat = tuple[int, int, int, int, int, int, int]
    Walk = tuple[dict[str, Lstat], bool, list[str], list[str]]  # see _walk
    Reopened = list[tuple[str, int, int]]  # (path, inode, mode) of dirs opened for a walk
    Identity = tuple[str, int, Optional[str]]  # what makes a .git entry the same one
    Change = tuple[str, str]  # (path, "created" | "modified" | "deleted" | "mode" | "type")
    Hit = tuple[str, int, str]  # a search result: path, line number, text
    Hits = list[Union[Hit, str]]  # a trailing str: why the search is incomplete
    Spec = dict[str, tuple[str, bool]]  # argument name -> (kind, required)
    ManifestEntry = list[Union[str, int, None]]  # [path, kind, mode, size, sha256, target]
    pass

VERSION = 1


class ToolError(Exception):
    """A failed tool call; the message is what the model reads."""

    def __init__(self, message: str, **meta: Any) -> None:
        super().__init__(message)
        self.meta = meta


def ok(output: str, **meta: Any) -> Result:
    """A successful result."""
    return {"ok": True, "output": output, "meta": meta}


def fail(output: str, **meta: Any) -> Result:
    """A failed result."""
    return {"ok": False, "output": output, "meta": meta}


def signals_of(meta: Mapping[str, Any]) -> Signals:
    """The signals a reply carries, from the meta records that report them."""
    found: Signals = {}
    if meta.get("remount_needed"):
        found["remount"] = meta["remount_needed"]
    if meta.get("processes_unstopped"):
        found["unstoppable"] = True
    unrestored = [r for r in meta.get("protected_restored") or () if r.get("error")]
    if unrestored:
        found["unrestored"] = unrestored
    undisabled = [r["path"] for r in meta.get("git_quarantined") or () if r.get("error")]
    if undisabled:
        found["undisabled"] = undisabled
    return found


# -- requests ---------------------------------------------------------------------------------

SPECS: dict[str, Spec] = {tool: {name: (arg.kind, arg.required) for name, arg in args.items()}
                         for tool, args in TOOL_ARGS.items()}
"""Each tool's arguments: name -> (kind, required), from contract.TOOL_ARGS (the one
declaration, which the host's pydantic models are built from too)."""
PREVIEW_SPEC: Spec = {"tool": (STR, True), "args": (OBJECT, True)}
HOST_OP_SPECS: dict[str, Spec] = {
    "baseline": {},
    "manifest": {"since_baseline": (BOOL, False)},
    "read_files": {"files": (LIST, True)},
    "snapshot": {"path": (STR, True), "max_bytes": (INT, False)},
}


def _is_kind(value: object, kind: str) -> bool:
    if kind == LIST:
        return isinstance(value, list)
    if kind == STR:
        return isinstance(value, str)
    if kind == OBJECT:
        return isinstance(value, dict)
    if kind == BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (kind == NUMBER and isinstance(value, float))


def validate(tool: str, spec: Spec, args: object) -> dict[str, Any]:
    """Keyword arguments for a tool, or a ToolError naming what is wrong."""
    if not isinstance(args, dict):
        raise ToolError("args must be a JSON object")
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise ToolError(f"unknown argument{'s' * (len(unknown) > 1)} for {tool}: "
                        f"{', '.join(unknown)}; allowed: {', '.join(spec)}")
    clean: dict[str, Any] = {}
    for name, (kind, required) in spec.items():
        value = args.get(name)
        if value is None:
            if required:
                raise ToolError(f"missing required argument '{name}'")
        elif not _is_kind(value, kind):
            raise ToolError(f"argument '{name}' must be {kind}")
        else:
            clean[name] = value
    return clean


def send(out: Writer, message: Mapping[str, object]) -> None:
    """Write one protocol line."""
    out.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
    out.flush()
