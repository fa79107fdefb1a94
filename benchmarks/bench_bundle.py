"""The toolbox bundle each CLI process sends into its container: compiled vs kept in the lock dir.

    python benchmarks/bench_bundle.py [--runs 15]

Every run is a new process (as every `sandbox-agent` command is) that makes the compiled bundle
once, timed in the process: without a cache (the toolbox's 30 modules compiled, marshalled and
compressed) and with the lock dir's cache (executor/sandbox/bundle.py: read, checked against its
sha256, used). The two take turns (A B A B ...) and the ratio is taken pair by pair, so a
machine whose speed drifts still gives a fair ratio. Medians of CPU and wall ms are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = """
import json, sys, time
from executor.sandbox import bundle
cache = sys.argv[1] or None
wall, cpu = time.perf_counter(), time.process_time()
blob = bundle.compiled_toolbox(cache and __import__("pathlib").Path(cache))
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "size": len(blob)}))
"""


def one(cache: str) -> dict[str, float]:
    """CPU and wall seconds of making the bundle in a new process (`cache`: the lock dir)."""
    done = subprocess.run([sys.executable, "-c", PROBE, cache], cwd=REPO, check=True,
                          capture_output=True, text=True)
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as lock_dir:
        one(lock_dir)  # the first process compiles and keeps it
        pairs = [(one(""), one(lock_dir)) for _ in range(options.runs)]
    print(f"The compiled toolbox bundle, made once in a new process; median of {options.runs} "
          f"pairs ({int(pairs[0][0]['size'])} bytes)")
    print(f"{'':<44}{'CPU ms':>9}{'wall ms':>9}")
    for label, side in (("compiled in the process (no cache)", 0),
                        ("loaded from the lock dir's cache", 1)):
        cpu = statistics.median(pair[side]["cpu"] for pair in pairs) * 1000
        wall = statistics.median(pair[side]["wall"] for pair in pairs) * 1000
        print(f"{label:<44}{cpu:>9.2f}{wall:>9.2f}")
    ratio = statistics.median(b["cpu"] / a["cpu"] for a, b in pairs)
    print(f"cached / compiled, CPU (paired median): {ratio:.3f}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
