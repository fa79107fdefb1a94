# sandbox-agent init
"""PID 1 of every session container (the line above is how `kill.py` knows it is ours).

It makes itself non-dumpable (no command of the same uid may ptrace it or open its fds), lets
go of stdin and stdout, ignores every signal that can be ignored (Linux drops the uncaught
ones for a namespace's init; gVisor does not, and lets SIGKILL and SIGSTOP through too;
Podman's init and docker-init had passed `kill -INT 1` on to `sleep`, which stopped the
container) and reaps what the sandbox leaves.

As the first toolbox's parent (`first_toolbox`: the container's own stdin and stdout go to
it, saving the `docker exec` of a second process), it writes `INIT_MARK` on stderr when that
toolbox ends (the engine keeps the container's stdout open while PID 1 lives, so the host
could not see the end there), and exits when the toolbox exited `EXIT_ORPHANED` (its host
went away mid-command): the kernel then ends whatever is left in the pid namespace.

It also watches its host itself, where commands cannot reach: the host makes a FIFO `life`
in the channel directory before the container starts, PID 1 opens it for reading, the host
opens it for writing and unlinks the name, and keeps it open while the session lives. When
the host's process is gone, by whatever death, the kernel reports POLLHUP: PID 1 of a bind
container exits (the kernel kills the rest of the namespace); of a copy container, kills
every process it can signal (the tools' uid) and waits for the next host's `life`. A command
can SIGSTOP the toolbox (same uid) but not PID 1 (a namespace's init gets no signal it did
not ask for; gVisor differs, and has no channel directory: there the toolbox's own watch is
all there is).
"""

import contextlib
import os
import select
import signal

INIT_MARK = b"sandbox-agent-init: the toolbox exited"
EXIT_ORPHANED = 75
LIFE = "/run/sandbox-agent/life"
"""The host's lifeline FIFO (see the docstring); absent: nothing to watch."""
WATCH_SECONDS = 0.2


def reap(toolbox: int, end: bool = True, life: "int | None" = -1) -> None:
    """Ignore signals, drop stdin and stdout, and reap children forever; watch the host's
    lifeline (`end`: exit when it is gone, else kill what runs and wait for the next;
    `life`: the lifeline when already open, -1: open it now)."""
    life = _open_life() if life == -1 else life
    os.chdir("/")
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    while True:
        _reap_all(toolbox, null)
        if life is not None and _gone(life):
            if end:
                os._exit(0)
            os.close(life)
            life = None
            _kill_all()
        elif life is None and not end:
            life = _open_life()  # a copy container re-attached: the new host's lifeline
        signal.sigtimedwait({signal.SIGCHLD}, WATCH_SECONDS)


def _open_life() -> "int | None":
    try:
        return os.open(LIFE, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None


def _gone(fd: int) -> bool:
    """POLLHUP: every writer (only ever the host) closed its end."""
    poller = select.poll()
    poller.register(fd, 0)
    return bool(poller.poll(0))


def _kill_all() -> None:
    """SIGKILL everything we may signal, until nothing of our uid is left (a second's worth)."""
    for _ in range(200):
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        if not [p for p in os.listdir("/proc") if p.isdigit() and p != "1" and _ours(p)]:
            return
        signal.sigtimedwait({signal.SIGCHLD}, 0.005)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def _ours(pid: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def _reap_all(toolbox: int, null: int) -> None:
    try:
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                return
            if pid == toolbox:
                os.write(2, b"\n" + INIT_MARK + b"\n")
                os.dup2(null, 2)
                if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_ORPHANED:
                    os._exit(0)
    except ChildProcessError:
        pass


def first_toolbox() -> None:
    """Fork: the parent reaps for good; the child returns to run the bootstrap after this."""
    toolbox = os.fork()
    if toolbox:
        reap(toolbox)


STANDBY_ARM = b"="
"""The maker's first words: `=`, the nonce (`NONCE_SIZE` bytes), the TTL (`TTL_SIZE` digits)."""
STANDBY_ASK = b"?"
"""An adopter's: `?` and the nonce."""
STANDBY_GO = b"!"
STANDBY_ARMED = b"armed\n"
STANDBY_FRESH = b"fresh\n"
STANDBY_USED = b"used\n"
NONCE_SIZE = 32
TTL_SIZE = 8


def standby_toolbox() -> None:
    """PID 1 of a standby (executor/sandbox/warm.py): alone in its container until a host
    adopts it. Its maker arms it first (a nonce only the host holds, and a TTL); with TTL 0 it
    watches its maker's lifeline and ends with it; with a TTL it is left for a later process:
    its maker's death does not end it, the TTL does. Asked with the nonce, it says `fresh`
    only when no process was made in the pid namespace since it began (the kernel's last pid
    there is what it was then: a `docker exec`, even one that ended, took one; it is not 1 at
    our start, the OCI runtime made a few there before us), and only once: then, told to go,
    it forks the first toolbox as `first_toolbox` does. A left standby first opens its
    adopter's lifeline (made before `go`), or ends: adopted, it dies with its adopter."""
    start = _last_pid()
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass
    import hmac
    import time

    life = _open_life()
    began = time.monotonic()
    arm = _standby_read(life, 1 + NONCE_SIZE + TTL_SIZE, None)
    ttl = int(arm[-TTL_SIZE:]) if arm[-TTL_SIZE:].isdigit() else -1
    if arm[:1] != STANDBY_ARM or ttl < 0:
        _standby_end()
    deadline = began + ttl if ttl else None
    if ttl and life is not None:
        os.close(life)  # left for a later process: its maker's death is not its end
        life = None
    os.write(1, STANDBY_ARMED)  # only now may the maker let go of its lifeline
    ask = _standby_read(life, 1 + NONCE_SIZE, deadline)
    if ask[:1] != STANDBY_ASK or not hmac.compare_digest(ask[1:], arm[1:1 + NONCE_SIZE]) \
            or _last_pid() != start or not start:
        _standby_end()
    os.write(1, STANDBY_FRESH)
    if _standby_read(life, 1, deadline) != STANDBY_GO:
        os._exit(0)
    if ttl:
        life = _open_life()
        if life is None:
            os._exit(0)  # no adopter's lifeline: it would outlive whoever adopts it
    toolbox = os.fork()
    if toolbox:
        reap(toolbox, life=life)


def _standby_end() -> None:
    os.write(1, STANDBY_USED)
    os._exit(0)


def _standby_read(life: "int | None", size: int, deadline: "float | None") -> bytes:
    """`size` bytes of stdin; the standby ends first when its stdin ends, when the maker's
    lifeline (`life`) is gone, or at `deadline` (its TTL)."""
    import time

    poller = select.poll()
    poller.register(0, select.POLLIN)
    if life is not None:
        poller.register(life, 0)
    data = b""
    while len(data) < size:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            os._exit(0)  # its TTL passed with nobody adopting it
        wait = 1000 if left is None else max(1, min(1000, int(left * 1000) + 1))
        for fd, _ in sorted(poller.poll(wait)):  # stdin (0) first: what came before a hang-up
            if fd != 0:
                os._exit(0)  # the lifeline: whoever made the standby is gone
            chunk = os.read(0, size - len(data))
            if not chunk:
                _standby_end()
            data += chunk
    return data


def _last_pid() -> bytes:
    """The last pid the kernel gave out in our pid namespace (b'' when unreadable)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as last:
            return last.read().strip()
    except OSError:
        return b""
