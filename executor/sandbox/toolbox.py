"""sandbox-agent toolbox: the six built-in tools, served as JSON lines over stdin/stdout.

One stdlib-only file that runs on python3 >= 3.9, inside the session's container (the host
exec's it with `sys.argv = ["toolbox", *args]`) or directly: `python3 toolbox.py --root DIR`.
Every tool semantic (path checks, caps, timeouts) lives here; the host only relays.

Protocol (version 1)
    argv      --root PATH (/workspace)  --default-timeout S (60)  --max-output BYTES (30000)
              --hidden NAME (repeatable; default .sandbox-agent)  --readonly-dir NAME (repeatable)
              --no-rg (or env TOOLBOX_NO_RG=1: force the Python search)  --kill-strays (see below)
              --disk-budget BYTES (0: off)  --min-free BYTES (256 MiB)  --git-guard
              --no-track (no change tracking, set-id sweep, .git quarantine or disk budget:
              for measurements only)
              --seccomp-filter B64 (see "Seccomp" below)
              --sign: the first stdin line after the source is a hex key; every line we write
              is then `<first 32 hex of HMAC-SHA256(key, line)> <line>`
              --channel DIR (with --sign): DIR holds two FIFOs the host made and holds open,
              `in` and `out`. Opened, we say {"channel": "fifo"} on stdout and then read
              requests from `in` and write every other line to `out`, leaving the engine's
              stream relay (see "channel" in the code); else we stay on stdin/stdout
    start     {"ready": true, "pid": N, "version": 1, "guarded": bool, "python": "3.x.y",
              "rg": bool, "filter": "installed" | "not given" | why not, "root": {...},
              "channel": "fifo" | "stdio" | "stdio: why not fifo"}
              ("guarded": whether the toolbox made itself non-dumpable; "rg" is whether
              search_files will use ripgrep; "root": {"dev", "ino", "mtime_ns"} of --root, so
              the host can tell whether the engine mounted the directory it meant (another
              machine's disk is not it), null when it cannot be read)
    request   {"id": int, "tool": "name", "args": {...}}   one line
              (+ "progress": true: stream a running command's output, see below)
    response  {"id": same, "ok": bool, "output": "text for the model", "meta": {"duration_ms": ..}}
    progress  only when the request asked for it, and only for run_shell_command: before its
              response, lines {"id": same, "progress": {"stream": "stdout"|"stderr", "text": str,
              "dropped": int}} with what the command wrote since the previous one (decoded as
              UTF-8, bad bytes replaced). At most one line a stream every 0.2 s, each with at
              most the newest 4096 characters ("dropped": how many older ones were skipped), and
              4 MiB of text a call; then nothing more until the response, which has the output
              as always. A line with "progress" is never a response.
              A line that is not JSON, not an object or has no string "tool" gets ok false and
              "bad request: ..."; its id is echoed when the object had one, else null.
    special   ping -> "pong"; shutdown -> ok, then exit 0; EOF on stdin -> exit 0.
    preview   {"tool": "preview", "args": {"tool": "write_file"|"edit_file", "args": {...}}}
              -> ok, "output" the unified diff the call would make (new file: from /dev/null;
              binary, non-UTF-8 or over 4 MB: sizes and sha256 instead), "meta" {"path",
              "resolved" (real path relative to the root), "symlink", "exists", "binary",
              "sha256_before" (null: no file), "sha256_after" (of what the call would
              write; null on error), "error" (why the call would fail, or null)}.
              Same path checks as the call; writes nothing. For the host's approval prompt.
    approved  write_file and edit_file take "expect_sha256": the sha256_before the person was
              shown ("absent": no file). If the file is not that now, nothing is written:
              "... changed since it was approved; nothing was written". And
              "expect_sha256_after": the sha256_after shown; if the call would write other
              bytes, nothing is written: "... would not be written as it was shown ...".

Host operations (the host calls these; the model is never offered them)
    manifest    {} -> meta "entries": [[path, kind, mode, size, sha256, target], ...] for every
                entry under the root except hidden names and what is inside .git and
                .git.quarantined-* entries (listed in "skipped"); every regular file is hashed.
                "complete" is false when the walk stopped at its entry limit.
    read_files  {"files": [[path, offset, length], ...]} -> meta "files": [{"path", "offset",
                "size", "data" (base64)} | {"path", "error"}]; at most 16 MiB a call. Paths are
                relative; no link is followed, in the last component or on the way.
    snapshot    {"path", "max_bytes"} -> meta {"resolved", "exists", "kind", "mode", "size",
                "sha256", "data" (base64, when not over max_bytes)}: the file a write_file or
                edit_file of that path would change, as it is now (the host keeps it for undo).

Caps and choices
    paths         relative to the root, or absolute inside it; symlinks are followed and must stay
                  inside. Hidden names are refused at the top level; writes anywhere under a
                  --readonly-dir name (nested .git dirs too) are refused, whether the name is in
                  the path as given, in the resolved path or in a symlink met on the way.
    read_file     2000 lines or 100,000 characters per call, lines cut at 2000 characters; a
                  binary file (NUL in its first 8 KB) is ok false with "binary file (N bytes)".
    search_files  max_results 1..1000 (default 100), output cut at 100,000 characters; ripgrep
                  searches hidden files but not .git or hidden names, and honours .gitignore;
                  the Python fallback does not read ignore files and skips files over 64 MB.
                  Results are sorted by path, then line.
    list_files    depth 3 by default (20 with a glob), 1000 entries; .git and hidden names skipped.
    run_shell     head 2/3 + tail 1/3 of --max-output per stream; a command writing more than
                  20 MB in total is killed. A call lasts until the command's output pipes close
                  (or the timeout): background jobs that keep them open hold the call. When a call
                  ends, everything it started is killed: background jobs do not survive a call.
                  ok = exit code 0, no timeout, no output overflow, and no fork refused at the
                  pids limit or process OOM-killed meanwhile (read from our cgroup's pids.events
                  and memory.events / memory.oom_control, when there are such files).
    writes        write_file / edit_file refuse a write that takes the project past the disk
                  budget, or the file system below --min-free (meta disk_budget_exceeded).

Change tracking (run_shell_command)
    index         rel path -> lstat (type, mode, size, mtime_ns, ctime_ns, ino, blocks), sha256 of
                  regular files, symlink targets. Built by the first command's before-walk (not
                  at start: starting stays fast). Walks do not enter .git or .git.quarantined-*
                  entries (they record them) and skip hidden top-level names. Re-walks lstat
                  everything and hash only what is new or changed: files up to 64 MiB each and
                  512 MiB a walk; others get sha256 null and "unhashed" (a reason), and count as
                  modified when size or mtime differ. A walk stops at 200,000 entries.
    meta          "changes": [{"path", "change": created|modified|deleted|mode|type,
                  "kind": file|dir|symlink|other, "sha256_before", "sha256_after", "size_before",
                  "size_after", "mode_before", "mode_after" ("0644"; null when absent),
                  "target" (symlinks), ["unhashed"]}] sorted by path, at most 500;
                  "changes_total", "changes_truncated", "changes_incomplete" (the walk stopped).
                  "outside_changes" (+ _total, _truncated), same shape, when the before-walk
                  found changes made between calls (by the person on the host); write_file and
                  edit_file update the index, so theirs are not among them.
                  "setid_cleared": [{"path", "removed": ["set-uid", "set-gid"], "mode_before",
                  "mode_after" | "error"}]: set-id bits a command added to a regular file are
                  removed (fd-based, no link followed).
                  "git_quarantined": [{"path", "kind", "renamed_to" | "error"}]: with
                  --readonly-dir .git, a .git (dir, gitdir file or symlink, any depth, any case)
                  that a command created or replaced (kind, inode or target) is renamed to
                  .git.quarantined-<8 hex> beside it, so git on the host never honours it.
                  "remount_needed": [paths] with --git-guard: before a command, a .git that
                  appeared from outside during the session (after the toolbox started) and is
                  not a read-only mount point (/proc/self/mountinfo): ok false, nothing runs.
                  "disk_growth" (with a budget): bytes the project grew in our calls (st_blocks;
                  growth between calls is someone else's); "disk_budget_exceeded": true when the
                  command was killed or took the project over the budget (ok false).
    disk          while a command runs, statvfs is polled every 0.1 s; once the file system grew
                  by the room left in the budget (or free space is under --min-free) a stat walk
                  measures the project (at most every 0.3 s, or 3x the walk's time): if this
                  command made it grow past the budget (or while space is low), it is killed
                  like a timeout; if not, the growth was someone else's and the next check waits
                  for more. The statvfs baseline is taken as each command starts.
    text          one line each: "files changed: 2 created, 1 modified", outside changes, set-id
                  bits removed, .git entries disabled, the disk budget.

Seccomp
    --seccomp-filter is a classic BPF program (base64 of struct sock_filter[]) the host builds
    for `uname -m`. Before reading any request the toolbox installs it on itself (with
    no_new_privs), so it and every command it runs are confined by it whatever the runtime does
    with the container's profile (gVisor's runsc does not apply it to exec'd processes). On a
    different machine it is not installed and "filter" says why.

Which processes a call "started": those carrying this toolbox's token in their environment
(inherited across fork, setsid and most execs), plus its process group. In a container the
toolbox owns (it is PID 1, was entered from outside the PID namespace - ppid 0 - or got
--kill-strays) also every process of our uid started after the command, except the toolbox,
its ancestors and PID 1: that catches `env -i setsid ...` escapes. On a shared host the broad
sweep would hit other people's processes, so it is never switched on there.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import difflib
import errno
import fnmatch
import hashlib
import io
import json
import os
import re
import select
import selectors
import signal
import stat
import subprocess
import sys
import time
from collections import Counter, deque

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable, Iterator, Mapping
    from types import FrameType
    from typing import Any, BinaryIO, NoReturn, Optional, Protocol, TypedDict, TypeVar, Union

    T = TypeVar("T")

    class Result(TypedDict):
        """What a tool call answers (a response, once "id" is added)."""

        ok: bool
        output: str
        meta: dict[str, Any]

    class Response(Result):
        id: int | None

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

VERSION = 1
BINARY_SNIFF = 8192
READ_BUFFER = 1 << 16  # read_file's buffer: the first read fills it, BINARY_SNIFF included
ABSENT = "absent"  # expect_sha256 of a file that did not exist when the write was approved
FAILS = "fails"  # expect_sha256_after of a call whose preview said it would fail
PREVIEW_MAX_BYTES = 4 * 1024 * 1024  # a bigger file is described, not diffed
NOT_TEXT = "binary or not UTF-8"
READ_MAX_LINES = 2000
READ_MAX_CHARS = 100_000
LINE_MAX_CHARS = 2000
LINE_MAX_BYTES = 4 * LINE_MAX_CHARS
COUNT_BUDGET = 256 * 1024 * 1024  # bytes scanned to tell "of N lines"; beyond that N is unknown
LIST_MAX_ENTRIES = 1000
LIST_DEPTH, LIST_GLOB_DEPTH = 3, 20
SEARCH_LIMIT = 1000
SEARCH_MAX_CHARS = 100_000
SEARCH_COLUMNS = 500
SEARCH_FILES_SHOWN = 30  # a search without matches lists the regular files it searched, up to this
FALLBACK_MAX_BYTES = 16 * 1024 * 1024  # the Python scan holds a file whole (and its text)
TIMED_OUT = "the search hit its time limit"
OUTPUT_HARD_LIMIT = 20 * 1024 * 1024
DIFF_MAX_LINES = 5000  # a preview of more changed lines than this is described, not diffed
COUNT_EXACT_LINES = 400  # lines_changed of a bigger change is a multiset count (difflib is cubic)
_HUNK = re.compile(r"([-+])(\d+)")  # the line numbers of a hunk header, shifted by the trim
CHUNK = 65536
DRAIN_SECONDS = 0.5
SWEEP_SECONDS = 3.0
SETTLE_SECONDS = 1.0  # how long kill(-1) is repeated while a process is still listed
TOKEN_VAR = "SANDBOX_TOOLBOX_TOKEN"
# Makes the command, not the toolbox, the OOM killer's first choice, then runs it. A shell
# prelude, because preexec_fn costs a full fork plus Python in the child (~5 ms a call).
SHELL_PRELUDE = '{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null; exec /bin/sh -c "$1"'
LONG_LINE_MARK = " [... omitted end of long line]"  # what `rg --max-columns-preview` prints
TRACK_MAX_ENTRIES = 200_000  # a walk stops here and says changes_incomplete
CHANGES_MAX = 500  # entries of meta["changes"] / meta["outside_changes"]
HASH_FILE_MAX = 64 * 1024 * 1024  # bigger files are compared by size and mtime only
HASH_WALK_MAX = 512 * 1024 * 1024  # bytes hashed per walk at most
QUARANTINE = ".git.quarantined-"  # what a .git made in the sandbox is renamed to
SETID = stat.S_ISUID | stat.S_ISGID
DISK_POLL_SECONDS = 0.1
DISK_WALK_GAP = 0.3  # seconds at least between two walks measuring the project during a command
DISK_STEP = 1024 * 1024  # growth between walks confirming the disk budget, when already over
PROGRESS_SECONDS = 0.2  # at most one progress line a stream this often
HANGUP_SECONDS = 0.2
"""How often a running command checks that the host still holds its end of the requests."""
EXIT_ORPHANED = 75
"""The toolbox's exit status when its controller went away mid-command: PID 1 (boot/init.py)
then ends the container, and the kernel kills whatever is left in its pid namespace."""
PROGRESS_CHARS = 4096  # newest characters of a stream one progress line carries
PROGRESS_TOTAL = 4 * 1024 * 1024  # characters of progress a call sends at most
ENTRY_BUDGET = 100_000  # new files and directories a session may add (inodes, not only bytes)
ENTRY_STEP = 5_000  # inode growth on the file system that makes the watch count the project
MIN_FREE = 256 * 1024 * 1024
SHOW_MAX_LINES, SHOW_MAX_CHARS = 120, 6000  # a failed edit shows a file this small in full
CLOSEST_MAX_LINES = 5000  # a failed edit looks for the closest line in files this long
CLOSEST_MAX_CHARS = 500  # among lines this long, for a line this long
SYNTAX_MAX_BYTES = 1024 * 1024  # an edit of a .py file this big or smaller must keep it compiling
_NAME = re.compile(r"\b[A-Za-z_]\w{2,}\b")  # a name an edit may rename


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


# -- settings ---------------------------------------------------------------------------------


class Context:
    """Settings from argv plus what the toolbox learned when it started."""

    def __init__(self, opts: Options) -> None:
        self.root = os.path.realpath(opts.root)
        self.roots = {self.root, os.path.abspath(opts.root)}  # as resolved and as given
        self.default_timeout = opts.default_timeout
        self.max_output = opts.max_output
        self.hidden = frozenset(opts.hidden or [".sandbox-agent"])
        self.readonly = frozenset(opts.readonly_dir or [])
        self.readonly_folded = frozenset(name.lower() for name in self.readonly)
        no_rg = opts.no_rg or os.environ.get("TOOLBOX_NO_RG") == "1"
        self.rg = None if no_rg else _which("rg")
        self.token = os.urandom(8).hex()
        self.broad_sweep = opts.kill_strays or os.getpid() == 1 or os.getppid() == 0
        self.kill_all = self.broad_sweep and _alone_in_our_container()  # read once, not per call
        self.keep = frozenset([os.getpid(), 1, *_ancestors()])
        self.pids_events = _cgroup_file("pids", ["pids.events"])
        self.memory_events = _cgroup_file("memory", ["memory.events", "memory.oom_control"])
        self.git_guard = opts.git_guard
        self.mounts = _mount_table(self.root)  # the protected mounts, where they belong
        self.tracker = None if opts.no_track else Tracker(self)  # its first walk comes later
        self.disk = None if opts.no_track else Disk(opts.disk_budget, opts.min_free)
        self.fsize_limit = _fsize_limit()
        self.progress: _Progress | None = None  # the served request's, if it asked for progress
        self.guarded = False  # whether the toolbox made itself non-dumpable (main sets it)
        self.channel = "stdio"  # where requests come from (main sets it)
        self.hangup: Callable[[], bool] = lambda: False
        """Whether the host's end of the requests is gone (main sets it: `_hangup_watch`)."""
        self.orphaned = False  # a command was stopped because the host went away


def _fsize_limit() -> int | None:
    """RLIMIT_FSIZE in bytes (the host sets it to the disk budget), or None."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _cgroup_file(controller: str, names: list[str]) -> str | None:
    """Our cgroup's file for a controller (v1 or v2, with or without a cgroup namespace)."""
    dirs: list[str] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    dirs += [f"/sys/fs/cgroup/{controller}{path}", f"/sys/fs/cgroup/{controller}"]
                elif not controllers:
                    dirs += [f"/sys/fs/cgroup{path}", f"/sys/fs/cgroup/unified{path}"]
    except (OSError, ValueError):
        return None
    for directory in [*dirs, "/sys/fs/cgroup"]:
        for name in names:
            if os.path.isfile(os.path.join(directory, name)):
                return os.path.join(directory, name)
    return None


