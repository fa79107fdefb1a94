"""Sandbox figures, measured side by side in one run (ratios matter more than absolutes).

    python benchmarks/bench_sandbox.py [--calls 2000] [--starts 10] [--files 20000]
                                       [--sessions 20] [--each 200]

1. tool-call overhead: a small read_file host -> toolbox -> host, over the toolbox's FIFOs and
   over the engine's stream relay, against the same read as one `docker exec cat` per call,
   and against an in-process read on the host;
2. session start: container created and the toolbox answering its first call; then cold
   against a warm start (a standby made ahead, executor/sandbox/warm.py), in this process (as
   orchestrate's children get it) and left on disk for the next process (SANDBOX_AGENT_WARM:
   the claim of its record included), interleaved, and where a warm start's time goes;
3. search_files over a generated tree of N files, against ripgrep run directly on the host;
4. concurrent sessions: `--sessions` sandboxes started, then each does `--each` small read_file
   calls at the same time as all the others: back to back, and paced (a random pause between
   calls, as a session waiting on its model has); p50/p95/p99 of every call, beside one
   session alone doing the same. Twice: one thread a session in this process (the host sides
   share one GIL), and one process a session, as separate `sandbox-agent` runs are. All of it
   over the FIFOs and again over the engine's stream relay.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from executor.config import DEFAULT_IMAGE
from executor.sandbox import warm
from executor.sandbox.config import default_lock_dir
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall-clock seconds of each of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def ms(samples: list[float]) -> str:
    """Median and p90 in milliseconds."""
    ordered = sorted(samples)
    return (f"median {statistics.median(ordered) * 1000:8.3f} ms   "
            f"p90 {ordered[int(len(ordered) * 0.9)] * 1000:8.3f} ms   n={len(ordered)}")


def config(root: Path, fifo: bool = True) -> SandboxConfig:
    """A fresh session on `root`; `fifo`: tool calls over the FIFOs, else the engine's stream."""
    return SandboxConfig(root=root, session_id="bench" + uuid.uuid4().hex[:8], image=DEFAULT_IMAGE,
                         fifo_channel=fifo)


CHANNELS = {True: "over the FIFOs", False: "over the engine's stream"}


