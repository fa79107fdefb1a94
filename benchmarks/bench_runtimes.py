"""What each engine and runtime costs, side by side in one run: Docker+runc, Docker+runsc, Podman.

    python benchmarks/bench_runtimes.py [--starts 7] [--calls 200] [--shells 50]
                                        [--podman-host unix:///run/sandbox-agent-podman/podman.sock]

Per target: session start (container created, toolbox started, first call answered), session
end (container removed), and the median of each tool call: a small read_file, a write_file, a
search_files over 200 files, and a run_shell_command `cat` (a process started per call, plus
the change-tracking walk). A target that is not set up is reported with the command that sets
it up (make engine, make podman), not measured.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.config import DEFAULT_IMAGE
from executor.errors import SandboxAgentError
from executor.sandbox.docker import DockerSandbox, SandboxConfig


@dataclass(frozen=True)
class Target:
    """An engine (DOCKER_HOST; None: the default) and OCI runtime (None: the engine's)."""

    name: str
    host: str | None
    runtime: str | None
    setup: str


def targets(podman_host: str) -> list[Target]:
    """The three measured side by side."""
    return [Target("Docker + runc", None, None, "make engine"),
            Target("Docker + runsc", None, "runsc", "make engine"),
            Target("Podman (rootful)", podman_host, None, "make podman")]


def client_for(target: Target) -> Any:
    """A docker SDK client for the target, or a SandboxAgentError saying why not."""
    import docker

    from executor.sandbox.engine import docker_errors

    with docker_errors(f"connecting to {target.name}"):
        client = docker.DockerClient(base_url=target.host) if target.host else docker.from_env()
        client.ping()
        client.images.get(DEFAULT_IMAGE)
    return client


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def config(root: Path, target: Target) -> SandboxConfig:
    return SandboxConfig(root=root, session_id="bench" + uuid.uuid4().hex[:8],
                         image=DEFAULT_IMAGE, runtime=target.runtime)


def sessions(root: Path, target: Target, client: Any, starts: int) -> dict[str, float]:
    """Start to first answer, and removal, over `starts` sessions."""
    started, ended = [], []
    for _ in range(starts):
        begin = time.perf_counter()
        box = DockerSandbox(config(root, target), client=client)
        box.start()
        box.call("read_file", {"path": "small.txt"})
        started.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        box.stop()
        ended.append(time.perf_counter() - begin)
    return {"session start": median_ms(started), "session end": median_ms(ended)}


def calls(root: Path, target: Target, client: Any, count: int, shells: int) -> dict[str, float]:
    """Median per call of each tool, in one session."""
    with DockerSandbox(config(root, target), client=client) as box:
        def call(tool: str, args: dict[str, Any]) -> Callable[[], object]:
            return lambda: box.call(tool, args)

        read = call("read_file", {"path": "small.txt"})
        write = call("write_file", {"path": "out.txt", "content": "x\n" * 50})
        search = call("search_files", {"pattern": "NEEDLE", "path": "tree"})
        shell = call("run_shell_command", {"command": "cat small.txt"})
        for warm in (read, write, search, shell):
            warm()
        return {"read_file": median_ms(timed(read, count)),
                "write_file": median_ms(timed(write, count)),
                "search_files (200 files)": median_ms(timed(search, max(count // 4, 5))),
                "run_shell_command cat": median_ms(timed(shell, shells))}


def measure(target: Target, root: Path, options: argparse.Namespace) -> dict[str, float] | str:
    """The target's figures, or why it was not measured."""
    try:
        client = client_for(target)
        figures = sessions(root, target, client, options.starts)
        return figures | calls(root, target, client, options.calls, options.shells)
    except SandboxAgentError as exc:
        return f"not measured: {exc.message} (set up with `{target.setup}`)"


def project(base: Path) -> Path:
    root = base / "proj"
    (root / "tree").mkdir(parents=True)
    (root / "small.txt").write_text("hello\n" * 20)
    for i in range(200):
        (root / "tree" / f"f{i}.py").write_text(f"x = {'NEEDLE' if i % 20 == 0 else i}\n" * 10)
    return root


def table(results: dict[str, dict[str, float] | str]) -> None:
    """The figures side by side (ms, medians), then what was not measured."""
    measured = {name: r for name, r in results.items() if isinstance(r, dict)}
    rows = next(iter(measured.values())).keys() if measured else []
    print(f"{'median, ms':28}" + "".join(f"{name:>20}" for name in measured))
    for row in rows:
        print(f"{row:28}" + "".join(f"{figures[row]:>20.1f}" for figures in measured.values()))
    for name, result in results.items():
        if isinstance(result, str):
            print(f"{name}: {result}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--shells", type=int, default=50)
    parser.add_argument("--podman-host", default="unix:///run/sandbox-agent-podman/podman.sock")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-agent-bench-") as base:
        root = project(Path(base))
        results = {t.name: measure(t, root, options) for t in targets(options.podman_host)}
    print(f"Engines and runtimes side by side ({DEFAULT_IMAGE}, one run)")
    table(results)


if __name__ == "__main__":
    main()