class Options:
    """The toolbox's command line, parsed (argparse took a sixth of the start in a container)."""

    def __init__(self) -> None:
        self.root = "/workspace"
        self.default_timeout = 60.0
        self.max_output = 30000
        self.hidden: list[str] | None = None
        self.readonly_dir: list[str] | None = None
        self.no_rg = self.kill_strays = self.git_guard = self.no_track = self.sign = False
        self.disk_budget = 0
        self.min_free = MIN_FREE
        self.seccomp_filter: str | None = None
        self.channel: str | None = None


_SWITCHES = ("--no-rg", "--kill-strays", "--git-guard", "--no-track", "--sign")
_VALUES: dict[str, Callable[[str], object]] = {
    "--root": str, "--default-timeout": float, "--max-output": int, "--disk-budget": int,
    "--min-free": int, "--seccomp-filter": str, "--hidden": str, "--readonly-dir": str,
    "--channel": str}
_REPEATED = ("--hidden", "--readonly-dir")


def parse_args(argv: list[str]) -> Options:
    """The toolbox's command line (see the module docstring); exits 2 on a bad one."""
    opts, args = Options(), iter(argv)
    for flag in args:
        name = flag[2:].replace("-", "_")
        if flag in _SWITCHES:
            setattr(opts, name, True)
            continue
        if flag not in _VALUES:
            _usage(f"unknown argument {flag!r}")
        raw = next(args, None)
        if raw is None:
            _usage(f"{flag} needs a value")
        try:
            value = _VALUES[flag](raw)
        except ValueError:
            _usage(f"{flag}: not a number: {raw!r}")
        if flag in _REPEATED:
            setattr(opts, name, [*(getattr(opts, name) or []), value])
        else:
            setattr(opts, name, value)
    if opts.disk_budget < 0 or opts.min_free < 0:
        _usage("--disk-budget and --min-free take a number of bytes, 0 or more")
    for name in (opts.hidden or []) + (opts.readonly_dir or []):
        if not name or "/" in name or name in (".", ".."):
            _usage(f"--hidden/--readonly-dir take one top-level name, not {name!r}")
    return opts


def _usage(message: str) -> NoReturn:
    sys.stderr.write(f"toolbox: error: {message}\n")
    raise SystemExit(2)


# -- paths ------------------------------------------------------------------------------------


def resolve(ctx: Context, raw: str, write: bool = False) -> str:
    """The real path inside the root for a path argument, or a ToolError saying why not."""
    if not raw.strip():
        raise ToolError("path is empty; give a path relative to the project root, "
                        "e.g. 'src/app.py'")
    if "\0" in raw:
        raise ToolError("path contains a NUL byte")
    if os.path.isabs(raw) and not any(_inside(r, os.path.normpath(raw)) for r in ctx.roots):
        raise ToolError(f"path '{raw}' is outside the project root")
    real = os.path.realpath(os.path.join(ctx.root, raw))
    if not _inside(ctx.root, real):
        raise ToolError(f"path '{raw}' is outside the project root")
    parts = rel(ctx, real).split("/")
    if parts[0] in ctx.hidden:
        raise ToolError(f"'{raw}' is reserved and not accessible")
    # Nested ones too (a vendored repo's .git/hooks would run on the host as well), and names
    # met on the way: a link to a .git directory leaves no ".git" in the resolved path.
    met = parts + _names_on_the_way(ctx.root, raw) if write and ctx.readonly else []
    # Any case: on a case-insensitive host file system .GIT is .git.
    locked = sorted({name for name in met if name.lower() in ctx.readonly_folded})
    if locked:
        raise ToolError(f"'{raw}' is inside {locked[0]}, which is read-only in the sandbox")
    return real


def _names_on_the_way(root: str, raw: str) -> list[str]:
    """Every name resolving raw from root passes through, symlink targets included."""
    names: list[str]
    names, todo, here, hops = [], deque(raw.split("/")), "/" if raw.startswith("/") else root, 0
    while todo:
        part = todo.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            here = os.path.dirname(here)
            continue
        names.append(part)
        path = os.path.join(here, part)
        try:
            target = os.readlink(path) if hops < 40 else None
        except OSError:
            target = None  # not a link, or missing: a plain name
        if target is None:
            here = path
            continue
        hops += 1
        todo.extendleft(reversed(target.split("/")))
        here = "/" if target.startswith("/") else here
    return names


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(os.path.join(root, ""))


def rel(ctx: Context, path: str) -> str:
    """`path` relative to the root, as the model should write it."""
    return os.path.relpath(path, ctx.root)


def os_error_text(ctx: Context, exc: OSError) -> str:
    """A short, clear text for an OSError a tool ran into."""
    name = exc.filename or ""
    if name and _inside(ctx.root, os.path.abspath(name)):
        name = rel(ctx, name)
    texts: dict[int | None, str] = {
        errno.ENOENT: f"file not found: {name}",
        errno.EACCES: f"permission denied: {name}",
        errno.EPERM: f"operation not permitted: {name}",
        errno.EROFS: "read-only file system: the project is mounted read-only",
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EISDIR: f"'{name}' is a directory",
        errno.ENOTDIR: f"not a directory: a parent of '{name}' is a file",
        errno.EEXIST: f"'{name}' already exists and is not a directory",
        errno.ENAMETOOLONG: f"path too long: {name}",
        errno.ELOOP: f"too many levels of symbolic links: {name}",
        errno.EFBIG: f"file too large: {name}",
        errno.EMFILE: "too many open files in the sandbox",
        errno.ENOMEM: "out of memory in the sandbox",
    }
    return texts.get(exc.errno, f"{exc.strerror or exc}: {name}".rstrip(": "))


def _regular_file(real: str, path: str) -> os.stat_result:
    """Raise unless `real` is an existing regular file (never open a FIFO: it would block)."""
    info = os.stat(real)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"'{path}' is a directory; use list_files")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"'{path}' is not a regular file")
    return info


# -- read_file --------------------------------------------------------------------------------


def tool_read_file(ctx: Context, path: str, start_line: int | None = None,
                   end_line: int | None = None) -> Result:
    """Numbered lines of a text file, capped, with a note on how to read the rest."""
    first = _positive(start_line, "start_line") or 1
    last = _positive(end_line, "end_line")
    if last is not None and last < first:
        raise ToolError(f"end_line ({last}) is before start_line ({first})")
    real = resolve(ctx, path)
    size = _regular_file(real, path).st_size
    with io.BufferedReader(io.FileIO(real), READ_BUFFER) as f:  # (open() asks isatty() too)
        if b"\0" in f.peek(BINARY_SNIFF)[:BINARY_SNIFF]:  # read once, not read and seek back
            return fail(f"binary file ({size} bytes); not shown", binary=True, total_bytes=size)
        skipped = _skip_lines(f, first - 1)
        page = _Page(first)
        page.fill(f, last)
        total = page.total_lines(f)
    if not page.lines and first > 1:
        raise ToolError(f"start_line {first} is past the end of '{path}' ({skipped} lines)")
    return ok(page.text(path, size, total), lines=len(page.lines), total_bytes=size,
              truncated=page.more, start_line=first, end_line=first + len(page.lines) - 1,
              total_lines=total)


def _positive(value: int | None, name: str) -> int | None:
    if value is not None and value < 1:
        raise ToolError(f"argument '{name}' must be 1 or more")
    return value


def _skip_lines(f: BinaryIO, count: int) -> int:
    """Advance f past `count` lines in big chunks; returns how many it skipped (fewer at EOF)."""
    skipped, tail = 0, b""
    while skipped < count:
        pos, chunk = f.tell(), f.read(1 << 20)
        if not chunk:
            return skipped + (1 if tail and not tail.endswith(b"\n") else 0)
        found = chunk.count(b"\n")
        if skipped + found >= count:
            idx = -1
            for _ in range(count - skipped):
                idx = chunk.index(b"\n", idx + 1)
            f.seek(pos + idx + 1)
            return count
        skipped, tail = skipped + found, chunk
    return skipped


def _line_rest(f: BinaryIO) -> bool:
    """Skip the rest of a line read up to LINE_MAX_BYTES; whether there was any (it was cut).
    A huge line is never held in memory."""
    cut = False
    while True:
        more = f.readline(CHUNK)
        cut = cut or bool(more)
        if not more or more.endswith(b"\n"):
            return cut


def _decode(raw: bytes, cut: bool) -> tuple[str, bool]:
    """(text, had invalid UTF-8) of one line; a cut line may end inside a character."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        if not cut:  # the common case, and as strict
            return raw.decode("utf-8"), False
        return codecs.getincrementaldecoder("utf-8")().decode(raw, final=False), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


class _Page:
    """The lines one read_file call returns, within the caps."""

    lines: list[str]

    def __init__(self, first: int) -> None:
        self.first, self.lines, self.chars = first, [], 0
        self.more = self.invalid = self.long = self.eof = False

    def fill(self, f: BinaryIO, last: int | None) -> None:
        """Take lines from f until `last`, EOF or a cap (then `more` is set)."""
        number, lines = self.first, self.lines
        while True:  # one loop, no call a line: a page of 2000 short lines is common
            raw = f.readline(LINE_MAX_BYTES)
            if not raw:
                self.eof = True
                return
            if raw.endswith(b"\n"):
                raw, cut = raw[:-1], False
            else:
                cut = _line_rest(f)
            if last is not None and number > last:
                return
            if len(lines) >= READ_MAX_LINES or self.chars >= READ_MAX_CHARS:
                self.more = True
                return
            if cut or raw.endswith(b"\r"):
                text, bad = _decode(raw, cut)
                self.invalid = self.invalid or bad
            else:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text, self.invalid = raw.decode("utf-8", "replace"), True
            if cut or len(text) > LINE_MAX_CHARS:
                text, self.long = text[:LINE_MAX_CHARS] + " [... line cut]", True
            line = f"{number:>6}\t{text}"
            lines.append(line)
            self.chars += len(line) + 1
            number += 1

    def total_lines(self, f: BinaryIO) -> int | None:
        """Lines in the whole file when cheap to know: None if the rest is over budget."""
        if self.eof:
            return self.first + len(self.lines) - 1
        if not self.more:
            return None
        count, last, budget = self.first + len(self.lines), b"\n", COUNT_BUDGET
        while budget > 0:
            chunk = f.read(1 << 20)
            if not chunk:
                return count + (0 if last.endswith(b"\n") else 1)
            count, last, budget = count + chunk.count(b"\n"), chunk, budget - len(chunk)
        return None

    def text(self, path: str, size: int, total: int | None) -> str:
        """The numbered lines plus notes on truncation and encoding."""
        if not self.lines:
            return f"(empty file: '{path}' has 0 bytes)"
        notes = []
        if self.more:
            end = self.first + len(self.lines) - 1
            of = f"of {total}" if total else f"of a {size}-byte file"
            notes.append(f"[truncated: showing lines {self.first}-{end} {of}. To read more, "
                         f"call read_file with start_line={end + 1}.]")
        if self.long:
            notes.append(f"[note: lines longer than {LINE_MAX_CHARS} characters were cut]")
        if self.invalid:
            notes.append("[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]")
        return "\n".join(self.lines + notes)


# -- write_file / edit_file -------------------------------------------------------------------


def tool_write_file(ctx: Context, path: str, content: str, expect_sha256: str | None = None,
                    expect_sha256_after: str | None = None) -> Result:
    """Create or overwrite a file, creating its parent directories."""
    real = resolve(ctx, path, write=True)
    before = _read_existing(real, path)
    _check_unchanged(path, before, expect_sha256)
    data = _encode(content, "surrogatepass")
    _check_as_shown(path, data, expect_sha256_after)
    meta = _write(ctx, real, before, data)
    how = "new file" if meta["created"] else f"{meta['lines_changed']} lines changed"
    return ok(f"wrote {meta['bytes']} bytes to '{path}' ({how})" + _gitdir_note(meta), **meta)


def tool_edit_file(ctx: Context, path: str, new_text: str, old_text: str | None = None,
                   replace_all: bool = False, expect_sha256: str | None = None,
                   expect_sha256_after: str | None = None) -> Result:
    """Replace the unique (or, with replace_all, every) occurrence of old_text."""
    real = resolve(ctx, path, write=True)
    before = _read_existing(real, path)
    _check_unchanged(path, before, expect_sha256)
    try:
        edit = _edited(path, before, new_text, old_text, replace_all)
    except ToolError as exc:
        raise _with_file(exc, path, before) from None
    _check_as_shown(path, edit.after, expect_sha256_after)
    meta = _write(ctx, real, before, edit.after)
    if before is None:
        return ok(f"created '{path}' ({meta['bytes']} bytes)" + _gitdir_note(meta),
                  replacements=0, **meta)
    extra: dict[str, Any] = {"still_there": edit.still_there} if edit.still_there else {}
    return ok(f"edited '{path}': {edit.count} replacement{'s' * (edit.count > 1)}, "
              f"{meta['lines_changed']} lines changed" + edit.note + _gitdir_note(meta),
              replacements=edit.count, **meta, **extra)


def _gitdir_note(meta: WriteRecord) -> str:
    records = meta.get("git_quarantined") or []
    return "".join(f"\n{r['path']} was made to look like a git repository; its HEAD was renamed "
                   f"to {r['renamed_to'] or '(failed)'} so git on the host does not use it"
                   for r in records)


class Edit:
    """What an edit makes of a file: its new bytes, replacements, and what to tell the model."""

    def __init__(self, after: bytes, count: int, note: str = "",
                 still_there: dict[str, list[int]] | None = None) -> None:
        self.after, self.count, self.note = after, count, note
        self.still_there = still_there or {}
        """Names the edit took out of the text it replaced that other lines still use."""


def _edited(path: str, before: bytes | None, new_text: str, old_text: str | None,
            replace_all: bool) -> Edit:
    """What an edit makes of the file, or the ToolError it fails with."""
    if old_text is None or (old_text == "" and before is None):
        # Small models send old_text="" to mean "create": treat it like an omitted old_text.
        if before is not None:
            raise ToolError(f"'{path}' already exists. To change it, give old_text (the exact "
                            "text to replace); to overwrite all of it, use write_file.")
        return Edit(_encode(new_text, "surrogatepass"), 0)
    if old_text == "":
        raise ToolError(f"old_text is empty but '{path}' exists. Give the exact text to "
                        "replace, or use write_file to overwrite the whole file.")
    if before is None:
        raise ToolError(f"file not found: {path}. Check the path (list_files shows the files); "
                        "to create a new file, use write_file or edit_file without old_text.")
    text = _edit_text(before, path)
    old, new, count = _find(text, old_text, new_text)
    _check_count(text, path, old, count, replace_all)
    after = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    note = ""
    error = _broken(path, text, after)
    if error is not None:
        moved = None if replace_all else _after_block(text, old, new)
        if moved is None:
            raise _syntax_refusal(path, after, error)
        after, note = moved
    left = _still_there(after, old, new)
    return Edit(_encode(after, "surrogateescape"), count if replace_all else 1,
                note + _still_there_note(after, left), left)


def _still_there(after: str, old: str, new: str, limit: int = 3) -> dict[str, list[int]]:
    """{name: line numbers} of the names (identifiers) old had and new has not that the file
    still uses: a rename of `calc_total` in one line leaves the import two lines up."""
    if len(after) > SYNTAX_MAX_BYTES:
        return {}
    gone = sorted(set(_NAME.findall(old)) - set(_NAME.findall(new)))
    if not gone or len(gone) > limit:
        return {}
    lines = after.split("\n")
    found: dict[str, list[int]] = {}
    for name in gone:
        word = re.compile(rf"\b{re.escape(name)}\b")
        numbers = [n for n, line in enumerate(lines, 1) if word.search(line)]
        if numbers:
            found[name] = numbers[:limit]
    return found


def _still_there_note(after: str, left: dict[str, list[int]]) -> str:
    lines = after.split("\n") if left else []
    return "".join(f"\nnote: '{name}' is still on line {n}: {lines[n - 1].strip()[:200]}"
                   for name, numbers in left.items() for n in numbers)


def _broken(path: str, before: str, after: str) -> SyntaxError | None:
    """The SyntaxError an edit brings into a Python file that compiled before, or None."""
    if not path.endswith((".py", ".pyw")) or len(after) > SYNTAX_MAX_BYTES:
        return None
    if _syntax_error(before, path) is not None:
        return None  # it did not compile before: this edit may be one step of a repair
    return _syntax_error(after, path)


def _after_block(text: str, old: str, new: str) -> tuple[str, str] | None:
    """(text, note) with new's added lines after the block old's last line opens, or None.

    A weak model adds a function with old_text `def add(a, b):` and new_text that line plus
    the new function: taken literally the new code splits add() from its body. When new_text
    is old_text plus lines, and old_text ends with the line that opens a block (`...:`), the
    lines go after the end of that block instead (indented as that line, see `_indented`), if
    the file then compiles.
    """
    if not new.startswith(old) or text.count(old) != 1 or not old.rstrip().endswith(":"):
        return None
    if "\r" in text:
        return None
    end = text.index(old) + len(old)
    if end < len(text) and text[end] not in "\r\n":
        return None  # old_text stops inside a line
    added = new[len(old):].strip("\r\n")
    if not added.strip():
        return None
    opener = text.count("\n", 0, end) + 1
    block = _block_opened_at(text, opener)
    if block is None:
        return None
    last, column = block
    placed, shifted = _indented(added, column)
    if placed is None:
        return None
    lines = text.split("\n")
    head, rest = "\n".join(lines[:last]), "\n".join(lines[last:]).lstrip("\n")
    gap = "\n\n\n" if column == 0 else "\n\n"  # the end of the last line, then blank lines
    moved = head + gap + placed + (gap + rest if rest.strip() else "\n")
    if _syntax_error(moved, "<edit>") is not None:
        return None
    how = f", indented by {shifted} more spaces to stand beside it" if shifted else ""
    return moved, (f"\nnote: the new lines went after line {last}, the end of the block that "
                   f"line {opener} opens{how}: right after line {opener} they would have "
                   "broken it")


def _indented(added: str, column: int) -> tuple[str | None, int]:
    """(added indented to `column`, spaces added), or (None, 0) when it cannot be.

    Lines written less indented than the block they follow (a method written at the top level
    after a method) are moved right as a whole; lines indented more, or with tabs, are not.
    """
    lines = added.split("\n")
    first = next(line for line in lines if line.strip())
    have = len(first) - len(first.lstrip(" "))
    if have == column:
        return added, 0
    if have > column or "\t" in added:
        return None, 0
    if any(line.strip() and len(line) - len(line.lstrip(" ")) < have for line in lines):
        return None, 0
    pad = " " * (column - have)
    return "\n".join(pad + line if line.strip() else line for line in lines), column - have


def _parsed(text: str) -> Any:
    """ast.parse(text), or None."""
    import ast
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _block_opened_at(text: str, line: int) -> tuple[int, int] | None:
    """(last line, column) of the compound statement whose header ends on `line`, or None."""
    import ast
    tree = _on_fresh_stack(_parsed, text)
    if tree is None:
        return None
    found: tuple[int, int] | None = None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, ast.stmt) or not isinstance(body, list) or not body:
            continue
        first = body[0].lineno  # decorators of the first statement come before its def
        first = min([first] + [d.lineno for d in getattr(body[0], "decorator_list", [])])
        end = node.end_lineno
        if node.lineno <= line < first and end is not None and (found is None or end <= found[0]):
            found = (end, node.col_offset)
    return found


def _syntax_refusal(path: str, after: str, error: SyntaxError) -> ToolError:
    """Why an edit that would break a Python file changed nothing, with the lines it broke."""
    line = error.lineno or 1
    lines = after.split("\n")
    start, end = max(1, line - 4), min(len(lines), line + 3)
    shown = "\n".join(f"{n:>6}\t{lines[n - 1].rstrip(chr(13))}" for n in range(start, end + 1))
    return ToolError(
        f"not changed: this edit would break '{path}' ({type(error).__name__}: {error.msg}, "
        f"line {line}). new_text replaces old_text exactly, so it must hold complete lines "
        "that fit where old_text was. To add code after a function, give its last lines as "
        "old_text and those lines followed by the new code as new_text. After this edit the "
        f"file would read:\n{shown}", syntax_error=f"{error.msg} (line {line})")


def _syntax_error(source: str, path: str) -> SyntaxError | None:
    """The SyntaxError compiling `source` raises, or None (also when it cannot be compiled)."""
    return _on_fresh_stack(_compile_error, source, path)


def _on_fresh_stack(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a new thread: compile()'s and ast's recursion limits count the caller's
    frames, and the preview and the call, whose stacks differ, must come to the same verdict.
    (Where no thread can start, the host's expect_sha256_after still keeps them together.)"""
    import threading
    done: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):  # nothing on stderr: the host reads it
            done.append(fn(*args))

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
    except RuntimeError:
        return fn(*args)
    thread.join()
    if not done:
        raise ToolError("the Python check of this edit failed; nothing was written")
    return done[0]


