"""Signals that end a run, and stretches of work no signal may cut in half.

SIGTERM, SIGHUP (a closed terminal, a dropped SSH connection) and SIGQUIT end a run the way
Ctrl-C does: `interrupt_on_ending_signals` turns the first of them into `Terminated`, so the
session is saved, the container removed and the end audited, and ignores the ones after it
(and Ctrl-C) so they cannot cut that cleanup short.

Some work must not stop half way at all: an apply's writes and the journal line and audit
record naming them. In a `held()` block those signals and SIGINT are only recorded; when it
ends, the first one recorded goes to the handler that was there before (the CLI's: cleanup,
exit 130; else the default action), so what was written is on record. SIGKILL still stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol, TypeVar

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals that end a run the way Ctrl-C does."""
HELD = (signal.SIGINT, *ENDING_SIGNALS)
C = TypeVar("C", bound="Closable")


class Terminated(KeyboardInterrupt):
    """An ending signal: ends the session (in the REPL a plain Ctrl-C only cancels the request
    being answered)."""


def interrupt_on_ending_signals() -> None:
    """Raise `Terminated` on the first ending signal; ignore every later one and Ctrl-C.

    A second SIGHUP from a dying terminal, or a SIGTERM sent twice, came while the first was
    being cleaned up and cut it short (the sweep of what the session planted was skipped);
    now the cleanup runs whole and the process still exits 130. After a hang-up the terminal
    is gone: what cleanup prints goes to /dev/null instead of failing half-way (fds that were
    a terminal at the start)."""
    terminals = [fd for fd in (0, 1, 2) if _is_tty(fd)]
    ending = False

    def end(signum: int, frame: FrameType | None) -> None:
        nonlocal ending
        if signum == signal.SIGHUP:
            _silence(terminals)
        if ending:
            return
        ending = True
        raise Terminated

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not ending:
            raise KeyboardInterrupt

    for number in ENDING_SIGNALS:
        signal.signal(number, end)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored
        signal.signal(signal.SIGINT, interrupt)


@contextmanager
def held() -> Iterator[None]:
    """Run the block whole: a signal of `HELD` arriving in it is acted on once it is done.

    Only the main thread receives signals (and may set handlers); elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    before = {number: signal.signal(number, record) for number in HELD}
    try:
        yield
    finally:
        for number, handler in before.items():  # None: one set outside Python
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])


def ignore_from_now() -> None:
    """The process is on its way out after an interrupt: a signal now is ignored, so exit 130
    stays 130 (Python restores the default actions while it shuts down, and a late SIGHUP
    would end it as killed by the signal)."""
    if threading.current_thread() is threading.main_thread():
        for number in HELD:
            signal.signal(number, signal.SIG_IGN)


class Closable(Protocol):
    """What `cleaned_up_whole` runs: started on entry, closed on the way out."""

    def start(self) -> None: ...

    def close(self) -> None: ...


@contextmanager
def cleaned_up_whole(thing: C) -> Iterator[C]:
    """`with thing:` whose close no signal cuts short, whatever started the way out (Ctrl-C
    then a hang-up, a SIGTERM sent twice): one arriving while it closes is acted on after."""
    thing.start()
    try:
        yield thing
    finally:
        with held():
            thing.close()


def _is_tty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _silence(fds: list[int]) -> None:
    """Point `fds` at /dev/null (their terminal hung up: a write there fails with EIO)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)