def bench_calls(root: Path, client: object, calls: int) -> None:
    """Toolbox round trip vs docker exec vs in-process."""
    (root / "small.txt").write_text("hello\n" * 20)
    with DockerSandbox(config(root), client=client) as box, \
            DockerSandbox(config(root, fifo=False), client=client) as relayed:
        calls_of: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(2):  # interleaved, so that neither gets the quieter machine
            for fifo, sandbox in ((True, box), (False, relayed)):
                sandbox.call("read_file", {"path": "small.txt"})
                calls_of[fifo] += timed(partial(sandbox.call, "read_file", {"path": "small.txt"}),
                                        calls // 2)
        container = client.containers.get(box.info.container_id)  # type: ignore[attr-defined]
        execs = timed(lambda: container.exec_run(["cat", "/workspace/small.txt"]), 50)
    local = timed(lambda: (root / "small.txt").read_text().splitlines(), calls)
    print("1. tool-call overhead (small read_file)")
    print(f"   toolbox over its FIFOs       {ms(calls_of[True])}")
    print(f"   toolbox over engine stream   {ms(calls_of[False])}")
    print(f"   docker exec per call         {ms(execs)}")
    print(f"   in-process on the host       {ms(local)}")
    ratio = statistics.median(calls_of[False]) / statistics.median(calls_of[True])
    print(f"   the FIFOs are {ratio:.1f}x faster than the engine's stream")
    ratio = statistics.median(execs) / statistics.median(calls_of[True])
    print(f"   toolbox is {ratio:.0f}x faster than an exec per call")


def bench_start(root: Path, client: object, starts: int) -> None:
    """Container create + toolbox ready + first call answered, then removal."""
    def one() -> None:
        with DockerSandbox(config(root), client=client) as box:
            box.call("read_file", {"path": "small.txt"})

    samples = []
    for _ in range(starts):
        start = time.perf_counter()
        box = DockerSandbox(config(root), client=client)
        box.start()
        box.call("read_file", {"path": "small.txt"})
        samples.append(time.perf_counter() - start)
        box.stop()
    removal = timed(one, 3)
    print("2. session start (create + start + toolbox answers first call)")
    print(f"   start to first answer        {ms(samples)}")
    print(f"   whole session incl. removal  {ms(removal)}")


def make_tree(root: Path, files: int) -> None:
    """`files` small source files in nested directories; 1 in 100 contains the needle."""
    for i in range(files):
        folder = root / f"pkg{i % 50}" / f"mod{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        needle = "NEEDLE_TOKEN" if i % 100 == 0 else "nothing"
        (folder / f"f{i}.py").write_text(f"def f{i}():\n    return '{needle}'\n" * 5)


def bench_search(root: Path, client: object, files: int) -> None:
    """search_files in the container vs rg on the host, same tree, same pattern."""
    make_tree(root, files)
    rg = shutil.which("rg")
    with DockerSandbox(config(root), client=client) as box:
        args = {"pattern": "NEEDLE_TOKEN", "max_results": 1000}
        box.call("search_files", args)  # warm the page cache for both
        inside = timed(lambda: box.call("search_files", args), 7)
        hits = box.call("search_files", args).output.count("NEEDLE_TOKEN")
    print(f"3. search_files over {files} files ({hits} matching lines)")
    print(f"   search_files in the sandbox  {ms(inside)}")
    if not rg:
        print("   ripgrep not installed on the host: no side-by-side figure")
        return
    cmd = [rg, "--line-number", "--no-heading", "--color", "never", "NEEDLE_TOKEN", "."]
    host = timed(lambda: subprocess.run(cmd, cwd=root, capture_output=True, check=False), 7)
    print(f"   rg on the host               {ms(host)}")
    ratio = statistics.median(inside) / statistics.median(host)
    print(f"   ratio sandbox / host         {ratio:.2f}x")


def percentiles(samples: list[float]) -> str:
    """p50, p95 and p99 in milliseconds."""
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000

    return (f"p50 {at(0.5):7.3f} ms   p95 {at(0.95):7.3f} ms   p99 {at(0.99):7.3f} ms   "
            f"n={len(ordered)}")


def bench_concurrent(root: Path, client: object, sessions: int, each: int, fifo: bool) -> None:
    """`sessions` sandboxes answering small read_file calls all at once."""
    (root / "small.txt").write_text("hello\n" * 20)
    with ThreadPoolExecutor(4) as pool:  # four starts at a time: the engine serialises anyway
        boxes = list(pool.map(lambda _: _started(root, client, fifo), range(sessions)))
    try:
        alone = timed(lambda: boxes[0].call("read_file", {"path": "small.txt"}), each)
        closed = _all_at_once(boxes, each, pause=0.0)
        paced = _all_at_once(boxes, each, pause=PACE)
    finally:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda box: box.stop(), boxes))
    apart = _in_processes(root, sessions, each, fifo)
    print(f"4. {sessions} concurrent sessions, small read_file, {each} calls each, "
          f"{CHANNELS[fifo]}")
    print(f"   one session alone            {percentiles(alone)}")
    print("   one process, a thread a session (one GIL for all the host sides):")
    print(f"   all back to back             {percentiles(closed)}")
    print(f"   all, {PACE * 1000:.0f} ms apart on average  {percentiles(paced)}")
    print("   a process a session (as separate sandbox-agent runs are):")
    print(f"   all back to back             {percentiles(apart[0])}")
    print(f"   all, {PACE * 1000:.0f} ms apart on average  {percentiles(apart[1])}")