def _compile_error(source: str, path: str) -> SyntaxError | None:
    import warnings  # a SyntaxWarning (say, an invalid escape) must not reach stderr
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _with_file(exc: ToolError, path: str, before: bytes | None) -> ToolError:
    """A failed edit's error plus the file as it is, when small: the fix needs no extra read."""
    if before is None or b"\0" in before[:BINARY_SNIFF] or len(before) > SHOW_MAX_CHARS:
        return exc
    lines = before.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) > SHOW_MAX_LINES:
        return exc
    numbered = "\n".join(f"{n:>6}\t{line.rstrip(chr(13))}" for n, line in enumerate(lines, 1))
    return ToolError(f"{exc}\nThis is '{path}' now (copy old_text from it exactly, without the "
                     f"line numbers):\n{numbered or '(empty file)'}", **exc.meta, file_shown=True)


def _check_unchanged(path: str, before: bytes | None, expected: str | None) -> None:
    """Refuse a write whose file is not what the person approved (the host sends the hash)."""
    if expected is not None and _digest(before) != expected:
        raise ToolError(f"'{path}' changed since it was approved; nothing was written. Read it "
                        "again before changing it.", changed_since_approval=True)


def _check_as_shown(path: str, after: bytes, expected: str | None) -> None:
    """Refuse a write whose result is not the content the person approved (the host sends the
    preview's sha256_after, or FAILS when the preview said the call would fail): the diff
    shown and the bytes written can never differ."""
    if expected is not None and _digest(after) != expected:
        raise ToolError(f"'{path}' would not be written as it was shown for approval; nothing "
                        "was written. Make the call again to be shown what it would do.",
                        not_as_approved=True)


