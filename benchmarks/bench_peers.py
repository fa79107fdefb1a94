"""sandbox-agent's sandbox side by side with mini-swe-agent's and llm-sandbox's, in one run.

    python benchmarks/bench_peers.py [--starts 10] [--calls 50] [--venv build/bench-venv]

Same image, same project (a small file, mounted at /workspace, no network), one run, turns
interleaved (A B C A B C ...) so a machine whose speed drifts is fair to all. Per contender:

- session start: from nothing to the answer of the first shell command (`cat small.txt`):
  sandbox-agent's DockerSandbox (hardened container, toolbox started) then run_shell_command;
  mini-swe-agent's DockerEnvironment (`docker run -d`, then `docker exec` per command);
  llm-sandbox's SandboxSession (docker SDK create + start, then an exec per command);
- one more shell command in a started session (`cat small.txt`), `--calls` times.

"sandbox-agent, warm" is the same with the session's container made ahead, untimed (a standby:
executor/sandbox/warm.py, as orchestrate's next child gets it): the start adopts it.

The peers run in their own venv (`make bench-venv` installs them from the package index), driven
by benchmarks/peer_driver.py over a pipe, so their imports are not timed and their dependencies
never meet ours. A peer that cannot be installed or run is reported with the reason, not measured.
Container removal is not timed (both peers' own clean-ups stop the container first, which waits
10 s for a `sleep` that ignores SIGTERM); every contender's container is removed with
`docker rm -f` (sandbox-agent: its own stop, which also checks the tree after the session).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from executor.config import DEFAULT_IMAGE
from executor.sandbox import warm
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect

HERE = Path(__file__).resolve().parent
COMMAND = "cat small.txt"
EXPECTED = "hello\n" * 3
Turn = Callable[[int], dict[str, Any]]


class Peer:
    """A peer driven through benchmarks/peer_driver.py in the benchmark venv."""

    def __init__(self, name: str, venv: Path, root: Path) -> None:
        self.name, self.version, self.why_not = name, "", ""
        python = venv / "bin" / "python"
        if not python.exists():
            self.why_not = f"no benchmark venv at {venv} (make bench-venv)"
            return
        self._proc = subprocess.Popen(
            [str(python), str(HERE / "peer_driver.py"), name, "--image", DEFAULT_IMAGE,
             "--root", str(root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(root.parent / "mini-config"),
                 "MSWEA_SILENT_STARTUP": "1"})
        ready = self._read()
        if not ready.get("ready"):
            log = venv.parent / f"{venv.name}.log"
            self.why_not = str(ready.get("error") or "the driver did not start") + (
                f" (install log: {log})" if log.exists() else "")
        self.version = str(ready.get("version", ""))

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        return json.loads(line) if line else {"error": "the driver exited"}

    def turn(self, calls: int) -> dict[str, Any]:
        """One session start (and `calls` timed commands in it)."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"calls {calls}\n" if calls else "start\n")
        self._proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if not self.why_not:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=60)


def ours(root: Path, client: Any, *, ahead: bool = False) -> Turn:
    """sandbox-agent's sandbox, the same way round: start, first command, more commands;
    `ahead`: its container made beforehand, untimed (a warm start: executor/sandbox/warm.py)."""
    def turn(calls: int) -> dict[str, Any]:
        config = SandboxConfig(root=root, session_id="bench" + uuid.uuid4().hex[:8],
                               image=DEFAULT_IMAGE)
        if ahead:
            warm.POOL.put("bench", config.session_id,
                          DockerSandbox(config, client=client).standby())
        box = DockerSandbox(config, client=client)
        args = {"command": COMMAND}
        try:
            began = time.perf_counter()
            box.start()
            output = box.call("run_shell_command", args).output
            took = (time.perf_counter() - began) * 1000
            if box.adopted != ahead:
                raise SystemExit("the warm start did not adopt its standby")
            each = []
            for _ in range(calls):
                began = time.perf_counter()
                box.call("run_shell_command", args)
                each.append((time.perf_counter() - began) * 1000)
        finally:
            box.stop()
        return {"ms": took, "output": output, "calls": each}
    return turn


def measure(contenders: dict[str, Turn], starts: int, calls: int) -> dict[str, Any]:
    """Interleaved turns; per contender its start samples, call samples or first error."""
    results: dict[str, dict[str, Any]] = {n: {"starts": [], "calls": []} for n in contenders}
    for name, turn in contenders.items():  # warm-up: page cache, first-use costs
        first = turn(0)
        if "error" in first:
            results[name]["error"] = first["error"]
        elif EXPECTED.strip() not in first.get("output", ""):
            results[name]["error"] = f"unexpected output {first.get('output')!r}"
    live = {n: t for n, t in contenders.items() if "error" not in results[n]}
    for i in range(starts):
        for name, turn in live.items():
            got = turn(calls if i == 0 else 0)
            if "error" in got:
                results[name].setdefault("error", got["error"])
                continue
            results[name]["starts"].append(got["ms"])
            results[name]["calls"].extend(got.get("calls", []))
    return results


def report(results: dict[str, Any], notes: dict[str, str], starts: int) -> None:
    """Medians, p90 and the ratio of each peer to sandbox-agent."""
    ours_start = _median(results.get("sandbox-agent", {}).get("starts"))
    ours_call = _median(results.get("sandbox-agent", {}).get("calls"))
    print(f"Side by side ({DEFAULT_IMAGE}, one run, {starts} interleaved starts each; ms)")
    print(f"{'':28}{'start median':>14}{'p90':>8}{'x ours':>8}{'cat median':>12}{'x ours':>8}")
    for name, result in results.items():
        label = f"{name} {notes.get(name, '')}".strip()
        if result.get("error") and not result["starts"]:
            print(f"{label:28}not measured: {result['error']}")
            continue
        start, call = _median(result["starts"]), _median(result["calls"])
        print(f"{label:28}{start:>14.1f}{_p90(result['starts']):>8.1f}"
              f"{start / ours_start:>7.2f}x{call:>12.2f}{call / ours_call:>7.1f}x")
        if result.get("error"):
            print(f"{'':28}(some turns failed: {result['error']})")


def _median(samples: list[float] | None) -> float:
    return statistics.median(samples) if samples else float("nan")


def _p90(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--venv", type=Path, default=HERE.parent / "build" / "bench-venv")
    options = parser.parse_args()
    client = connect()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        (root / "small.txt").write_text(EXPECTED)
        peers = [Peer(name, options.venv, root) for name in ("mini-swe-agent", "llm-sandbox")]
        contenders: dict[str, Turn] = {"sandbox-agent": ours(root, client),
                                       "sandbox-agent, warm": ours(root, client, ahead=True)}
        contenders |= {p.name: p.turn for p in peers if not p.why_not}
        try:
            results = measure(contenders, options.starts, options.calls)
        finally:
            for peer in peers:
                peer.close()
    for peer in peers:
        if peer.why_not:
            results[peer.name] = {"starts": [], "calls": [], "error": peer.why_not}
    report(results, {p.name: p.version for p in peers}, options.starts)


if __name__ == "__main__":
    main()
