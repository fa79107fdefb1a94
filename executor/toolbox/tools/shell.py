"""`run_shell_command`: a command with a deadline, capped output and full cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from ..guards.checks import _track_after, _track_before
from ..guards.disk import _DiskWatch
from ..limits import (
    COMMAND_PATH_VAR,
    DISK_POLL_SECONDS,
    DRAIN_SECONDS,
    HANGUP_SECONDS,
    OUTPUT_HARD_LIMIT,
    PROGRESS_SECONDS,
    SHELL_PRELUDE,
    TOKEN_VAR,
)
from ..procs import _Capture, _finish, _pump, _reap, _settled, _start_tick, _sweep
from ..tracking import _Tracking
from ..wire import ToolError

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable

    from ..context import Context
    from ..wire import Result, Sink
    pass



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
        """Stop a command left by its host, drowning us in output, or filling the disk."""
        if ctx.hangup() or (progress is not None and progress.broken):
            ctx.orphaned = True
            return "orphaned"
        if progress is not None:
            progress.flush()
        if out.total + err.total > OUTPUT_HARD_LIMIT:
            return "overflow"
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
    first = env.pop(COMMAND_PATH_VAR, "")
    if first:  # the package volume's programs: the command's to find, never ours
        env["PATH"] = f"{first}:{env.get('PATH') or os.defpath}"
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