def _digest(data: bytes | None) -> str:
    """sha256 hex of a file's bytes, or ABSENT for a file that does not exist."""
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def _read_existing(real: str, path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist yet; a hard-linked file is refused.

    Writing in place through one of several names changes the others too (a Makefile linked
    to notes.txt): what the approval and the audit name would not be what changed.
    """
    try:
        info = _regular_file(real, path)
    except FileNotFoundError:
        return None
    if info.st_nlink > 1:
        raise ToolError(f"'{path}' has {info.st_nlink} hard links: writing it would change the "
                        "other names too, so nothing was written. Remove it and write a new "
                        "file instead (run_shell_command: cp --remove-destination ...).",
                        hard_links=info.st_nlink)
    with open(real, "rb") as f:
        return f.read()


def _edit_text(data: bytes, path: str) -> str:
    if b"\0" in data[:BINARY_SNIFF]:
        raise ToolError(f"'{path}' is a binary file; edit_file only edits text files")
    return data.decode("utf-8", "surrogateescape")  # invalid bytes survive the edit unchanged


def _encode(text: str, errors: str) -> bytes:
    try:
        return text.encode("utf-8", errors)
    except UnicodeEncodeError as exc:
        raise ToolError(f"the text cannot be written as UTF-8: {exc.reason}") from exc


def _find(text: str, old: str, new: str) -> tuple[str, str, int]:
    """(old, new, count), retried with CRLF line ends when the file uses them."""
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        crlf_old, crlf_new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        if text.count(crlf_old):
            return crlf_old, crlf_new, text.count(crlf_old)
    return old, new, count


def _check_count(text: str, path: str, old: str, count: int, replace_all: bool) -> None:
    if count == 0:
        hint = _no_match_hint(text, old)
        raise ToolError(f"old_text not found in '{path}' (0 matches). Copy the exact text from "
                        "the file (read_file shows it), including spaces and indentation." + hint)
    if count > 1 and not replace_all:
        lines = _match_lines(text, old)
        raise ToolError(f"old_text matches {count} times in '{path}' (at lines {lines}). Add "
                        "surrounding lines to old_text so it matches once, or set "
                        "replace_all=true to replace all of them." + _whole_lines(text, lines))


def _whole_lines(text: str, numbers: str, limit: int = 3) -> str:
    """The first matching lines in full: one of them, as old_text, changes one place at a time."""
    have = text.split("\n")
    picked = list(dict.fromkeys(int(n) for n in numbers.split(", ") if n.isdigit()))[:limit]
    shown = "\n".join(have[n - 1].rstrip("\r") for n in picked if n <= len(have))
    return f" One whole line is enough, one call per line; the lines are:\n{shown}"


def _match_lines(text: str, old: str, limit: int = 10) -> str:
    found: list[str] = []
    pos, line, at = 0, 1, text.find(old)
    while at != -1 and len(found) < limit:
        line += text.count("\n", pos, at)
        found.append(str(line))
        pos, at = at, text.find(old, at + len(old))
    return ", ".join(found) + (", ..." if at != -1 else "")


def _no_match_hint(text: str, old: str) -> str:
    """A concrete reason the text did not match, when one is cheap to find."""
    lines = [line for line in old.split("\n") if line]
    if lines and all(re.match(r"\s*\d+\t", line) for line in lines):
        return (" Hint: old_text starts with line numbers from read_file; remove the number "
                "and tab at the start of each line.")
    wanted = [line.strip() for line in old.strip("\n").split("\n")]
    if not wanted[0] or len(text) > 5_000_000:
        return ""
    have = text.split("\n")
    for i, line in enumerate(have):
        if line.strip() == wanted[0] and [x.strip() for x in have[i:i + len(wanted)]] == wanted:
            return (f" Hint: lines {i + 1}-{i + len(wanted)} match except for whitespace; "
                    "copy them exactly as read_file shows them.")
    return _core_lines(have, wanted) or _closest_line(have, wanted[0])


def _core_lines(have: list[str], wanted: list[str], limit: int = 3) -> str:
    """' Hint: ... is on line N' when old_text, less its quotes, punctuation or case, is there.

    A model told "it says Hello" guesses `Hello.` or `'Hello'`; the file has `"Hello, "`.
    """
    core = wanted[0].strip(" \t.,;:!?'\"`") if len(wanted) == 1 else ""
    if len(core) < 3 or len(have) > CLOSEST_MAX_LINES:
        return ""
    found = [n for n, line in enumerate(have, 1) if core in line]
    if not found:
        found = [n for n, line in enumerate(have, 1) if core.lower() in line.lower()]
    if not found or len(found) > limit:
        return ""
    shown = "\n".join(have[n - 1].rstrip("\r") for n in found)
    where = "line " + ", ".join(str(n) for n in found)
    return (f" Hint: {core!r} is on {where}; old_text must match exactly, so copy the whole "
            f"line:\n{shown}")


def _closest_line(have: list[str], wanted: str) -> str:
    """' Hint: line N is the closest ...' for a line like `wanted` (quotes, a typo), or ''."""
    if len(have) > CLOSEST_MAX_LINES or len(wanted) > CLOSEST_MAX_CHARS:
        return ""  # difflib's ratio is quadratic in a line's length: a crafted file costs 10 s
    stripped = [line.strip() if len(line) <= CLOSEST_MAX_CHARS else "" for line in have]
    close = difflib.get_close_matches(wanted, stripped, n=1, cutoff=0.6)
    if not close:
        return ""
    number = stripped.index(close[0]) + 1
    return f" Hint: line {number} is the closest; copy it exactly:\n{have[number - 1]}"


def _write(ctx: Context, real: str, before: bytes | None, data: bytes) -> WriteRecord:
    """Write data to real (in place: mode, owner and hard links stay); returns the meta."""
    allocated = _check_write(ctx, real, len(data))
    os.makedirs(os.path.dirname(real), exist_ok=True)
    with open(real, "wb") as f:
        f.write(data)
    digest = hashlib.sha256(data).hexdigest()
    _note_write(ctx, real, allocated, digest)
    meta: WriteRecord = {
        "bytes": len(data),
        "sha256_before": None if before is None else hashlib.sha256(before).hexdigest(),
        "sha256_after": digest,
        "lines_changed": _lines_changed(before or b"", data), "created": before is None}
    disabled = _gitdir_made_by_write(ctx, real) if ".git" in ctx.readonly else None
    if disabled:
        meta["git_quarantined"] = [disabled]
    return meta


def _gitdir_made_by_write(ctx: Context, real: str) -> QuarantineRecord | None:
    """A write that completes a repository look-alike (HEAD, objects/, refs/ in one directory,
    whatever its name) disables it at once: git on the host would run its config."""
    folder = os.path.dirname(real)
    while _inside(ctx.root, folder):
        modes: dict[str, int] = {}
        for part in GITDIR_PARTS:
            with contextlib.suppress(OSError):
                modes[part] = os.lstat(os.path.join(folder, part)).st_mode
        if gitdir_shape(modes) and folder not in _readonly_mounts(ctx.root):
            head = rel(ctx, os.path.join(folder, "HEAD"))
            renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
            try:
                _rename_in_place(ctx, head, renamed)
            except OSError as exc:
                return {"path": rel(ctx, folder), "kind": "gitdir", "renamed_to": None,
                        "error": exc.strerror or str(exc)}
            if ctx.tracker is not None and ctx.tracker.index is not None:
                ctx.tracker.index.stats.pop(head, None)
                ctx.tracker.refresh(renamed)
            return {"path": rel(ctx, folder), "kind": "gitdir", "renamed_to": renamed}
        if folder == ctx.root:
            return None
        folder = os.path.dirname(folder)
    return None


def _lines_changed(old: bytes, new: bytes) -> int:
    """Added plus removed lines: exact via difflib when few changed, else a multiset count.

    It runs after the write, so it must be cheap whatever the text: difflib without autojunk
    is cubic on crafted lines (800 took 5 s), hence the small bound on the exact count."""
    a, b = old.splitlines(), new.splitlines()
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and end < len(b) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    a, b = a[start:len(a) - end], b[start:len(b) - end]
    if not a or not b or len(a) + len(b) > COUNT_EXACT_LINES:
        ca, cb = Counter(a), Counter(b)
        return sum(((ca - cb) + (cb - ca)).values())
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum((i2 - i1) + (j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


# -- preview (for the host's approval prompt; not a tool the model is offered) -----------------


def tool_preview(ctx: Context, tool: str, args: dict[str, Any]) -> Result:
    """What a write_file or edit_file call would change, as a unified diff; writes nothing.

    The same path checks as the real call; `meta.error` says why the call would fail.
    """
    if tool not in ("write_file", "edit_file"):
        raise ToolError(f"preview is for write_file and edit_file, not '{tool}'")
    clean = validate(tool, TOOLS[tool][1], args)
    facts: PreviewFacts = {"path": clean["path"], "resolved": None, "symlink": False,
                           "exists": False, "binary": False, "sha256_before": None,
                           "sha256_after": None, "error": None}
    try:
        output = _preview(ctx, tool, clean, facts)
    except ToolError as exc:
        output, facts["error"] = "", str(exc)
    except OSError as exc:
        output, facts["error"] = "", os_error_text(ctx, exc)
    return ok(output, **facts)


def _preview(ctx: Context, tool: str, args: dict[str, Any], facts: PreviewFacts) -> str:
    """The diff text; fills `facts` as it learns them (so an error keeps what was known)."""
    path = args["path"]
    real = resolve(ctx, path, write=True)
    facts.update({"resolved": rel(ctx, real), "symlink": _lexical(ctx, path) != rel(ctx, real)})
    before = _read_existing(real, path)
    facts.update({"exists": before is not None,
                  "sha256_before": None if before is None else _digest(before)})
    if tool == "write_file":
        after = _encode(args["content"], "surrogatepass")
    else:
        after = _edited(path, before, args["new_text"], args.get("old_text"),
                        args.get("replace_all", False)).after
    facts["sha256_after"] = _digest(after)
    (old, why_old), (new, why_new) = _text_of(before), _text_of(after)
    why = why_old or why_new
    if why:
        facts["binary"] = NOT_TEXT in (why_old, why_new)
        return _described(before, after, why)
    assert old is not None and new is not None  # _text_of gives the text when no reason
    label = facts["resolved"]
    diff = _unified(old, new, f"a/{label}" if before is not None else "/dev/null", f"b/{label}")
    if diff is None:
        return _described(before, after, f"over {DIFF_MAX_LINES} changed lines")
    return diff


def _lexical(ctx: Context, raw: str) -> str:
    """`raw` relative to the root without following links, to tell a path through a symlink."""
    if os.path.isabs(raw):
        norm = os.path.normpath(raw)
        base = next((r for r in sorted(ctx.roots) if _inside(r, norm)), ctx.root)
        return os.path.relpath(norm, base)
    return os.path.normpath(raw)


def _text_of(data: bytes | None) -> tuple[str | None, str | None]:
    """(text, None) of a file's bytes (None: no file yet), or (None, why it is not shown)."""
    if data is None:
        return "", None
    if b"\0" in data[:BINARY_SNIFF]:
        return None, NOT_TEXT
    if len(data) > PREVIEW_MAX_BYTES:
        return None, f"over {PREVIEW_MAX_BYTES} bytes"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, NOT_TEXT


def _described(before: bytes | None, after: bytes, why: str) -> str:
    """Sizes and hashes instead of a diff."""
    old = "no file" if before is None else f"{len(before)} bytes, sha256 {_digest(before)}"
    return (f"content not shown ({why})\nbefore: {old}\n"
            f"after:  {len(after)} bytes, sha256 {_digest(after)}")


def _unified(old: str, new: str, from_label: str, to_label: str) -> str | None:
    """A unified diff (3 lines of context) of two texts; '' when they are the same, None when
    more than DIFF_MAX_LINES lines changed (difflib is quadratic on crafted text: a preview
    must not outlast the call's deadline). Lines the two share at the start and the end are
    left out of the comparison, so an edit of a big file costs what it changed."""
    a, b = _keep_ends(old), _keep_ends(new)
    head, most = 0, min(len(a), len(b))
    while head < most and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < most - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start, cut = max(0, head - 3), max(0, tail - 3)
    a, b = a[start:len(a) - cut], b[start:len(b) - cut]
    if max(len(a), len(b)) > DIFF_MAX_LINES + 6:
        return None
    out = []
    for line in difflib.unified_diff(a, b, from_label, to_label):
        if start and line.startswith("@@ "):
            line = _HUNK.sub(lambda m: f"{m[1]}{int(m[2]) + start}", line)
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _keep_ends(text: str) -> list[str]:
    """Lines split at "\\n" only (a CR or form feed inside a line stays where it is)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


# -- search_files -----------------------------------------------------------------------------


def tool_search_files(ctx: Context, pattern: str, path: str = ".",
                      max_results: int = 100) -> Result:
    """Lines matching a regex as path:line:text, via ripgrep or a Python scan."""
    if pattern == "":
        raise ToolError("pattern is empty; give a regular expression, e.g. 'def main'")
    if not 1 <= max_results <= SEARCH_LIMIT:
        raise ToolError(f"argument 'max_results' must be between 1 and {SEARCH_LIMIT}")
    real = resolve(ctx, path)
    if not os.path.exists(real):
        raise ToolError(f"path not found: {path}")
    result = _searched(ctx, pattern, path, real, max_results)
    if result["meta"]["matches"] == 0 and not result["meta"]["truncated"] and os.path.isdir(real):
        result["output"] += _files_there(ctx, real)
    return result


def _searched(ctx: Context, pattern: str, path: str, real: str, max_results: int) -> Result:
    deadline = time.monotonic() + ctx.default_timeout
    if _smart_case(pattern):  # 'port' finds PORT = 8731, not only the word in 'import'
        try:
            hits, engine = _search(ctx, "(?i)" + pattern, real, max_results, deadline)
        except ToolError as exc:  # name the pattern as the model wrote it
            raise ToolError(str(exc).replace(f"'(?i){pattern}'", f"'{pattern}'", 1),
                            **exc.meta) from None
        result = _search_result(pattern, path, hits, max_results, engine)
        result["meta"]["ignore_case"] = True
        return result
    hits, engine = _search(ctx, pattern, real, max_results, deadline)
    if hits or pattern.startswith("(?i)"):
        return _search_result(pattern, path, hits, max_results, engine)
    # 'Timeout' finds TIMEOUT_SECONDS: said so, not silently, so a real miss stays a miss
    try:
        folded, engine = _search(ctx, "(?i)" + pattern, real, max_results, deadline)
    except ToolError:  # a pattern whose own flags cannot follow (?i): it simply had no match
        folded = []
    result = _search_result(pattern, path, folded, max_results, engine)
    if folded:
        result["output"] = (f"no matches for '{pattern}' in {path} as written; ignoring "
                            f"upper/lower case:\n{result['output']}")
        result["meta"]["ignore_case"] = True
    return result


def _files_there(ctx: Context, real: str) -> str:
    """The files a search without matches looked at, when they are few: the thing asked about
    may go by another name (a 'divide' function called ratio), so read the likely ones."""
    files: list[str] = []
    for path in _walk_files(ctx, real):
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                files.append(rel(ctx, path))
        if len(files) > SEARCH_FILES_SHOWN:
            return ""
    if not files:
        return ""
    return ("\nIt may go by another name: read the likely files. The files there:\n"
            + "\n".join(files))


def _smart_case(pattern: str) -> bool:
    """Whether a pattern matches regardless of case: it has no upper-case letter of its own
    (ripgrep's --smart-case; the letters of escapes such as \\S or \\W do not count)."""
    if pattern.startswith("(?"):
        return False  # it sets its own flags
    letters = re.sub(r"\\.", "", pattern)
    return letters == letters.lower() and letters != letters.upper()


def _search(ctx: Context, pattern: str, real: str, limit: int,
            deadline: float) -> tuple[Hits, str]:
    """(hits, engine): ripgrep's, or Python's when rg is missing or rejects the pattern."""
    hits = _search_rg(ctx, pattern, rel(ctx, real), limit, deadline) if ctx.rg else None
    if hits is None:
        return _search_py(ctx, real, _compile(pattern), limit, deadline), "python"
    return hits, "rg"


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ToolError(f"invalid regex '{pattern}': {exc}") from exc


def _search_result(pattern: str, path: str, found: Hits, limit: int, engine: str) -> Result:
    last = found[-1] if found else None
    incomplete = last if isinstance(last, str) else None
    hits = sorted(h for h in found if not isinstance(h, str))
    more = len(hits) > limit
    lines, chars = [], 0
    for name, number, text in hits[:limit]:
        line = f"{name}:{number}:{text}"
        chars += len(line) + 1
        if chars > SEARCH_MAX_CHARS:
            more = True
            break
        lines.append(line)
    meta = {"matches": len(lines), "truncated": bool(more or incomplete), "engine": engine}
    if not lines and incomplete:
        return ok(f"no matches for '{pattern}' in {path}, but the search is incomplete: "
                  f"{incomplete}", **meta)
    if not lines:
        return ok(f"no matches for '{pattern}' in {path}", **meta)
    if more:
        lines.append(f"[stopped after {len(lines)} results; narrow the pattern or path, or raise "
                     f"max_results (up to {SEARCH_LIMIT})]")
    if incomplete:
        lines.append(f"[{incomplete}; results are incomplete]")
    return ok("\n".join(lines), **meta)


def _search_rg(ctx: Context, pattern: str, target: str, limit: int,
               deadline: float) -> Hits | None:
    """Hits from ripgrep; None when rg cannot run or rejects a pattern Python's re accepts."""
    out, err = _Lines(limit + 1), _Capture(4096)
    ran = _rg(ctx, ["--line-number", "--with-filename", "--no-heading", "--color", "never",
                    "--max-columns", str(SEARCH_COLUMNS), "--max-columns-preview"],
              pattern, target, (out, err), deadline, lambda: "enough" if out.full() else None)
    if ran is None:
        return None  # cannot fork right now (pids limit?): the in-process scan still works
    returncode, reason = ran
    if returncode == 2 and not out.lines and not reason:
        _rg_error(pattern, err.text())  # raises, unless Python's re takes the pattern
        return None
    hits: Hits = [_parse_rg(line) for line in out.done()]
    if reason == "timeout":
        return [*hits, TIMED_OUT]
    if reason is None:  # all of them: the files that match but rg passed over are named
        hidden, finished = _rg_skipped(ctx, pattern, target, deadline,
                                       {hit[0] for hit in hits if not isinstance(hit, str)})
        notes = [_passed_over(hidden)] * bool(hidden) + [
            "the check for files the search passed over (binary, ignored) did not finish"
        ] * (not finished)
        return [*hits, "; ".join(notes)] if notes else hits
    return hits


def _rg(ctx: Context, flags: list[str], pattern: str, target: str, sinks: tuple[Sink, Sink],
        deadline: float, should_stop: Callable[[], str | None]) -> tuple[int, str | None] | None:
    """Run ripgrep over `target` as every search does (hidden files, never .git or ours) with
    `flags`, into `sinks`; (exit code, why it was stopped), or None when it cannot start."""
    assert ctx.rg is not None  # callers check there is an rg
    cmd = [ctx.rg, "--no-config", "--null", *flags, "--hidden", "--glob", "!.git",
           *(f"--glob=!/{name}" for name in sorted(ctx.hidden)), "-e", pattern, "--", target]
    try:
        proc = subprocess.Popen(cmd, cwd=ctx.root, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError:
        return None
    reason = _pump(proc, sinks, deadline, should_stop)
    if reason:
        proc.kill()
    _finish(proc)
    return proc.returncode, reason


def _rg_skipped(ctx: Context, pattern: str, target: str, deadline: float,
                seen: set[str]) -> tuple[list[str], bool]:
    """Files that match when nothing is ignored, binary files are read as text and no byte
    order mark is taken for an encoding, less the ones the search showed: a repository can
    hide a file from rg (a NUL byte, an .ignore, `FF FE` before ASCII lines). (The names,
    whether the pass finished: killed, out of time or out of memory, it says nothing.)"""
    out = _Capture(1 << 20)
    ran = _rg(ctx, ["--files-with-matches", "--text", "--no-ignore", "--encoding", "none"],
              pattern, target, (out, _Capture(4096)), deadline, lambda: None)
    names = [n[2:] if n.startswith("./") else n for n in out.text().split("\0") if n]
    finished = ran is not None and ran[1] is None and ran[0] in (0, 1)
    return sorted(set(names) - seen), finished


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _passed_over(names: list[str]) -> str:
    """What the result says of files that match but were not shown (both engines alike)."""
    verb = "match" if len(names) != 1 else "matches"
    return (f"{_count(len(names), 'file')} the search passed over (binary, or ignored by "
            f".gitignore/.ignore) also {verb}: {_names(names)}")


def _names(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def _rg_error(pattern: str, stderr: str) -> None:
    """Raise the ToolError for an rg failure; return when only rg rejects the pattern."""
    if "regex" not in stderr and "error:" not in stderr:
        raise ToolError(f"search failed: {stderr.strip()[-500:]}")
    try:
        re.compile(pattern)
        return None
    except (re.error, OverflowError, RecursionError):
        reason = stderr.strip().splitlines()[-1].replace("error: ", "") if stderr.strip() else ""
        raise ToolError(f"invalid regex '{pattern}': {reason}") from None


def _parse_rg(line: bytes) -> Hit:
    raw, _, rest = line.partition(b"\0")
    number, _, text = rest.partition(b":")
    name = raw.decode("utf-8", "replace")
    name = name[2:] if name.startswith("./") else name
    return name, int(number) if number.isdigit() else 0, text.decode("utf-8", "replace")


def _search_py(ctx: Context, real: str, regex: re.Pattern[str], limit: int,
               deadline: float) -> Hits:
    """Hits from a Python scan in path order; a trailing str says why they are incomplete.

    The scan runs in a child process that is killed at the deadline: `re` cannot be stopped
    mid-match, and a crafted pattern (`(?=a)(a|a)+b` on a line of a's) backtracks for ages."""
    try:
        reader, writer = os.pipe()
    except OSError as exc:
        raise ToolError(f"search failed: {exc.strerror}") from None
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        raise ToolError("search failed: no process could start for the Python scan (the "
                        "sandbox's process limit?); try again once commands have ended") from None
    if pid == 0:  # the child: scan, send each file's hits as a JSON line, never return
        os.close(reader)
        _scan_child(ctx, real, regex, limit, deadline, writer)
    os.close(writer)
    hits: Hits = []
    skipped: dict[str, list[str]] = {"big": [], "binary": []}
    try:
        timed_out = not _read_hits(reader, hits, skipped, deadline)
    finally:
        os.close(reader)
    if timed_out:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    status = 0
    with contextlib.suppress(ChildProcessError):
        status = os.waitpid(pid, 0)[1]
    if timed_out:
        return [*hits, TIMED_OUT]
    if status:  # a MemoryError, the OOM killer: what it did not send was not searched
        return [*hits, "the Python scan ended early (out of memory?); narrow the path"]
    why = []
    if skipped["big"]:
        why.append(f"{_count(len(skipped['big']), 'file')} over {FALLBACK_MAX_BYTES >> 20} MiB "
                   f"not searched by this pattern's Python scan: {_names(skipped['big'])}")
    if skipped["binary"]:
        why.append(_passed_over(skipped["binary"]))
    return [*hits, "; ".join(why)] if why else hits


def _scan_child(ctx: Context, real: str, regex: re.Pattern[str], limit: int,
                deadline: float, writer: int) -> NoReturn:
    code = 0
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # ends it even inside a match
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # out of memory, the kernel ends the scan first, not the toolbox
        signal.alarm(max(1, int(deadline - time.monotonic()) + 2))
        found = 0
        for name in _walk_files(ctx, real):
            hits = _grep_file(ctx, name, regex, limit - found)
            if hits:
                data = json.dumps({hits: rel(ctx, name)} if isinstance(hits, str) else hits)
                _write_all(writer, data.encode() + b"\n")
            found += 0 if isinstance(hits, str) else len(hits)
            if found > limit or time.monotonic() > deadline:
                break
    except BaseException:  # nothing reaches the toolbox's stdout or stderr
        code = 1
    os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _read_hits(reader: int, hits: Hits, skipped: dict[str, list[str]],
               deadline: float) -> bool:
    """The scan's JSON lines (a file's hits, or a file it skipped) into `hits` and `skipped`;
    False when the deadline came first."""
    buffer = b""
    with selectors.DefaultSelector() as sel:
        sel.register(reader, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return False
            chunk = os.read(reader, CHUNK)
            if not chunk:
                return True
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                value = json.loads(line)
                if isinstance(value, dict):
                    for why, name in value.items():
                        skipped[why].append(str(name))
                else:
                    hits.extend((name, number, text) for name, number, text in value)


def _walk_files(ctx: Context, real: str) -> Iterator[str]:
    """Regular files under real (or real itself), skipping .git, hidden names and symlinks."""
    if not os.path.isdir(real):
        yield real
        return
    for top, dirs, files in os.walk(real):
        dirs[:] = sorted(d for d in dirs if not _skipped(ctx, top, d)
                         and not os.path.islink(os.path.join(top, d)))
        for name in sorted(files):
            path = os.path.join(top, name)
            if not _skipped(ctx, top, name) and not os.path.islink(path):
                yield path


def _skipped(ctx: Context, parent: str, name: str) -> bool:
    return name == ".git" or (name in ctx.hidden and parent == ctx.root)


def _grep_file(ctx: Context, path: str, regex: re.Pattern[str], limit: int) -> list[Hit] | str:
    """Up to limit + 1 matching lines of a file; "big" when it is too big to scan here,
    "binary" when it has a NUL byte and matches (its lines are not shown)."""
    try:  # never blocks: a FIFO with no writer is opened, seen and skipped
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return []
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return []
        if info.st_size > FALLBACK_MAX_BYTES:
            return "big"  # held whole in memory here, and the sandbox's is small: said so
        try:
            data = f.read(FALLBACK_MAX_BYTES + 1)
        except OSError:
            return []
    if len(data) > FALLBACK_MAX_BYTES:
        return "big"
    binary = b"\0" in data
    text = data.decode("utf-8", "replace")
    del data
    if not regex.search(text):  # one C-speed pass rules out most files
        return []
    if binary:
        return "binary"
    name, start, number = rel(ctx, path), 0, 0
    hits: list[Hit] = []
    while start < len(text) and len(hits) <= limit:  # line by line, never all lines at once
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        number += 1
        line = text[start:end]
        if regex.search(line):
            hits.append((name, number, _clip(line)))
        start = end + 1
    return hits


def _clip(line: str) -> str:
    if len(line.encode("utf-8", "replace")) <= SEARCH_COLUMNS:
        return line
    return line.encode("utf-8", "replace")[:SEARCH_COLUMNS].decode("utf-8", "ignore") + (
        LONG_LINE_MARK)


# -- list_files -------------------------------------------------------------------------------


def tool_list_files(ctx: Context, path: str = ".", glob: str | None = None,
                    depth: int | None = None) -> Result:
    """Entries under a directory, relative to the root, directories ending in '/'."""
    if depth is not None and depth < 1:
        raise ToolError("argument 'depth' must be 1 or more")
    real = resolve(ctx, path)
    if not os.path.isdir(real):
        os.stat(real)  # a clear "file not found" when missing
        return ok(rel(ctx, real), entries=1, truncated=False, depth=0)
    depth = depth or (LIST_GLOB_DEPTH if glob else LIST_DEPTH)
    found, more, deeper = _collect(ctx, real, glob, depth)
    found.sort(key=lambda entry: entry.rstrip("/").split("/"))
    lines = list(found) or [f"no entries match '{glob}' in {path}" if glob else "(empty directory)"]
    if more:
        lines.append(f"[stopped at {LIST_MAX_ENTRIES} entries; pass a subdirectory as path, or "
                     "use glob or depth to narrow]")
    if deeper:
        lines.append(f"[directories deeper than depth={depth} are not expanded; pass one as path, "
                     "or a bigger depth]")
    return ok("\n".join(lines), entries=len(found), truncated=more, depth=depth)


def _collect(ctx: Context, top: str, glob: str | None,
             depth: int) -> tuple[list[str], bool, bool]:
    """Breadth first, so a cap keeps the top levels whole: (entries, capped, deeper dirs)."""
    found: list[str]
    found, queue, deeper = [], deque([(top, 1)]), False
    while queue:
        directory, level = queue.popleft()
        for entry in _scan(directory, first=directory == top):
            if _skipped(ctx, directory, entry.name):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            name = rel(ctx, entry.path) + ("/" if is_dir else "")
            if glob is None or _glob_match(glob, name):
                found.append(name)
                if len(found) > LIST_MAX_ENTRIES:
                    return found[:-1], True, deeper
            if is_dir and level < depth:
                queue.append((entry.path, level + 1))
            deeper = deeper or (is_dir and level >= depth)
    return found, False, deeper


def _scan(directory: str, first: bool) -> list[os.DirEntry[str]]:
    """Sorted directory entries; an unreadable subdirectory is skipped, not fatal."""
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda entry: entry.name)
    except OSError:
        if first:
            raise
        return []


def _glob_match(glob: str, name: str) -> bool:
    name = name.rstrip("/")
    base = name.rsplit("/", 1)[-1]
    if "/" not in glob:
        return fnmatch.fnmatchcase(base, glob)
    if glob.startswith("**/") and fnmatch.fnmatchcase(base, glob[3:]):
        return True
    return fnmatch.fnmatchcase(name, glob)


# -- change tracking --------------------------------------------------------------------------


class Snapshot:
    """One walk of the tree under the root: lstat fields by relative path, hashes, link targets.

    `stats[path]` is `_entry(lstat)`; an entry whose tuple did not change since the last walk
    keeps its hash without being read again. `gits` lists the `.git` entries met (not entered).
    """

    hashes: dict[str, str]  # sha256 of regular files
    unhashed: dict[str, str]  # why a regular file has no hash
    targets: dict[str, str]  # symlink targets

    def __init__(self, stats: dict[str, Lstat], complete: bool, gits: list[str]) -> None:
        self.stats, self.complete, self.gits = stats, complete, gits
        self.hashes, self.unhashed, self.targets = {}, {}, {}
        self.hash_left = HASH_WALK_MAX

    @property
    def size(self) -> int:
        """Bytes the tree takes on disk."""
        return _size(self.stats)


def _entry(st: os.stat_result) -> Lstat:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_blocks,
            st.st_nlink)


def _opaque(name: str) -> bool:
    """Names a copy's manifest lists but never brings back: git's files, and quarantined ones."""
    return _is_git(name) or name.startswith(QUARANTINE)


def _is_git(name: str) -> bool:
    # Any case: on a case-insensitive host file system git takes .GIT for .git.
    return len(name) == 4 and name.lower() == ".git"


def _walk(ctx: Context) -> Walk:
    """(stats, complete, .git paths, directories that could not be listed) under the root.

    Everything is entered except read-only mount points (the protected .git and hook paths:
    nothing below them can change). A directory a command made unreadable is opened for the
    walk and closed again after it: what it holds still counts, for the audit and the budget.
    """
    reopened: Reopened = []
    try:
        return _walk_tree(ctx, reopened)
    finally:
        for path, ino, mode in reversed(reopened):  # deepest first, as they were opened
            with contextlib.suppress(OSError):
                _chmod_nofollow(ctx.root, path, ino, mode, kind=stat.S_IFDIR)


def _walk_tree(ctx: Context, reopened: Reopened) -> Walk:
    stats: dict[str, Lstat] = {}
    gits: list[str] = []
    unlisted: list[str] = []
    stack = [("", ctx.root)]
    frozen = _readonly_mounts(ctx.root)
    while stack:
        prefix, directory = stack.pop()
        for entry in _listing(ctx, directory, unlisted, prefix, reopened):
            if not prefix and entry.name in ctx.hidden:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            path = prefix + entry.name
            stats[path] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                           st.st_blocks, st.st_nlink)  # _entry(st), inline: the hot loop
            if _is_git(entry.name):
                gits.append(path)
            if stat.S_ISDIR(st.st_mode) and entry.path not in frozen:
                stack.append((path + "/", entry.path))
            if len(stats) >= TRACK_MAX_ENTRIES:
                return stats, False, gits, unlisted
    return stats, True, gits, unlisted


def _listing(ctx: Context, directory: str, unlisted: list[str], prefix: str,
             reopened: Reopened) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except PermissionError:
        if _reopen(ctx, directory, prefix, reopened):
            with contextlib.suppress(OSError), os.scandir(directory) as it:
                return list(it)
    except OSError:
        pass
    unlisted.append(prefix)  # gone, or still unreadable: what it held stays unknown
    return []


def _reopen(ctx: Context, directory: str, prefix: str, reopened: Reopened) -> bool:
    """Give a directory a command made unreadable (ours: same uid) read and search rights
    for the walk; _walk puts its mode back afterwards."""
    if not prefix:
        return False
    path = prefix.rstrip("/")
    try:
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            return False
        _chmod_nofollow(ctx.root, path, st.st_ino, stat.S_IMODE(st.st_mode) | 0o500,
                        kind=stat.S_IFDIR)
    except OSError:
        return False
    reopened.append((path, st.st_ino, stat.S_IMODE(st.st_mode)))
    return True


def _size(stats: dict[str, Lstat]) -> int:
    """Bytes allocated (st_blocks), hard links counted once."""
    total = sum(st[5] for st in stats.values())
    linked: dict[int, tuple[int, int]] = {}  # inode -> (blocks, names counted)
    for st in stats.values():
        if st[6] > 1 and not stat.S_ISDIR(st[0]):
            blocks, seen = linked.get(st[4], (st[5], 0))
            linked[st[4]] = (blocks, seen + 1)
    return (total - sum(blocks * (seen - 1) for blocks, seen in linked.values())) * 512


def _tree_size(ctx: Context) -> int:
    """The project's size on disk now (a stat-only walk)."""
    return _size(_walk(ctx)[0])


def _tree_measure(ctx: Context) -> tuple[int, int, bool]:
    """(bytes on disk, entries, whether the walk saw everything) of the project now."""
    stats, complete, _, unlisted = _walk(ctx)
    return _size(stats), len(stats), complete and not unlisted


def _snapshot(ctx: Context, old: Snapshot | None) -> Snapshot:
    """A new walk; what did not change is taken from `old`, what did is hashed or read."""
    stats, complete, gits, unlisted = _walk(ctx)
    snap = Snapshot(stats, complete and not unlisted, gits)
    before = {} if old is None else old.stats
    if old is not None:
        snap.hashes, snap.unhashed = dict(old.hashes), dict(old.unhashed)
        snap.targets = dict(old.targets)
        _carry_unseen(old, snap, complete, unlisted)
    for path, st in stats.items():
        if before.get(path) != st:
            _describe(ctx, snap, path, st)
    for path in before.keys() - stats.keys():
        _forget(snap, path)
    return snap


def _carry_unseen(old: Snapshot, snap: Snapshot, complete: bool, unlisted: list[str]) -> None:
    """Keep what a capped walk or an unreadable directory hid: unknown is not deleted."""
    if complete and not unlisted:
        return
    for path in old.stats.keys() - snap.stats.keys():
        if not complete or any(path.startswith(prefix) for prefix in unlisted):
            snap.stats[path] = old.stats[path]
            if path in old.gits:
                snap.gits.append(path)


def _forget(snap: Snapshot, path: str) -> None:
    for table in (snap.hashes, snap.unhashed, snap.targets):
        table.pop(path, None)


def _describe(ctx: Context, snap: Snapshot, path: str, st: Lstat) -> None:
    """Hash a new or changed regular file, read a new or changed symlink."""
    _forget(snap, path)
    if stat.S_ISREG(st[0]):
        _hash_into(ctx, snap, path, st)
    elif stat.S_ISLNK(st[0]):
        with contextlib.suppress(OSError):
            snap.targets[path] = os.readlink(os.path.join(ctx.root, path))


def _hash_into(ctx: Context, snap: Snapshot, path: str, st: Lstat) -> None:
    size = st[1]
    if size > HASH_FILE_MAX:
        snap.unhashed[path] = f"not hashed: larger than {HASH_FILE_MAX >> 20} MiB"
    elif size > snap.hash_left:
        snap.unhashed[path] = f"not hashed: over the {HASH_WALK_MAX >> 20} MiB hashed per walk"
    else:
        snap.hash_left -= size
        digest, why = _sha256(os.path.join(ctx.root, path), st[4])
        if digest:
            snap.hashes[path] = digest
        else:
            assert why is not None  # _sha256 says why whenever it gives no digest
            snap.unhashed[path] = why


def _sha256(path: str, ino: int) -> tuple[str | None, str | None]:
    """(hex digest, None) of a regular file, or (None, why not); never follows a link or blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_ino != ino:
                return None, "not hashed: replaced while being read"
            digest = hashlib.sha256()
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        return None, f"not hashed: {exc.strerror or exc}"
    return digest.hexdigest(), None


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def _diff(old: Snapshot, new: Snapshot) -> list[Change]:
    """Sorted (path, change) pairs from `old` to `new`; contents, not timestamps, decide."""
    found: list[Change] = []
    for path, st in new.stats.items():
        prev = old.stats.get(path)
        if prev is None:
            found.append((path, "created"))
        elif prev != st:
            change = _change_kind(old, new, path, prev, st)
            if change:
                found.append((path, change))
    found += [(path, "deleted") for path in old.stats.keys() - new.stats.keys()]
    found.sort()
    return found


def _change_kind(old: Snapshot, new: Snapshot, path: str, prev: Lstat, st: Lstat) -> str | None:
    if _kind(prev[0]) != _kind(st[0]):
        return "type"
    if stat.S_ISREG(st[0]) and _content_changed(old, new, path, prev, st):
        return "modified"
    if stat.S_ISLNK(st[0]) and old.targets.get(path) != new.targets.get(path):
        return "modified"
    return "mode" if stat.S_IMODE(prev[0]) != stat.S_IMODE(st[0]) else None


def _content_changed(old: Snapshot, new: Snapshot, path: str, prev: Lstat, st: Lstat) -> bool:
    before, after = old.hashes.get(path), new.hashes.get(path)
    if before and after:
        return before != after
    # Not hashed: size, mtime or ctime tell (a command can set mtime back, never ctime).
    return prev[1] != st[1] or prev[2] != st[2] or prev[3] != st[3]


def _change_record(old: Snapshot, new: Snapshot, path: str, change: str) -> ChangeRecord:
    """One entry of meta["changes"] / meta["outside_changes"]."""
    a, b = old.stats.get(path), new.stats.get(path)
    st = b or a
    assert st is not None  # a change is of a path in one walk or the other
    record: ChangeRecord = {
        "path": path, "change": change, "kind": _kind(st[0]),
        "sha256_before": _file_hash(old, path, a), "sha256_after": _file_hash(new, path, b),
        "size_before": _file_size(a), "size_after": _file_size(b),
        "mode_before": _octal(a), "mode_after": _octal(b),
        "target": new.targets.get(path) if b else old.targets.get(path)}
    why = (b and new.unhashed.get(path)) or (a and old.unhashed.get(path))
    if why:
        record["unhashed"] = why
    return record


def _file_hash(snap: Snapshot, path: str, st: Lstat | None) -> str | None:
    return snap.hashes.get(path) if st and stat.S_ISREG(st[0]) else None


def _file_size(st: Lstat | None) -> int | None:
    return st[1] if st and stat.S_ISREG(st[0]) else None


def _octal(st: Lstat | None) -> str | None:
    """Permission bits as the 4-digit octal text chmod takes, e.g. '0644' or '4755'."""
    return None if st is None else f"{stat.S_IMODE(st[0]):04o}"


def _counts(found: list[Change]) -> str:
    """'2 created, 1 modified' for a list of (path, change)."""
    count = Counter(change for _, change in found)
    words = (("created", "created"), ("modified", "modified"), ("deleted", "deleted"),
             ("mode", "mode changed"), ("type", "type changed"))
    return ", ".join(f"{count[key]} {word}" for key, word in words if count[key])


def _coarse_now_ns() -> int:
    """Now, on the clock file timestamps come from (Linux stamps files with the coarse clock,
    up to a tick behind time.time_ns(): a file made right after us must not look older)."""
    try:
        return time.clock_gettime_ns(5)  # CLOCK_REALTIME_COARSE
    except (AttributeError, OSError):
        return time.time_ns()


class Tracker:
    """The index of the project between calls, and which .git entries were there before."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.index: Snapshot | None = None  # the last walk (None before the first)
        self.started_ns = _coarse_now_ns()
        # .git entries older than the session: path -> identity
        self.known_git: dict[str, Identity | None] = {}
        # .git entries our commands made that could not be disabled
        self.own_git: set[str] = set()

    def start(self) -> None:
        """The first index; .git entries made since the toolbox started count as new."""
        self.index = _snapshot(self.ctx, None)
        self.known_git = {path: self.identity(self.index, path) for path in self.index.gits
                          if self.index.stats[path][3] < self.started_ns}

    def rewalk(self) -> tuple[Snapshot, Snapshot, list[Change]]:
        """(old index, new index, changes between them); the new one becomes the index."""
        assert self.index is not None  # start() came first
        old, self.index = self.index, _snapshot(self.ctx, self.index)
        return old, self.index, _diff(old, self.index)

    @staticmethod
    def identity(snap: Snapshot, path: str) -> Identity | None:
        """What makes a .git entry the same one: its kind, inode and link target."""
        st = snap.stats.get(path)
        return None if st is None else (_kind(st[0]), st[4], snap.targets.get(path))

    def foreign_git(self) -> list[str]:
        """.git entries that appeared or were replaced during the session, not by our commands."""
        assert self.index is not None  # start() came first
        return [path for path in self.index.gits if path not in self.own_git
                and self.known_git.get(path) != self.identity(self.index, path)]

    def refresh(self, path: str) -> None:
        """Re-read one entry's lstat after we changed it ourselves (its content is the same)."""
        assert self.index is not None  # start() came first
        self.index.stats[path] = _entry(os.lstat(os.path.join(self.ctx.root, path)))

    def rename(self, path: str, new_path: str) -> None:
        """Move an entry we renamed, and everything indexed below it, to its new name."""
        assert self.index is not None  # start() came first
        below = path + "/"
        for old in [p for p in self.index.stats if p == path or p.startswith(below)]:
            moved = new_path + old[len(path):]
            self.index.stats[moved] = self.index.stats.pop(old)
            for table in (self.index.hashes, self.index.unhashed, self.index.targets):
                if old in table:
                    table[moved] = table.pop(old)
        self.index.gits = [g for g in self.index.gits if g != path and not g.startswith(below)]
        self.refresh(new_path)

    def note_write(self, real: str, digest: str) -> None:
        """A write_file/edit_file result, so the next walk does not call it an outside change."""
        path = rel(self.ctx, real)
        parts = path.split("/")
        if self.index is None or parts[0] in self.ctx.hidden:
            return
        for i in range(1, len(parts) + 1):  # the file and the directories made for it
            sub = "/".join(parts[:i])
            if i == len(parts) or sub not in self.index.stats:
                self.refresh(sub)
        _forget(self.index, path)
        self.index.hashes[path] = digest
        if _is_git(parts[-1]) and path not in self.index.gits:
            self.index.gits.append(path)


class _Tracking:
    """What tracking adds to one shell call's result: meta keys, lines for the model, verdict."""

    meta: dict[str, Any]
    lines: list[str]
    status: str | None  # the status line, when tracking decides it (the disk budget)
    fsize_note: str | None

    def __init__(self) -> None:
        self.meta, self.lines, self.failed, self.status = {}, [], False, None
        self.fsize_note = None

    def add_changes(self, key: str, old: Snapshot, new: Snapshot, found: list[Change]) -> None:
        """meta[key] (capped), key_total and key_truncated for a list of (path, change)."""
        self.meta[key] = [_change_record(old, new, path, change)
                          for path, change in found[:CHANGES_MAX]]
        self.meta[f"{key}_total"] = len(found)
        self.meta[f"{key}_truncated"] = len(found) > CHANGES_MAX


def _track_before(ctx: Context, report: _Tracking) -> Result | None:
    """Index the tree before a command: outside changes, the disk baseline, the git guard."""
    tracker = ctx.tracker
    assert tracker is not None  # called only when tracking is on
    if tracker.index is None:
        tracker.start()
    else:
        old, new, found = tracker.rewalk()
        if found:
            report.add_changes("outside_changes", old, new, found)
            report.lines.append("note: files changed outside the sandbox since the last call "
                                f"(not by you): {_counts(found)}")
    assert tracker.index is not None  # made just above
    if ctx.disk is not None:
        ctx.disk.settle(tracker.index.size, len(tracker.index.stats))
    return _git_guard(ctx, report) if ctx.git_guard else None


def _git_guard(ctx: Context, report: _Tracking) -> Result | None:
    """A refusal when a .git appeared from outside and is not mounted read-only; else None."""
    assert ctx.tracker is not None  # called only when tracking is on
    mounts = _readonly_mounts(ctx.root)
    found = [path for path in ctx.tracker.foreign_git()
             if os.path.join(ctx.root, path) not in mounts]
    if not found:
        return None
    shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    return fail(f"a git repository appeared in the project from outside the sandbox during this "
                f"session ({shown}); the command was not run. The sandbox has to be restarted "
                "with it mounted read-only first.", remount_needed=found, **report.meta)


def _mount_table(root: str, mountinfo: str = "/proc/self/mountinfo") -> dict[bytes, str]:
    """{mount id: mount point} of the mounts below root (their ids survive a rename)."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    table: dict[bytes, str] = {}
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 5:
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]),
                                       fields[4]))
            if point != root and _inside(root, point):
                table[fields[0]] = point
    return table


def _restore_mounts(ctx: Context, report: _Tracking) -> None:
    """Put back a protected mount a command moved by renaming a directory above it.

    A read-only mount (a hooks dir, an included git config) moves with its parent: `mv .husky
    .husky.old && mkdir -p .husky/_` would leave a writable look-alike where git looks. The
    look-alike is moved aside and the renamed directory is renamed back.
    """
    moved = [(ctx.mounts[i], now) for i, now in _mount_table(ctx.root).items()
             if i in ctx.mounts and now != ctx.mounts[i]]
    done: list[MountRecord] = []
    renames: dict[tuple[str, str], MountRecord] = {}  # two mounts in one moved directory: once
    for was, now in moved:
        a, b = rel(ctx, was).split("/"), rel(ctx, now).split("/")
        keep = 0
        while keep < min(len(a), len(b)) - 1 and a[-1 - keep] == b[-1 - keep]:
            keep += 1
        old_dir = os.path.join(ctx.root, *a[:len(a) - keep])
        new_dir = os.path.join(ctx.root, *b[:len(b) - keep])
        if (old_dir, new_dir) not in renames:
            renames[old_dir, new_dir] = _move_back(ctx, old_dir, new_dir, was)
        done.append({**renames[old_dir, new_dir], "path": rel(ctx, was)})
    for record in done:
        report.lines.append(f"{record['path']} is protected (git on the host runs it) and was "
                            "moved by renaming a directory above it; "
                            + _put_back(record))
    if done:
        report.meta["protected_restored"] = done
        assert ctx.tracker is not None  # called only when tracking is on
        ctx.tracker.index = _snapshot(ctx, ctx.tracker.index)  # our renames are not theirs


def _put_back(record: MountRecord) -> str:
    if "error" in record:
        return f"it could not be put back: {record['error']}"
    if "replaced_by" in record:
        return f"it was put back (what took its place is now {record['replaced_by']})"
    return "it was put back"


def _move_back(ctx: Context, old_dir: str, new_dir: str, was: str) -> MountRecord:
    record: MountRecord = {"path": rel(ctx, was), "moved_to": rel(ctx, new_dir)}
    try:
        if os.path.lexists(old_dir):
            aside = old_dir + ".replaced-" + os.urandom(4).hex()
            os.rename(old_dir, aside)
            record["replaced_by"] = rel(ctx, aside)
        os.rename(new_dir, old_dir)
    except OSError as exc:
        record["error"] = exc.strerror or str(exc)
    return record


def _readonly_mounts(root: str, mountinfo: str = "/proc/self/mountinfo") -> set[str]:
    """Mount points at or under root that are mounted read-only."""
    try:
        with open(mountinfo, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    found: set[str] = set()
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 5 and b"ro" in fields[5].split(b","):
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]),
                                       fields[4]))
            if _inside(root, point):
                found.add(point)
    return found


def _track_after(ctx: Context, report: _Tracking, reason: str | None) -> None:
    """Index the tree after a command: its changes, then set-id bits and new .git entries."""
    assert ctx.tracker is not None  # called only when tracking is on
    old, new, found = ctx.tracker.rewalk()
    report.add_changes("changes", old, new, found)
    report.meta["changes_incomplete"] = not (old.complete and new.complete)
    if found:
        report.lines.append(f"files changed: {_counts(found)}")
    if report.meta["changes_incomplete"]:
        report.lines.append(f"note: the project has more than {TRACK_MAX_ENTRIES} entries; "
                            "only part of it was checked for changes")
    # Each guard runs whatever happened to the one before: a bug in one must not skip the rest.
    _guard(report, "set-id", lambda: _clear_setid(ctx, old, found, report))
    if ".git" in ctx.readonly:  # with --allow-git-writes the person allowed repositories
        _guard(report, "protected mount", lambda: _restore_mounts(ctx, report))
        _guard(report, ".git", lambda: _quarantine_git(ctx, old, report))
        _guard(report, "repository look-alike", lambda: _disable_gitdirs(ctx, found, report))
    if ctx.disk is not None:
        ctx.disk.size, ctx.disk.entries = new.size, len(new.stats)
        _disk_verdict(ctx.disk, report, reason)


def _guard(report: _Tracking, name: str, step: Callable[[], None]) -> None:
    try:
        step()
    except Exception as exc:  # reported to the model and the host; the other guards go on
        report.meta.setdefault("guard_errors", []).append(name)
        report.lines.append(f"internal error in the {name} check after the command: "
                            f"{type(exc).__name__}: {exc}")


# -- set-id bits and new .git entries ---------------------------------------------------------


def _clear_setid(ctx: Context, old: Snapshot, found: list[Change], report: _Tracking) -> None:
    """Drop set-id bits a command added: on the host such a file runs with its owner's rights."""
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    cleared: list[SetidRecord] = []
    for path, _ in found:
        st, prev = ctx.tracker.index.stats.get(path), old.stats.get(path)
        if st is None or not stat.S_ISREG(st[0]):
            continue
        added = st[0] & SETID & ~(prev[0] if prev and stat.S_ISREG(prev[0]) else 0)
        if added:
            cleared.append(_drop_bits(ctx, path, st, added))
    for record in cleared:
        bits = " and ".join(record["removed"]) + " bit" + "s" * (len(record["removed"]) > 1)
        if "error" in record:
            report.lines.append(f"could not remove the {bits} from ./{record['path']} "
                                f"({record['error']}): set-id files are not allowed in the project")
        else:
            report.lines.append(f"removed {bits} from ./{record['path']}: set-id files are not "
                                "allowed in the project")
    if cleared:
        report.meta["setid_cleared"] = cleared


def _drop_bits(ctx: Context, path: str, st: Lstat, bits: int) -> SetidRecord:
    names = [name for flag, name in ((stat.S_ISUID, "set-uid"), (stat.S_ISGID, "set-gid"))
             if bits & flag]
    record: SetidRecord = {"path": path, "removed": names, "mode_before": _octal(st)}
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    try:
        _chmod_nofollow(ctx.root, path, st[4], stat.S_IMODE(st[0]) & ~bits)
        ctx.tracker.refresh(path)
        record["mode_after"] = _octal(ctx.tracker.index.stats[path])
    except OSError as exc:
        record["error"] = exc.strerror or str(exc)
    return record


def _open_parent(root: str, path: str) -> tuple[int, str]:
    """(fd of path's directory, opened from the root without following any link; last name)."""
    *dirs, leaf = path.split("/")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in dirs:
            below = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd, leaf


def _chmod_nofollow(root: str, path: str, ino: int, mode: int, kind: int = stat.S_IFREG) -> None:
    """chmod root/path; a symlink swapped in anywhere on the way cannot redirect it."""
    parent, leaf = _open_parent(root, path)
    try:
        fd = os.open(leaf, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if stat.S_IFMT(info.st_mode) != kind or info.st_ino != ino:
            raise OSError(errno.ESTALE, "replaced since it was seen")
        os.chmod(f"/proc/self/fd/{fd}", mode)  # Linux has no fchmod on an O_PATH descriptor
    finally:
        os.close(fd)


def _quarantine_git(ctx: Context, old: Snapshot, report: _Tracking) -> None:
    """Rename .git entries a command made or replaced, so git on the host never honours them."""
    tracker = ctx.tracker
    assert tracker is not None and tracker.index is not None  # after _track_before
    made = [path for path in tracker.index.gits
            if tracker.identity(old, path) != tracker.identity(tracker.index, path)]
    if not made:
        return
    mounts = _readonly_mounts(ctx.root)
    done = [_disable_git(ctx, path) for path in made
            if os.path.join(ctx.root, path) not in mounts]
    for record in done:
        what = ("could not be disabled: " + record["error"] if "error" in record
                else f"was disabled (renamed to {record['renamed_to']})")
        report.lines.append("new git repositories inside the project are not allowed in the "
                            f"sandbox; {record['path']} {what}")
    if done:
        report.meta["git_quarantined"] = done


def _disable_git(ctx: Context, path: str) -> QuarantineRecord:
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    kind = _kind(ctx.tracker.index.stats[path][0])
    renamed = path[:-4] + QUARANTINE + os.urandom(4).hex()
    try:
        _rename_in_place(ctx, path, renamed)
        ctx.tracker.rename(path, renamed)
        if kind == "dir":  # not a repository under its new name either (cd into it + git)
            _rename_head(ctx, renamed)
    except OSError as exc:
        ctx.tracker.own_git.add(path)  # not "from outside": the git guard must not trip on it
        return {"path": path, "kind": kind, "renamed_to": None, "error": exc.strerror or str(exc)}
    return {"path": path, "kind": kind, "renamed_to": renamed}


def _rename_in_place(ctx: Context, path: str, renamed: str) -> None:
    """Rename an entry within its directory, never through a link; a directory the command
    made read-only (ours: same uid) is opened for the rename and closed again."""
    try:
        _rename_at(ctx.root, path, renamed)
    except PermissionError:
        folder = path.rsplit("/", 1)[0] if "/" in path else "."
        st = os.lstat(os.path.join(ctx.root, folder))
        if not stat.S_ISDIR(st.st_mode):
            raise
        _chmod_nofollow(ctx.root, folder, st.st_ino, stat.S_IMODE(st.st_mode) | 0o700,
                        kind=stat.S_IFDIR)
        try:
            _rename_at(ctx.root, path, renamed)
        finally:
            _chmod_nofollow(ctx.root, folder, st.st_ino, stat.S_IMODE(st.st_mode),
                            kind=stat.S_IFDIR)


def _rename_at(root: str, path: str, renamed: str) -> None:
    parent, leaf = _open_parent(root, path)
    try:
        os.rename(leaf, renamed.rsplit("/", 1)[-1], src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


GITDIR_PARTS = ("HEAD", "objects", "refs", "commondir")
"""What makes git take a directory for a repository (bare, or a .git under another name)."""
GITDIR_CODE = ("HEAD", "objects", "refs", "commondir", "config", "hooks")
"""Its parts a command may not write or complete: git on the host would act on them."""


def gitdir_shape(modes: dict[str, int]) -> bool:
    """Whether git could take a directory with these entries (name -> lstat mode) for a
    repository. Looser than git on purpose: git's own test (setup.c, is_git_directory) takes a
    HEAD that is a file or a symlink, and checks objects/ and refs/ with access(), which follows
    links and passes for an executable file; a commondir file points both elsewhere."""
    head = modes.get("HEAD")
    if head is None or stat.S_ISDIR(head):
        return False
    return ("objects" in modes and "refs" in modes) or "commondir" in modes


def _disable_gitdirs(ctx: Context, found: list[Change], report: _Tracking) -> None:
    """Directories a command turned into something git takes for a repository, whatever their
    name (`fake/` with HEAD, objects/, refs/ and a config with core.fsmonitor): their HEAD is
    renamed, so git on the host no longer sees a repository there."""
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    index, mounts = ctx.tracker.index, _readonly_mounts(ctx.root)
    touched = {path.rsplit("/", 1)[0] if "/" in path else "" for path, _ in found}
    suspects = sorted(d for d in touched | {p for p, _ in found} if _looks_like_gitdir(index, d)
                      and os.path.join(ctx.root, d) not in mounts)
    done: list[QuarantineRecord] = []
    for folder in suspects:
        prefix = folder + "/" if folder else ""
        if not any(p == prefix + part or p.startswith(prefix + part + "/")
                   for p, _ in found for part in GITDIR_CODE):
            continue  # the command neither completed it nor wrote what git would run
        head = prefix + "HEAD"
        renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
        record: QuarantineRecord = {"path": folder or ".", "kind": "gitdir", "renamed_to": renamed}
        try:
            _rename_in_place(ctx, head, renamed)
            index.stats.pop(head)
            ctx.tracker.refresh(renamed)
            if folder:
                ctx.tracker.refresh(folder)
        except OSError as exc:
            record.update({"renamed_to": None, "error": exc.strerror or str(exc)})
        done.append(record)
        report.lines.append(f"{record['path']} was made to look like a git repository; its HEAD "
                            + (f"was renamed to {renamed}" if record["renamed_to"]
                               else f"could not be renamed: {record['error']}")
                            + " so git on the host does not use it")
    if done:
        report.meta.setdefault("git_quarantined", []).extend(done)


def _rename_head(ctx: Context, folder: str) -> None:
    head = folder + "/HEAD"
    assert ctx.tracker is not None and ctx.tracker.index is not None  # after _track_before
    if head in ctx.tracker.index.stats:
        renamed = head + "." + QUARANTINE.strip(".") + os.urandom(4).hex()
        with contextlib.suppress(OSError):
            _rename_in_place(ctx, head, renamed)
            ctx.tracker.index.stats.pop(head)
            ctx.tracker.refresh(renamed)  # renaming changed its ctime: not a change of theirs
            ctx.tracker.refresh(folder)


def _looks_like_gitdir(index: Snapshot, folder: str) -> bool:
    prefix = folder + "/" if folder else ""
    stats = {part: index.stats.get(prefix + part) for part in GITDIR_PARTS}
    return gitdir_shape({part: st[0] for part, st in stats.items() if st is not None})


# -- disk budget ------------------------------------------------------------------------------


class Disk:
    """The disk budget: how much the project grew during the session, and the host's free space.

    Growth is measured with stat-only walks (st_blocks). Growth between our calls is someone
    else's (the person on the host): it moves the base, not the growth.
    """

    # None until the first settle() (stopped: until a watch kills a command); see __init__
    base: int | None
    size: int | None
    before: int | None
    base_entries: int | None
    entries: int | None
    stopped: tuple[int, int] | None

    def __init__(self, budget: int, min_free: int) -> None:
        self.budget, self.min_free = budget, min_free
        self.base = self.size = self.before = None  # project bytes: no growth / now / at start
        self.base_entries = self.entries = None  # files and directories: at the start / now
        self.stopped = None  # (growth, free) when a watch killed the last command

    def growth(self) -> int:
        """Bytes the project grew by in our calls."""
        return 0 if self.base is None or self.size is None else self.size - self.base

    def new_entries(self) -> int:
        """Files and directories the project gained in our calls."""
        if self.base_entries is None or self.entries is None:
            return 0
        return self.entries - self.base_entries

    def too_many(self) -> bool:
        """Whether the session added more entries than ENTRY_BUDGET (empty files cost inodes)."""
        return bool(self.budget) and self.new_entries() > ENTRY_BUDGET

    def settle(self, size: int, entries: int | None = None) -> None:
        """Before a command (or the first write), with the project's size now."""
        if self.base is None or self.size is None:
            self.base = self.size = size
        self.base += size - self.size
        self.size = self.before = size
        if entries is not None:
            if self.base_entries is None or self.entries is None:
                self.base_entries = self.entries = entries
            self.base_entries += entries - self.entries
            self.entries = entries

    def text(self, growth: int, free: int | None = None) -> str:
        """Why the disk is over its limit, for the model."""
        if self.too_many() and not 0 < self.budget < growth:
            return (f"disk budget exceeded: the project gained {self.new_entries():,} files and "
                    f"directories (at most {ENTRY_BUDGET:,} new ones per session)")
        if free is not None and free < self.min_free and not 0 < self.budget < growth:
            return (f"disk nearly full: {_human(free)} free, less than the "
                    f"{_human(self.min_free)} the sandbox keeps free")
        return (f"disk budget exceeded: the project grew by {_human(growth)} "
                f"(budget {_human(self.budget)})")


def _human(size: float) -> str:
    """1536 -> '1.5 KB' (binary units, as budgets are given)."""
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1024
        if size < 1024 or unit == "TB":
            return f"{size:.1f} {unit}"
    return ""


def _fs_usage(root: str) -> tuple[int, int]:
    """(used, free for us) bytes of the file system holding root; (0, huge) when unknown."""
    return _fs_counts(root)[:2]


def _fs_counts(root: str) -> tuple[int, int, int]:
    """(used bytes, free bytes for us, inodes used) of the file system holding root."""
    try:
        st = os.statvfs(root)
    except OSError:
        return 0, 1 << 62, 0
    return ((st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize,
            st.f_files - st.f_ffree)


class _DiskWatch:
    """Polled while a command runs: says "disk" when it must be killed.

    statvfs is cheap, so it is read every DISK_POLL_SECONDS; the file system's growth is only a
    hint (anything on the host writes there), confirmed by a walk measuring the project.
    """

    disk: Disk

    def __init__(self, ctx: Context) -> None:
        assert ctx.disk is not None  # watched only when there is a disk to watch
        self.ctx, self.disk = ctx, ctx.disk
        self.next_poll = self.next_walk = 0.0
        self.used0, _, self.inodes0 = _fs_counts(ctx.root)
        self.trigger = self._trigger(self.used0, self.disk.growth())
        self.inode_trigger = self.inodes0 + ENTRY_STEP

    def _trigger(self, used: int, growth: int) -> int | None:
        """The file system usage at which to measure the project again."""
        if not self.disk.budget:
            return None
        return used + max(self.disk.budget - growth, DISK_STEP)

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self.next_poll:
            return None
        self.next_poll = now + DISK_POLL_SECONDS
        used, free, inodes = _fs_counts(self.ctx.root)
        low = free < self.disk.min_free
        grew = self.trigger is not None and used >= self.trigger
        many = bool(self.disk.budget) and inodes >= self.inode_trigger
        if now < self.next_walk or not (low or grew or many):
            return None
        assert self.disk.before is not None and self.disk.base is not None  # settled first
        size, entries, complete = _tree_measure(self.ctx)
        if not complete:  # a walk that could not see everything: all new space may be ours
            size = max(size, self.disk.before + used - self.used0)
        # Others writing to the same file system must not keep us walking all the time.
        self.next_walk = now + max(DISK_WALK_GAP, 3 * (time.monotonic() - now))
        growth = size - self.disk.base
        self.disk.entries = entries
        if self.disk.too_many() or (size > self.disk.before and (
                low or 0 < self.disk.budget < growth)):
            self.disk.stopped = (growth, free)  # this command is adding to it
            return "disk"
        self.trigger = self._trigger(used, growth)  # the growth was someone else's
        self.inode_trigger = inodes + ENTRY_STEP
        return None


def _disk_verdict(disk: Disk, report: _Tracking, reason: str | None) -> None:
    """The disk lines of a shell result; ok false when this command took the project over."""
    assert disk.size is not None and disk.before is not None  # settled before the command
    growth = disk.growth()
    if disk.budget:
        report.meta["disk_growth"] = growth
    over = 0 < disk.budget < growth or disk.too_many()
    if reason == "disk":
        assert disk.stopped is not None  # the watch that said "disk" set it
        seen, free = disk.stopped
        report.status = (disk.text(max(growth, seen), free) + "; the command was killed. "
                         "Delete files you do not need to go on.")
    elif over and (disk.size > disk.before or disk.too_many()):
        report.lines.append(disk.text(growth) + ". Delete files you do not need to go on.")
    else:
        if over:
            report.lines.append(f"note: {disk.text(growth)}; delete files you do not need")
        return
    report.failed = report.meta["disk_budget_exceeded"] = True


def _check_write(ctx: Context, real: str, size: int) -> int:
    """Refuse a write that takes the project over its disk budget; returns the old allocation."""
    disk = ctx.disk
    try:
        old = os.lstat(real).st_blocks * 512
    except OSError:
        old = 0
    if disk is None:
        return old
    grow = -(-size // 4096) * 4096 - old  # whole blocks
    if grow > 0 and disk.budget and disk.base is None:
        disk.settle(_tree_size(ctx))  # no command yet: the project as it is now is the base
    if grow > 0 and 0 < disk.budget < disk.growth() + grow:
        raise ToolError(f"disk budget exceeded: writing {_human(size)} would make the project "
                        f"{_human(disk.growth() + grow)} bigger than at the start (budget "
                        f"{_human(disk.budget)}), so it was refused. Delete files you do not "
                        "need to go on.", disk_budget_exceeded=True)
    free = _fs_usage(ctx.root)[1]
    if grow > 0 and free - grow < disk.min_free:
        raise ToolError(disk.text(0, free) + f"; writing {_human(size)} was refused. Delete "
                        "files you do not need to go on.", disk_budget_exceeded=True)
    return old


def _note_write(ctx: Context, real: str, old: int, digest: str) -> None:
    """Keep the index and the disk's size in step with a write of ours."""
    if ctx.tracker is not None:
        ctx.tracker.note_write(real, digest)
    if ctx.disk is not None and ctx.disk.size is not None:
        ctx.disk.size += os.lstat(real).st_blocks * 512 - old


# -- run_shell_command ------------------------------------------------------------------------


def tool_run_shell_command(ctx: Context, command: str,
                           timeout_seconds: float | None = None) -> Result:
    """Run `sh -c command` in the root with a timeout, capped output and full cleanup."""
    timeout = ctx.default_timeout if timeout_seconds is None else timeout_seconds
    if timeout <= 0:
        raise ToolError("argument 'timeout_seconds' must be more than 0")
    if not command.strip():
        raise ToolError("command is empty")
    report = _Tracking()
    refused = _track_before(ctx, report) if ctx.tracker is not None else None
    if refused:
        return refused
    proc, reason, shell_exit, left, hits, out, err = _run(ctx, command, timeout)
    settled, more = _settled(ctx) if ctx.kill_all else (True, 0)
    left += more
    if not settled:
        report.failed, report.meta["processes_unstopped"] = True, True
        report.lines.append("warning: a process kept starting new ones faster than they could be "
                            "stopped; the sandbox is restarted (files outside the project are "
                            "lost)")
    if ctx.tracker is not None:  # after the sweep: nothing of the command runs any more
        _track_after(ctx, report, reason)
    report.fsize_note = _fsize_note(ctx)
    return _shell_result(proc, reason, timeout, shell_exit, left, hits, out, err, report)


def _run(ctx: Context, command: str, timeout: float) -> tuple[
        subprocess.Popen[bytes], str | None, int | None, int, tuple[int, int], _Capture, _Capture]:
    """(proc, reason it was stopped, shell exit, processes left, limit hits, stdout, stderr)."""
    forks, ooms = _limit_counters(ctx)
    proc, deadline = _spawn(ctx, command), time.monotonic() + timeout
    since = _start_tick(proc.pid)
    out, err = _Capture(ctx.max_output), _Capture(ctx.max_output)
    disk = _DiskWatch(ctx) if ctx.disk is not None else None
    progress = ctx.progress
    sinks: tuple[Sink, Sink] = (out, err) if progress is None else (
        progress.tee("stdout", out), progress.tee("stderr", err))

    def stop() -> str | None:
        """Stop a command drowning us in output, filling the disk, or left by its host."""
        if progress is not None:
            progress.flush()
        if out.total + err.total > OUTPUT_HARD_LIMIT:
            return "overflow"
        if ctx.hangup():
            ctx.orphaned = True
            return "orphaned"
        return disk() if disk else None

    tick = min(DISK_POLL_SECONDS if disk else HANGUP_SECONDS, HANGUP_SECONDS)
    if progress is not None:
        tick = min(tick, PROGRESS_SECONDS)
    reason = _pump(proc, sinks, deadline, stop, tick) or _wait(proc, deadline, stop, tick)
    shell_exit = proc.poll()
    left = _sweep(ctx, proc.pid, since)
    if reason:  # what the killed processes wrote before they died
        _pump(proc, sinks, time.monotonic() + DRAIN_SECONDS, lambda: None)
    if progress is not None:
        progress.flush(final=True)
    _finish(proc)
    _reap()
    forks_now, ooms_now = _limit_counters(ctx)
    return proc, reason, shell_exit, left, (forks_now - forks, ooms_now - ooms), out, err


def _fsize_note(ctx: Context) -> str | None:
    """What exit code 153 (128 + SIGXFSZ) means here, when a file size limit is set."""
    if ctx.fsize_limit is None:
        return None
    budget = ctx.disk is not None and ctx.disk.budget
    return "file size limit exceeded" + " (the disk budget)" * bool(budget)


def _spawn(ctx: Context, command: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[TOKEN_VAR] = ctx.token  # marks every process this call starts, see the docstring
    try:
        return subprocess.Popen(
            ["/bin/sh", "-c", SHELL_PRELUDE, "/bin/sh", command], cwd=ctx.root, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolError(f"could not start the command: {exc.strerror or exc}. The sandbox may be "
                        "out of processes or memory; wait a moment and try again.") from exc


def _wait(proc: subprocess.Popen[bytes], deadline: float,
          should_stop: Callable[[], str | None] | None = None,
          tick: float | None = None) -> str | None:
    """None when the shell exited by the deadline, else 'timeout' or what should_stop() says."""
    while True:
        left = max(0.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=min(left, tick) if tick else left)
            return None
        except subprocess.TimeoutExpired:
            if not tick or left <= tick:
                return "timeout"
        reason = should_stop() if should_stop else None
        if reason:
            return reason


def _finish(proc: subprocess.Popen[bytes]) -> None:
    """Reap a child whose pipes we are done with."""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _reap() -> None:
    """Collect exited children other than our own Popen ones (matters when we are PID 1)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _shell_result(proc: subprocess.Popen[bytes], reason: str | None, timeout: float,
                  shell_exit: int | None, left: int, hits: tuple[int, int], out: _Capture,
                  err: _Capture, report: _Tracking | None = None) -> Result:
    report = report or _Tracking()
    code: int | None
    sig: str | None
    code, sig = proc.returncode, None
    if reason:
        code, sig = None, "SIGKILL"
    elif code < 0:
        code, sig = 128 - code, _signal_name(-code)
    forks_refused, oom_kills = hits
    status = report.status or _status_line(reason, timeout, code, sig, shell_exit, oom_kills)
    if code == 153 and report.fsize_note:  # 128 + SIGXFSZ, at the limit the host set
        status += f" ({report.fsize_note})"
    head = [status, *_runaway_notes(forks_refused, oom_kills, 0 if reason else left)]
    head += report.lines
    meta = {"exit_code": code, "timed_out": reason == "timeout", "signal": sig,
            "stdout_bytes": out.total, "stderr_bytes": err.total,
            "truncated": bool(reason == "overflow" or out.cut or err.cut),
            "output_limit_exceeded": reason == "overflow", "killed_processes": left,
            "forks_refused": forks_refused, "oom_kills": oom_kills, **report.meta}
    body = head + [f"{name}:\n{cap.text().rstrip(chr(10))}"
                   for name, cap in (("stdout", out), ("stderr", err)) if cap.total]
    text = "\n".join(body if len(body) > len(head) else [*body, "(no output)"])
    good = code == 0 and not (reason or forks_refused or oom_kills or report.failed)
    return {"ok": good, "output": text, "meta": meta}


def _runaway_notes(forks_refused: int, oom_kills: int, left: int) -> list[str]:
    notes = []
    if forks_refused:
        notes.append(f"process limit hit: the sandbox refused {forks_refused} forks (a fork "
                     "bomb?); everything the command started was killed")
    if oom_kills:
        notes.append(f"out of memory: the sandbox's memory limit made the kernel kill "
                     f"{oom_kills} process{'es' * (oom_kills > 1)}")
    if left:
        notes.append(f"note: {left} background process{'es' * (left > 1)} still running "
                     "were killed (background jobs do not survive a call)")
    return notes


def _limit_counters(ctx: Context) -> tuple[int, int]:
    """(forks refused at the pids limit, OOM kills) so far in our cgroup; 0 when unknown."""
    return (_counter(ctx.pids_events, b"max"), _counter(ctx.memory_events, b"oom_kill"))


def _counter(path: str | None, key: bytes) -> int:
    if path is None:
        return 0
    try:
        with open(path, "rb") as f:
            for line in f:
                name, _, value = line.partition(b" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _status_line(reason: str | None, timeout: float, code: int | None, sig: str | None,
                 shell_exit: int | None, oom_kills: int) -> str:
    if reason == "timeout":
        line = f"timed out after {timeout:g}s; the command and its processes were killed"
        if shell_exit is not None:
            line += (f" (the shell itself exited with code {shell_exit}, but background "
                     "processes kept its output open; redirect theirs: cmd > file 2>&1 &)")
        return line
    if reason == "orphaned":
        return "the host's controller went away; the command and its processes were killed"
    if reason == "overflow":
        return (f"output limit exceeded: more than {OUTPUT_HARD_LIMIT // (1024 * 1024)} MB of "
                "output, so the command was killed. Redirect output to a file and read parts.")
    if sig or code == 137:
        why = "" if oom_kills or (sig and sig != "SIGKILL") else "; out of memory?"
        return f"exit_code: {code} (killed by {sig or 'SIGKILL'}{why})"
    return f"exit_code: {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Capture:
    """Head (2/3) and tail (1/3) of one output stream within a byte budget."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit * 2 // 3
        self.tail_cap = limit - self.head_cap
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        """Count a chunk; keep it if it falls in the head or the tail."""
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[:max(0, len(self.tail) - self.tail_cap)]

    @property
    def cut(self) -> bool:
        """Whether bytes were dropped between head and tail."""
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        """What the model sees, with a marker where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.cut:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


class _Lines:
    """Complete lines of a stream, up to a count."""

    lines: list[bytes]

    def __init__(self, limit: int) -> None:
        self.limit, self.lines, self.partial = limit, [], b""

    def add(self, chunk: bytes) -> None:
        """Split a chunk into lines, until there are enough."""
        if not self.full():
            parts = (self.partial + chunk).split(b"\n")
            self.partial = parts.pop()
            self.lines.extend(parts)

    def full(self) -> bool:
        """Whether the limit is reached."""
        return len(self.lines) >= self.limit

    def done(self) -> list[bytes]:
        """The lines, including an unterminated last one."""
        tail = [self.partial] if self.partial and not self.full() else []
        return (self.lines + tail)[:self.limit]


class _Progress:
    """A running command's output, sent as progress lines while it runs (rate-limited, capped)."""

    def __init__(self, out: Writer, rid: int | None) -> None:
        self.out, self.rid = out, rid
        self.pending = {"stdout": "", "stderr": ""}
        self.dropped = {"stdout": 0, "stderr": 0}
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                         for name in self.pending}
        self.sent, self.due = 0, 0.0

    def tee(self, stream: str, capture: _Capture) -> _Tee:
        """A sink for _pump that feeds `capture` and this stream's progress."""
        return _Tee(self, stream, capture)

    def feed(self, stream: str, chunk: bytes) -> None:
        """Keep the newest PROGRESS_CHARS of what `stream` wrote since the last line sent."""
        text = self.pending[stream] + self.decoders[stream].decode(chunk)
        if len(text) > PROGRESS_CHARS:
            self.dropped[stream] += len(text) - PROGRESS_CHARS
            text = text[-PROGRESS_CHARS:]
        self.pending[stream] = text

    def flush(self, final: bool = False) -> None:
        """Send what is pending, at most every PROGRESS_SECONDS (always when `final`)."""
        now = time.monotonic()
        if not final and now < self.due:
            return
        self.due = now + PROGRESS_SECONDS
        for stream, text in self.pending.items():
            if final:
                text += self.decoders[stream].decode(b"", final=True)
            if (text or self.dropped[stream]) and self.sent < PROGRESS_TOTAL:
                self.sent += len(text)
                send(self.out, {"id": self.rid, "progress": {
                    "stream": stream, "text": text, "dropped": self.dropped[stream]}})
            self.pending[stream], self.dropped[stream] = "", 0


class _Tee:
    """Feeds a chunk to a _Capture and to the progress of its stream."""

    def __init__(self, progress: _Progress, stream: str, capture: _Capture) -> None:
        self.progress, self.stream, self.capture = progress, stream, capture

    def add(self, chunk: bytes) -> None:
        """Capture the chunk and queue it as progress."""
        self.capture.add(chunk)
        self.progress.feed(self.stream, chunk)


def _pump(proc: subprocess.Popen[bytes], sinks: tuple[Sink, Sink], deadline: float,
          should_stop: Callable[[], str | None], tick: float | None = None) -> str | None:
    """Feed stdout and stderr to sinks until both close, the deadline, or should_stop() says.

    should_stop() runs after every read, and at least every `tick` seconds when one is given.
    """
    sel = selectors.DefaultSelector()
    for pipe, sink in ((proc.stdout, sinks[0]), (proc.stderr, sinks[1])):
        if pipe is not None and not pipe.closed:  # both are pipes: never None
            sel.register(pipe, selectors.EVENT_READ, sink)
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(min(remaining, tick) if tick else remaining):
                chunk = os.read(key.fd, CHUNK)
                if chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
            reason = should_stop()
            if reason:
                return reason
        return None
    finally:
        sel.close()


# -- process cleanup --------------------------------------------------------------------------


def _sweep(ctx: Context, pgid: int, since: int | None) -> int:
    """SIGKILL the command's group and strays until none is left; returns how many there were."""
    first: int | None
    deadline, first = time.monotonic() + SWEEP_SECONDS, None
    every = ctx.kill_all and since is not None
    while True:
        pids = [pid for pid in _strays(ctx, pgid, since) if pid != pgid]
        first = len(pids) if first is None else first
        if every:  # one kernel pass: a process that forks and exits in a loop cannot hop past
            _kill(-1)
        _kill(pgid, group=True)  # most leftovers at once; a fork bomb cannot outrun it
        for pid in pids:
            _kill(pid)
        if not pids or time.monotonic() > deadline:
            return first
        time.sleep(0.01)


def _settled(ctx: Context) -> tuple[bool, int]:
    """After the sweep, in a session container: whether nothing but ours is left running.

    gVisor's kill(-1) misses a process that clones and exits in a loop (a generation born
    during the pass), and its /proc/PID is gone before it can be read. But some generation is
    always alive, so /proc always lists one: kill(-1) again while anything of our uid (or an
    entry that vanished as it was read) is listed. (False when that never ends, the number
    of processes it killed.)"""
    deadline, uid = time.monotonic() + SETTLE_SECONDS, os.geteuid()
    seen: set[int] = set()
    while True:
        try:
            names = os.listdir("/proc")
        except OSError:
            return True, len(seen)  # nothing to go by; the sweep did what it could
        left = [int(name) for name in names if name.isdigit() and int(name) not in ctx.keep
                and _ours_or_gone(name, uid)]
        if not left:
            return True, len(seen)
        if time.monotonic() > deadline:
            return False, len(seen)
        seen.update(left)
        _kill(-1)
        for pid in left:
            _kill(pid)
        time.sleep(0.002)


def _ours_or_gone(pid: str, uid: int) -> bool:
    """A live process of ours (a zombie only when its threads live on), or an entry that
    vanished as it was read (a generation of a hopper)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        state = _proc_stat(pid)[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X") or _live_threads(pid)


def _alone_in_our_container() -> bool:
    """Whether kill(-1) reaches only what the sandbox's commands left: PID 1 is our init (so
    this is a session container's pid namespace) and the toolbox holds no capability (so only
    processes of its own uid, which are the commands', can be signalled). Never on a host."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            ours = b"# sandbox-agent init" in f.read()
        with open("/proc/self/status", "rb") as f:
            caps = [line.split()[1] for line in f if line.startswith(b"CapEff:")]
    except (OSError, IndexError):
        return False
    return ours and caps == [b"0000000000000000"]


def _kill(pid: int, group: bool = False) -> None:
    with contextlib.suppress(OSError):  # already gone
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)


def _strays(ctx: Context, pgid: int, since: int | None) -> list[int]:
    """Live processes a call left behind (see the module docstring for which)."""
    found: list[int]
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    uid, found = os.geteuid(), []
    for name in names:
        if not name.isdigit() or int(name) in ctx.keep:
            continue
        group = _live_group(name, since)
        if group is None or not _owned(name, uid):
            continue
        broad = ctx.broad_sweep and since is not None
        if group == pgid or broad or _has_token(name, ctx.token):
            found.append(int(name))
    return found


def _proc_stat(pid: int | str) -> list[bytes]:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _live_group(pid: str, since: int | None) -> int | None:
    """Process group of a live process started no earlier than `since`, else None.

    Nothing a command started can be older than its shell: this cheap test rules out most of
    /proc before any further syscall.
    """
    try:
        fields = _proc_stat(pid)
        group, start = int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
    if since is not None and start < since:
        return None
    if fields[0] in (b"Z", b"X") and not _live_threads(pid):
        return None  # a real zombie; a leader whose own thread exited lives on in the others
    return group


def _live_threads(pid: str) -> bool:
    """Whether a process whose leader is a zombie still has a running thread (the leader
    called exit(2) for itself alone: SIGKILL to its pid still ends them all). `Threads:` in
    its status counts them, under gVisor too, where /proc/PID/task cannot be listed."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1]) > 1
    except (OSError, IndexError, ValueError):
        pass
    return False


def _owned(pid: str, uid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def _start_tick(pid: int) -> int | None:
    try:
        return int(_proc_stat(pid)[19])
    except (OSError, IndexError, ValueError):
        return None  # without it the broad sweep stays off for this call


def _has_token(pid: str, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{TOKEN_VAR}={token}".encode() in f.read()
    except OSError:
        return False


def _which(name: str) -> str | None:
    """`shutil.which` for one program, on absolute PATH entries only (importing shutil took
    a tenth of the start in a container)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.path.isabs(folder) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _ancestors() -> list[int]:
    """Our ancestors' pids (never swept)."""
    found: list[int]
    found, pid = [], os.getppid()
    while pid > 1 and pid not in found:
        found.append(pid)
        try:
            pid = int(_proc_stat(pid)[1])
        except (OSError, IndexError, ValueError):
            break
    return found


# -- host operations: what the host asks of a copy workspace (never offered to the model) ------

READ_FILES_MAX = 16 * 1024 * 1024  # bytes of file content in one read_files answer


def _identity(path: str) -> RootIdentity | None:
    """What tells a directory apart across machines: device, inode and mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns}


def op_manifest(ctx: Context) -> Result:
    """Every entry of the tree with its kind, mode, size, hash and link target."""
    entries: list[ManifestEntry]
    skipped: list[list[str]]
    old = ctx.tracker.index if ctx.tracker is not None else None
    snap = _snapshot(ctx, old)  # what a command's walk already hashed is not read again
    entries, skipped = [], []
    for path, st in sorted(snap.stats.items()):
        parts = path.split("/")
        if any(_opaque(name) for name in parts[:-1]):
            continue  # inside a .git entry (a walk never enters one; a carried-over entry may be)
        if _opaque(parts[-1]):
            skipped.append([path, "git repository" if _is_git(parts[-1]) else "quarantined"])
            continue
        entries.append(_manifest_entry(ctx, snap, path, st))
    return ok(f"{len(entries)} entries", entries=entries, skipped=skipped,
              complete=snap.complete)


def _manifest_entry(ctx: Context, snap: Snapshot, path: str, st: Lstat) -> ManifestEntry:
    kind, digest = _kind(st[0]), None
    if kind == "file":
        digest = snap.hashes.get(path) or _sha256(os.path.join(ctx.root, path), st[4])[0]
    return [path, kind, stat.S_IMODE(st[0]), st[1] if kind == "file" else 0, digest,
            snap.targets.get(path) if kind == "symlink" else None]


def op_read_files(ctx: Context, files: list[Any]) -> Result:
    """Chunks of regular files, never through a link; errors per file."""
    found: list[Chunk]
    found, budget = [], READ_FILES_MAX
    for item in files:
        if budget <= 0:
            break
        found.append(_read_chunk(ctx, item, budget))
        budget -= found[-1].get("length", 0)
    return ok(f"{len(found)} files", files=found)


def _read_chunk(ctx: Context, item: object, budget: int) -> Chunk:
    if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str)
            or not all(isinstance(n, int) and n >= 0 for n in item[1:])):
        return {"path": str(item)[:200], "error": "expected [path, offset, length]"}
    path, offset, length = item
    if not _plain_relative(ctx, path):
        return {"path": path, "error": "not a plain relative path"}
    try:
        parent, leaf = _open_parent(ctx.root, path)
        try:
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=parent)
        finally:
            os.close(parent)
        with os.fdopen(fd, "rb"):
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return {"path": path, "error": "not a regular file"}
            data = os.pread(fd, min(length, budget), offset)
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}
    return {"path": path, "offset": offset, "size": info.st_size, "length": len(data),
            "data": base64.b64encode(data).decode("ascii")}


def _plain_relative(ctx: Context, path: str) -> bool:
    parts = path.split("/")
    return (bool(path) and "\0" not in path and not path.startswith("/")
            and all(part not in ("", ".", "..") for part in parts) and parts[0] not in ctx.hidden)


def op_snapshot(ctx: Context, path: str, max_bytes: int = 0) -> Result:
    """The file a write of `path` would change, as it is now (content when small enough)."""
    real = resolve(ctx, path, write=True)
    found: dict[str, Any] = {"resolved": rel(ctx, real), "exists": False}
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return ok("absent", **found)
    found.update(exists=True, kind=_kind(st.st_mode), mode=stat.S_IMODE(st.st_mode),
                 size=st.st_size)
    if found["kind"] == "file":
        found.update(_snapshot_content(real, st, max_bytes))
    return ok(found["kind"], **found)


def _snapshot_content(real: str, st: os.stat_result, max_bytes: int) -> dict[str, str | None]:
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_ino != st.st_ino:
            return {"sha256": None}
        digest, kept = hashlib.sha256(), bytearray()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if len(kept) <= max_bytes:
                kept += chunk
    small = len(kept) <= max_bytes
    return {"sha256": digest.hexdigest(),
            "data": base64.b64encode(bytes(kept)).decode("ascii") if small else None}


# -- requests ---------------------------------------------------------------------------------

STR, INT, BOOL, NUMBER, OBJECT, LIST = (
    "a string", "an integer", "true or false", "a number", "a JSON object", "a list")
TOOLS: dict[str, tuple[Callable[..., Result], Spec]] = {
    "read_file": (tool_read_file, {"path": (STR, True), "start_line": (INT, False),
                                   "end_line": (INT, False)}),
    "write_file": (tool_write_file, {"path": (STR, True), "content": (STR, True),
                                     "expect_sha256": (STR, False),
                                     "expect_sha256_after": (STR, False)}),
    "edit_file": (tool_edit_file, {"path": (STR, True), "new_text": (STR, True),
                                   "old_text": (STR, False), "replace_all": (BOOL, False),
                                   "expect_sha256": (STR, False),
                                   "expect_sha256_after": (STR, False)}),
    "search_files": (tool_search_files, {"pattern": (STR, True), "path": (STR, False),
                                         "max_results": (INT, False)}),
    "list_files": (tool_list_files, {"path": (STR, False), "glob": (STR, False),
                                     "depth": (INT, False)}),
    "run_shell_command": (tool_run_shell_command, {"command": (STR, True),
                                                   "timeout_seconds": (NUMBER, False)}),
}


PREVIEW_SPEC: Spec = {"tool": (STR, True), "args": (OBJECT, True)}


HOST_OPS: dict[str, tuple[Callable[..., Result], Spec]] = {
    "manifest": (op_manifest, {}),
    "read_files": (op_read_files, {"files": (LIST, True)}),
    "snapshot": (op_snapshot, {"path": (STR, True), "max_bytes": (INT, False)}),
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
    return {"id": rid, **result}, stop


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


def send(out: Writer, message: Mapping[str, object]) -> None:
    """Write one protocol line."""
    out.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
    out.flush()


class Signed:
    """Our stdout with every line prefixed by its HMAC (--sign): `<32 hex> <json>`.

    The key is the first stdin line after the source, read before any command runs. Where a
    command can open our /proc/PID/fd entries although we are not dumpable (gVisor checks only
    the file modes there), it can write lines into our stdout, but it cannot sign them.
    """

    def __init__(self, out: Writer, key: bytes) -> None:
        self.out, self.key = out, key

    def write(self, line: bytes) -> None:
        """Write one protocol line (ending in a newline) with its signature in front."""
        import hmac

        body = line.rstrip(b"\n")
        mac = hmac.new(self.key, body, "sha256").hexdigest()[:32].encode()
        self.out.write(mac + b" " + line)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self.out.flush()


def _read_key(inp: BinaryIO) -> bytes:
    """The signing key: one hex line on stdin."""
    return bytes.fromhex(inp.readline().decode("ascii").strip())


# -- channel ----------------------------------------------------------------------------------
# A request and its response through the engine's stream relay (dockerd and the container's
# shim copy every byte) cost more than the tool itself; two FIFOs on a directory the host
# mounted read-only carry them in the kernel alone. The directory is the host's: nothing in
# the container can make, replace or link a name there, and the host unlinks both FIFOs once
# we said we have them, so only a process that opened one before could still hold it. None
# runs when a toolbox starts (a restart kills what the last one left with kill(-1), repeated
# until none is left, else the next toolbox stays on stdio), and against one anyway
# every request is signed with a key of its own and its number in the sequence: a line
# written into `in` by anyone else, or played again, is dropped; our lines are signed as on
# stdout. Such a process can at most take lines away, which the host sees as a toolbox that
# does not answer, and restarts.


def _open_channel(directory: str) -> tuple[int, int] | str:
    """(read fd of `in`, write fd of `out`), or why not (the host made none: stay on stdio)."""
    fds: list[int] = []
    try:
        for name, mode in (("in", os.O_RDONLY), ("out", os.O_WRONLY)):
            # non-blocking: a FIFO nobody holds open fails now (ENXIO) instead of waiting
            fd = os.open(os.path.join(directory, name),
                         mode | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            fds.append(fd)
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, f"{name} is not a FIFO")
            os.set_blocking(fd, True)
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        return exc.strerror or str(exc)
    return fds[0], fds[1]


def _hangup_watch(fd: int) -> Callable[[], bool]:
    """Whether every writer of `fd` (the host's end of the requests) is gone: POLLHUP, which
    the kernel reports without asking (mask 0), so a pending request is never read here."""
    poller = select.poll()
    poller.register(fd, 0)
    return lambda: bool(poller.poll(0))


def request_key(key: bytes) -> bytes:
    """The key requests on the channel are signed with (not the one of our lines)."""
    import hmac

    return hmac.new(key, b"sandbox-agent requests", "sha256").digest()


def request_mac(key: bytes, number: int, body: bytes) -> bytes:
    """The signature of request `number` (0, 1, ...): 32 hex digits."""
    import hmac

    return hmac.new(key, b"%d " % number + body, "sha256").hexdigest()[:32].encode()


class Verified:
    """Request lines from the channel, each `<request_mac> <json>`: a line that is not the
    next one the host signed is dropped (and said on stderr)."""

    def __init__(self, inp: BinaryIO, key: bytes) -> None:
        self.inp, self.key, self.number = inp, request_key(key), 0

    def readline(self) -> bytes:
        """The next request line the host signed; b"" at EOF."""
        import hmac

        while True:
            line = self.inp.readline()
            if not line:
                return b""
            body = line[33:].rstrip(b"\n")
            if line[32:33] == b" " and hmac.compare_digest(
                    line[:32], request_mac(self.key, self.number, body)):
                self.number += 1
                return body
            sys.stderr.write("toolbox: dropped a request line the host did not sign\n")


# -- seccomp ----------------------------------------------------------------------------------


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
FILTER_MACHINES = ("x86_64",)  # what the host builds programs for


def confine(program: str | None) -> str:
    """Install the host's seccomp program on this process: "installed", or why not."""
    if not program:
        return "not given"
    machine = os.uname().machine
    if machine not in FILTER_MACHINES:
        return f"not installed: built for {FILTER_MACHINES[0]}, this is {machine}"
    try:
        import base64

        _install(base64.b64decode(program, validate=True))
    except (ImportError, OSError, ValueError) as exc:
        return f"not installed: {exc}"
    return "installed"


def _install(code: bytes) -> None:
    import ctypes

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    if len(code) % 8 or not code:
        raise ValueError("a BPF program is a whole number of 8-byte instructions")
    libc = ctypes.CDLL(None, use_errno=True)
    prog = Program(len(code) // 8, code)
    for args in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)):
        if libc.prctl(*[ctypes.c_ulong(a) for a in args]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({args[0]}): {os.strerror(err)}")


def _on_sigterm(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(0)


PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4


def _not_dumpable() -> bool:
    """Keep the commands we run (same uid) out of our /proc files and away from ptrace.

    Otherwise a command could read our stdin and write our stdout through /proc/PID/fd, and
    answer the host in our place: fake previews, fake results, a forged audit trail. Returns
    whether we are now non-dumpable (the ready line reports it).
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        dumpable: int = libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
        return dumpable == 0
    except (ImportError, OSError, AttributeError) as exc:
        sys.stderr.write(f"toolbox: could not make itself non-dumpable: {exc}\n")
        return False


def main(argv: list[str]) -> int:
    """Entry point: parse argv, then serve on stdin/stdout."""
    guarded = _not_dumpable()
    opts = parse_args(argv)
    if not os.path.isdir(opts.root):
        sys.stderr.write(f"toolbox: root {opts.root!r} is not a directory\n")
        return 2
    key = _read_key(sys.stdin.buffer) if opts.sign else None
    pipes = _open_channel(opts.channel) if opts.channel and key else None
    filtered = confine(opts.seccomp_filter)
    ctx = Context(opts)
    ctx.guarded = guarded
    sys.stdout.flush()
    raw = os.fdopen(os.dup(1), "wb")
    out: Writer = Signed(raw, key) if key else raw
    inp: Reader = sys.stdin.buffer
    if isinstance(pipes, tuple) and key:
        send(out, {"channel": "fifo"})
        inp, out = Verified(os.fdopen(pipes[0], "rb"), key), Signed(os.fdopen(pipes[1], "wb"), key)
        ctx.channel = "fifo"
    elif pipes is not None:
        ctx.channel = f"stdio: {pipes}"
    ctx.hangup = _hangup_watch(pipes[0] if isinstance(pipes, tuple) and key else 0)
    os.dup2(2, 1)  # a stray print can never corrupt the protocol
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return serve(ctx, inp, out, filtered)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
