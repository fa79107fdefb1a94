"""Start-up figures: quick commands and a trivial `ask`, side by side with a bare interpreter.

    python benchmarks/bench_startup.py [--runs 10]

Each command is run as a whole process, in turn with `python -c pass` on the same interpreter
(A B A B ...), and the ratio is taken pair by pair, so a machine whose speed drifts still gives
a fair ratio. The trivial ask talks to the stand-in model server (tests/fakes) on 127.0.0.1 and
calls no tool: it shows what a run costs before any container is needed. Medians are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.model_server import ModelServer, Reply

CLI = str(Path(sys.executable).parent / "sandbox-agent")
BARE = [sys.executable, "-c", "pass"]


def wall(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from start to exit of one run (output thrown away)."""
    began = time.perf_counter()
    subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def side_by_side(argv: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """(median seconds of argv, median of the bare interpreter, median of the paired ratios)."""
    wall(argv, env), wall(BARE, env)  # warm-up: page cache, .pyc files
    pairs = [(wall(argv, env), wall(BARE, env)) for _ in range(runs)]
    return (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
            statistics.median(a / b for a, b in pairs))


def _sessions(root: Path, count: int) -> None:
    """`count` kept sessions of 20 messages each, for a listing with something to read."""
    from executor.messages import Message
    from executor.session import NdjsonSessionStore

    for n in range(count):
        store = NdjsonSessionStore.create(root, name=f"s{n}", model="m", provider="ollama")
        for turn in range(10):
            store.append(Message(role="user", content=f"request {turn}"))
            store.append(Message(role="assistant", content="answer"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ModelServer() as server:
        server.default = Reply("hello")
        root, used = Path(tmp) / "proj", Path(tmp) / "used"
        root.mkdir()
        used.mkdir()
        env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": str(Path(tmp) / "state"),
               "NO_COLOR": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an install has its .pyc files: warm them up
        os.environ["SANDBOX_AGENT_STATE_DIR"] = env["SANDBOX_AGENT_STATE_DIR"]
        _sessions(used, 5)
        commands = {
            "--version": [CLI, "--version"],
            "--help": [CLI, "--help"],
            "sessions": [CLI, "sessions", "--root", str(root)],
            "sessions (5 kept)": [CLI, "sessions", "--root", str(used)],
            "audit verify": [CLI, "audit", "verify", "--root", str(root)],
            "ask (no tool call)": [CLI, "ask", "--root", str(root), "--host", server.url, "hi"],
        }
        print(f"{'command':<22}{'median s':>10}{'bare s':>10}{'ratio':>8}   ({args.runs} pairs)")
        for name, argv in commands.items():
            seconds, bare, ratio = side_by_side(argv, args.runs, env)
            print(f"{name:<22}{seconds:>10.3f}{bare:>10.3f}{ratio:>7.1f}x")


if __name__ == "__main__":
    main()
