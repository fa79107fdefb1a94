"""`search_files`: ripgrep, or a Python scan where there is none."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import stat
import subprocess
import time

from ..limits import (
    CHUNK,
    FALLBACK_MAX_BYTES,
    LONG_LINE_MARK,
    SEARCH_COLUMNS,
    SEARCH_FILES_SHOWN,
    SEARCH_LIMIT,
    SEARCH_MAX_CHARS,
    TIMED_OUT,
)
from ..paths import _skipped, rel, resolve, shown
from ..procs import _Capture, _finish, _Lines, _pump
from ..wire import ToolError, ok

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable, Iterator
    from typing import NoReturn

    from ..context import Context
    from ..records import SearchMeta
    from ..wire import Hit, Hits, Result, Sink
    pass



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
                files.append(shown(rel(ctx, path)))
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
        line = f"{shown(name)}:{number}:{text}"
        chars += len(line) + 1
        if chars > SEARCH_MAX_CHARS:
            more = True
            break
        lines.append(line)
    meta: SearchMeta = {"matches": len(lines), "truncated": bool(more or incomplete),
                        "engine": engine}
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
    listed = (out.head + out.tail).decode("utf-8", "surrogateescape")  # names as rel() has them
    names = [n[2:] if n.startswith("./") else n for n in listed.split("\0") if n]
    finished = ran is not None and ran[1] is None and ran[0] in (0, 1)
    return sorted(set(names) - seen), finished


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _passed_over(names: list[str]) -> str:
    """What the result says of files that match but were not shown (both engines alike)."""
    verb = "match" if len(names) != 1 else "matches"
    return (f"{_count(len(names), 'file')} the search passed over (binary, or ignored by "
            f".gitignore/.ignore) also {verb}: {_names(names)}")


def _names(names: list[str], first: int = 5) -> str:
    return ", ".join(map(shown, names[:first])) + (", ..." if len(names) > first else "")


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
    name = raw.decode("utf-8", "surrogateescape")  # as rel() has it: `shown` when output
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