def _in_processes(root: Path, sessions: int, each: int,
                  fifo: bool) -> tuple[list[float], list[float]]:
    """(back to back, paced) seconds of every call, each session in a process of its own."""
    context = multiprocessing.get_context("spawn")
    gates = (context.Barrier(sessions), context.Barrier(sessions))
    out: multiprocessing.Queue[tuple[list[float], list[float]]] = context.Queue()
    roots = [root / f"process{i}" for i in range(sessions)]  # one bind session a root at a time
    for own in roots:
        own.mkdir(exist_ok=True)
        (own / "small.txt").write_bytes((root / "small.txt").read_bytes())
    workers = [context.Process(target=_session, args=(roots[i], each, i, gates, out, fifo))
               for i in range(sessions)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    return ([x for closed, _ in results for x in closed],
            [x for _, paced in results for x in paced])


def _session(root: Path, each: int, seed: int, gates: tuple[Any, Any], out: Any,
             fifo: bool) -> None:
    """One session's process: start a sandbox, then call back to back and paced, in step."""
    box = _started(root, connect(), fifo)
    try:
        rounds = []
        for gate, pause in zip(gates, (0.0, PACE), strict=True):
            rng = random.Random(seed)
            gate.wait()
            samples = []
            for _ in range(each):
                time.sleep(rng.uniform(0, 2 * pause))
                samples += timed(lambda: box.call("read_file", {"path": "small.txt"}), 1)
            rounds.append(samples)
        out.put((rounds[0], rounds[1]))
    finally:
        box.stop()


PACE = 0.02
"""Mean seconds between two calls of a session in the paced round (random, 0 to twice that):
20 sessions then make about 1,000 calls a second, far more than agents waiting on a model."""


def _all_at_once(boxes: list[DockerSandbox], each: int, pause: float) -> list[float]:
    """Every call's seconds, the sessions calling together (one thread each)."""
    gate = threading.Barrier(len(boxes))
    results: list[list[float]] = [[] for _ in boxes]

    def worker(i: int) -> None:
        rng = random.Random(i)
        gate.wait()
        for _ in range(each):
            time.sleep(rng.uniform(0, 2 * pause))
            results[i] += timed(lambda: boxes[i].call("read_file", {"path": "small.txt"}), 1)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(boxes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [sample for samples in results for sample in samples]


def bench_warm(root: Path, client: object, starts: int) -> None:
    """Start to first answer: cold, adopting a standby of this process, adopting one left for
    the next process (its record claimed first); interleaved, so none gets the quieter
    machine. Then one profile of warm starts: the functions that take the most of it."""
    import cProfile
    import pstats

    samples: dict[str, list[float]] = {"cold": [], "warm": [], "left": []}
    profile = cProfile.Profile()
    for _ in range(starts):
        for kind, taken in samples.items():
            taken.append(_one_start(root, client, kind, profile if kind == "left" else None))
    print("   cold vs a container made ahead (start to first answer)")
    for kind, label in (("cold", "cold"), ("warm", "standby of this process"),
                        ("left", "standby left for the next")):
        print(f"   {label:<29}{ms(samples[kind])}")
    for kind in ("warm", "left"):
        ratio = statistics.median(samples[kind]) / statistics.median(samples["cold"])
        print(f"   {kind} start is {ratio:.2f}x the cold one")
    print("   where a left standby's start goes (cumulative, top functions of ours):")
    stats = pstats.Stats(profile)
    rows = [(key, value[3]) for key, value in stats.stats.items()  # type: ignore[attr-defined]
            if "/executor/" in key[0]]
    for (path, line, name), took in sorted(rows, key=lambda r: -r[1])[:12]:
        where = path.split("/executor/")[-1]
        print(f"     {took / starts * 1000:8.1f} ms  {name} ({where}:{line})")


def _one_start(root: Path, client: object, kind: str, profile: Any) -> float:
    """One session's start to its first answer (`kind`: cold, warm, left); then it ends."""
    cfg = config(root)
    if kind == "warm":
        warm.POOL.put("bench", cfg.session_id, DockerSandbox(cfg, client=client).standby())
    elif kind == "left":
        standby = DockerSandbox(cfg, client=client).standby(ttl=120)
        assert standby is not None
        warm.leave(standby, default_lock_dir(), read_only=False)
    if profile is not None:
        profile.enable()
    start = time.perf_counter()
    if kind == "left":
        found = warm.left(default_lock_dir(), root, read_only=False, client=client)
        warm.POOL.put("bench", cfg.session_id, found)
    box = DockerSandbox(cfg, client=client)
    box.start()
    box.call("read_file", {"path": "small.txt"})
    took = time.perf_counter() - start
    if profile is not None:
        profile.disable()
    if box.adopted != (kind != "cold"):
        raise SystemExit(f"the {kind} start did not {'not ' if kind == 'cold' else ''}adopt")
    box.stop()
    return took


def _started(root: Path, client: object, fifo: bool = True) -> DockerSandbox:
    box = DockerSandbox(config(root, fifo), client=client)
    box.start()
    box.call("read_file", {"path": "small.txt"})
    return box


def main() -> None:
    """Run the measurements (all four, or `--only` one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--each", type=int, default=200)
    parser.add_argument("--only", choices=["calls", "start", "search", "concurrent"])
    options = parser.parse_args()
    client = connect()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        wanted = {options.only} if options.only else {"calls", "start", "search", "concurrent"}
        if "calls" in wanted:
            bench_calls(root, client, options.calls)
        if "start" in wanted:
            bench_start(root, client, options.starts)
            bench_warm(root, client, options.starts)
        if "search" in wanted:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            bench_search(tree, client, options.files)
        if "concurrent" in wanted:
            for fifo in (True, False):
                bench_concurrent(root, client, options.sessions, options.each, fifo)


if __name__ == "__main__":
    main()
