"""One tool call end to end: the toolbox round trip apart from the host's own overhead.

    python benchmarks/bench_calls.py [--calls 200] [--rounds 5]

A run of N model turns, each calling read_file once, against the same run with no tool call;
(T(N) - T(0)) / N is what one tool call adds: the agent loop (validation, policy, hook events,
context fitting), the session file (two messages) and the audit log (three records: the model
request, the call, the result). The model replays prepared replies and costs next to nothing.

1. host overhead: the sandbox answers at once (an in-memory fake giving the toolbox's answer),
   so all of it is the host's;
   fsync `background` (the default) and `always` side by side (docs/SESSIONS.md), and with
   the terminal view;
2. end to end on a real container: the same run on a DockerSandbox, with the terminal view a
   person sees (executor/ui.py's ProgressView on a terminal console writing to /dev/null) and
   without it, next to the median toolbox round trip of the same read_file in that session;
   the difference is the host's part.
Medians of `--rounds` rounds are printed, wall time and the process's CPU time (which a
machine busy with other work inflates less).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executor import durable
from executor.config import DEFAULT_IMAGE
from executor.console import InertConsole
from executor.messages import Message, ModelReply, ToolCall, ToolResult, ToolSpec, Usage
from executor.protocols import Sandbox, TokenCallback
from executor.runner import Runner
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect
from executor.ui import ProgressView
from tests.fakes.sandbox import FakeSandbox

SandboxFor = Callable[[Path], Sandbox]


class Replay:
    """A model that replays prepared replies: N read_file calls, then an answer."""

    name = "replay"
    tool_protocol = "native"

    def __init__(self, calls: int) -> None:
        self._left = calls

    def chat(self, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
             on_token: TokenCallback | None = None,
             on_thinking: TokenCallback | None = None) -> ModelReply:
        self._left -= 1
        usage = Usage(prompt_tokens=50 * len(messages), completion_tokens=20)  # as servers do
        if self._left < 0:
            return ModelReply(message=Message(role="assistant", content="done"), usage=usage)
        call = ToolCall(name="read_file", arguments={"path": "small.txt"})
        return ModelReply(message=Message(role="assistant", tool_calls=[call]), usage=usage)

    def context_length(self) -> int | None:
        return 131072

    def close(self) -> None:
        pass


def one_run(root: Path, calls: int, sandbox: Sandbox, fsync: str, terminal: bool = False
            ) -> tuple[float, float]:
    """(wall, CPU) seconds of `Runner.run` with `calls` tool calls (start and close not
    counted), with the terminal view attached when asked."""
    runner = Runner.build(root, model=Replay(calls), sandbox=sandbox, yes=True,
                          max_turns=calls + 2, fsync=fsync, sandbox_warm_up=None)
    with open(os.devnull, "w") as sink, runner:
        view = ProgressView(InertConsole(file=sink, force_terminal=True, width=120,
                                         highlight=False, soft_wrap=True))  # as the CLI's
        if terminal:
            view.attach(runner.hooks)
            view.begin()
        began, cpu = time.perf_counter(), time.process_time()
        result = runner.run("go")
        took = time.perf_counter() - began, time.process_time() - cpu
        view.close()
    assert result.answer == "done" and len(result.tool_calls) == calls, result
    return took


def per_call(root: Path, calls: int, rounds: int, sandbox_for: SandboxFor,
             fsync: str, terminal: bool = False) -> tuple[float, float]:
    """Medians over rounds of (T(calls) - T(0)) / calls, in ms: wall and CPU."""
    walls, cpus = [], []
    for _ in range(rounds):
        empty = one_run(root, 0, sandbox_for(root), fsync, terminal)
        full = one_run(root, calls, sandbox_for(root), fsync, terminal)
        walls.append((full[0] - empty[0]) / calls * 1000)
        cpus.append((full[1] - empty[1]) / calls * 1000)
    return statistics.median(walls), statistics.median(cpus)


def fake(root: Path) -> Sandbox:
    """Answers read_file at once, with what the toolbox answers for small.txt."""
    lines = (root / "small.txt").read_text().splitlines()
    output = "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(lines, 1))
    meta = {"path": "small.txt", "total_lines": len(lines), "duration_ms": 0.1}
    return FakeSandbox({"read_file": ToolResult(ok=True, output=output, meta=meta)})


def toolbox_round_trip(root: Path, client: Any, calls: int) -> float:
    """Median ms of one read_file through DockerSandbox.call (no agent, session or audit)."""
    config = SandboxConfig(root=root, session_id=f"benchcalls{os.getpid()}", image=DEFAULT_IMAGE)
    with DockerSandbox(config, client=client) as box:
        box.call("read_file", {"path": "small.txt"})
        samples = []
        for _ in range(calls):
            began = time.perf_counter()
            box.call("read_file", {"path": "small.txt"})
            samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def row(label: str, *figures: float | str) -> None:
    """One line of the table: the label, then wall and CPU ms."""
    print(f"{label:<100}" + "".join(f"{f:>9.3f}" if isinstance(f, float) else f"{f:>9}"
                                   for f in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        os.environ["SANDBOX_AGENT_STATE_DIR"] = str(Path(tmp) / "state")
        root = Path(tmp) / "proj"
        root.mkdir()
        (root / "small.txt").write_text("hello\n" * 20)
        print(f"One tool call (read_file), {options.calls} calls a run, median of "
              f"{options.rounds} rounds; ms per call")
        row("", "wall", "CPU")
        for fsync in ("background", "always"):
            host = per_call(root, options.calls, options.rounds, fake, fsync)
            row(f"1. host overhead, fsync {fsync:<10} (agent + policy + session + audit; the "
                "sandbox answers at once)", *host)
        seen = per_call(root, options.calls, options.rounds, fake, "background", terminal=True)
        row("   fsync background, with the terminal view (what a person at a terminal sees)",
            *seen)
        durable.SYNCER.flush()
        client = connect()
        trip = toolbox_round_trip(root, client, options.calls)

        def docker(root: Path) -> Sandbox:
            return DockerSandbox(SandboxConfig(root=root, session_id=f"benchcalls{time.time_ns()}",
                                               image=DEFAULT_IMAGE), client=client)

        rounds = max(1, options.rounds // 2)
        seen = per_call(root, options.calls, rounds, docker, "background", terminal=True)
        whole = per_call(root, options.calls, rounds, docker, "background")
        row("2. end to end on a running container (agent + policy + sandbox + session + audit "
            "+ terminal)", *seen)
        row("   the same without the terminal view", *whole)
        row("   toolbox round trip alone", trip)
        row("   host part (end to end - round trip)", seen[0] - trip)


if __name__ == "__main__":
    main()
