"""The programs that start before the toolbox (executor/sandbox/boot), run as processes here."""

from __future__ import annotations

import marshal
import signal
import subprocess
import sys
import time
import zlib

from executor.sandbox import boot, bundle
from tests.unit import toolbox_view as toolbox


def payload(source: str) -> bytes:
    """What the host sends the bootstrap: KIND SIZE, then a zlib'd marshalled bundle whose
    `toolbox.__main__` runs `source` as its main()."""
    main = "def main(argv):\n" + "".join(f"    {line}\n" for line in source.splitlines())
    bundle = {"toolbox": (True, compile("", "toolbox/__init__.py", "exec")),
              "toolbox.__main__": (False, compile(main, "toolbox/__main__.py", "exec"))}
    blob = zlib.compress(marshal.dumps(bundle))
    return f"code {len(blob)}\n".encode() + blob


def test_the_programs_agree_on_their_marks():
    assert boot.source("init").splitlines()[0] == bundle.INIT_TAG
    assert bundle.INIT_TAG.encode() in boot.source("kill").encode()
    namespace: dict[str, object] = {}
    exec(compile(boot.source("init"), "init.py", "exec"), namespace)  # defines only
    assert namespace["EXIT_ORPHANED"] == toolbox.EXIT_ORPHANED == bundle.EXIT_ORPHANED
    assert namespace["INIT_MARK"] == bundle.INIT_MARK


def first(exit_code: int) -> subprocess.Popen[bytes]:
    """The first-toolbox PID 1 program, whose toolbox child exits with `exit_code`."""
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", boot.first_toolbox()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"\n")  # the host's go
    proc.stdin.flush()
    proc.stdout.readline()  # the bootstrap's magic number
    proc.stdin.write(payload(f"return {exit_code}"))
    proc.stdin.close()
    return proc


def test_pid_1_ends_when_its_toolbox_says_the_host_went_away():
    proc = first(toolbox.EXIT_ORPHANED)
    assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None and bundle.INIT_MARK in proc.stderr.read()


def test_pid_1_stays_when_its_toolbox_ends_otherwise_and_ignores_sigterm():
    proc = first(0)
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None  # the host may start the next toolbox with an exec
    finally:
        proc.kill()
        proc.wait()


def test_importing_the_programs_runs_nothing():
    for name in ("init", "bootstrap", "kill"):
        namespace: dict[str, object] = {"__name__": f"executor.sandbox.boot.{name}"}
        exec(compile(boot.source(name), f"{name}.py", "exec"), namespace)
        assert callable(namespace.get("main") or namespace.get("reap"))
