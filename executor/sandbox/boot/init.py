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
"""

import contextlib
import os
import signal

INIT_MARK = b"sandbox-agent-init: the toolbox exited"
EXIT_ORPHANED = 75


def reap(toolbox: int) -> None:
    """Ignore signals, drop stdin and stdout, and reap children forever."""
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
        signal.sigwait({signal.SIGCHLD})


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

