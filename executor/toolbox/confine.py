"""The toolbox's own seccomp filter, installed on the commands it starts."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    pass



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


PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
