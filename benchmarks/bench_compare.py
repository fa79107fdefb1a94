"""Two checkouts side by side in one run: the same benchmarks, taking turns, figure by figure.

    python benchmarks/bench_compare.py --before ../old-checkout [--after .] [--rounds 3]

Each checkout needs its own `.venv` (`pip install -e .`). Every round runs each benchmark in
both checkouts, in alternating order (so neither always runs on the warmer or quieter side),
and the table prints each figure's median over the rounds with after/before. A figure is a
line of a benchmark's output with a number in it, named by the text before its first number;
only names printed by both sides are compared (a number with no unit is in the
unit its benchmark's header names). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

BENCHES = (
    ("start", ["benchmarks/bench_sandbox.py", "--only", "start", "--starts", "8"]),
    ("calls", ["benchmarks/bench_sandbox.py", "--only", "calls", "--calls", "1000"]),
    ("concurrent", ["benchmarks/bench_sandbox.py", "--only", "concurrent"]),
    ("per call", ["benchmarks/bench_calls.py", "--calls", "200", "--rounds", "3"]),
)
_NUMBER = re.compile(r"(?<![A-Za-z\d.])(\d+(?:\.\d+)?)\s*(ms|µs|s)?\b")
"""A figure's number: not one inside a word (`p50`, `n=3` is after the figure anyway)."""


def figures(output: str) -> dict[str, float]:
    """`name -> first number` for each line of a benchmark's output that has one, the name
    being the text before it (a step number and parentheses left out)."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        text = re.sub(r"^\s*\d+\.\s+", "", line)
        match = _NUMBER.search(text)
        if match is None:
            continue
        name = re.sub(r"\s+", " ", re.sub(r"\(.*?\)", "", text[:match.start()])).strip(" :,")
        if not re.search("[A-Za-z]", name):
            continue
        unit = f" [{match[2]}]" if match[2] else ""
        found.setdefault(name + unit, float(match[1]))
        base = re.split(r"\s(?:median|p\d+)\b", name)[0]
        for tail in _PERCENTILE.finditer(text):  # `p50 0.22 ms   p95 0.31 ms`: each one
            found.setdefault(f"{base} p{tail[1]} [{tail[3]}]", float(tail[2]))
    return found


_PERCENTILE = re.compile(r"\bp(\d+)\s+(\d+(?:\.\d+)?)\s*(ms|µs|s)\b")


def run(checkout: Path, argv: list[str]) -> str:
    done = subprocess.run([str(checkout / ".venv/bin/python"), *argv], cwd=checkout,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{checkout}: {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path.cwd())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=[name for name, _ in BENCHES])
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"before {sides['before']}\nafter  {sides['after']}\nload {os.getloadavg()}")
    seen: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for bench, argv in BENCHES:
            if args.only and bench not in args.only:
                continue
            for side in order:
                for name, value in figures(run(sides[side], argv)).items():
                    seen[(bench, name, side)].append(value)
        print(f"round {round_ + 1} done · load {os.getloadavg()[0]:.2f}", flush=True)
    names = dict.fromkeys((bench, name) for bench, name, _ in seen)
    print(f"\n{'figure':70} {'before':>10} {'after':>10} {'after/before':>12}")
    for bench, name in names:
        before, after = seen.get((bench, name, "before")), seen.get((bench, name, "after"))
        if before and after:
            b, a = statistics.median(before), statistics.median(after)
            ratio = f"{a / b:.2f}" if b else "-"
            print(f"{bench + ': ' + name:70.70} {b:10.3f} {a:10.3f} {ratio:>12}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
