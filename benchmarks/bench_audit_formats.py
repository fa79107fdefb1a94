"""What exporting a large audit log costs, and what a dead OpenTelemetry collector costs a run.

    python benchmarks/bench_audit_formats.py [--records 20000]

Writes a log of about `--records` records with the real writer (runs with every record kind,
hostile names included: tests/fakes/audit_log.py), then times, best of 3, each format through
the real console script as a person runs it (`sandbox-agent audit export --format F -o FILE`,
`audit report`, `audit verify`): process start included. Then the tracing's part of a run's end
(`Tracing.close`) with a collector that answers, one that refuses connections and one that
accepts and never answers, and what tracing adds to each hook event.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test fakes

from executor import audit, telemetry
from executor.hooks import CompleteEvent, HookBus
from executor.redact import Redactor
from tests.fakes.audit_log import Clock, full_run, hook_events
from tests.fakes.otlp_receiver import OtlpReceiver

CLI = str(Path(sys.executable).parent / "sandbox-agent")


def build_log(directory: Path, records: int) -> int:
    clock = Clock()
    runs = max(1, records // 22)  # full_run writes 22 records
    for n in range(runs):
        full_run(directory, session=f"s{n % 50}", clock=clock)
    return sum(1 for _ in audit.read_records(directory))


def best_of(command: list[str], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - began)
    return min(times)


def bench_exports(directory: Path, count: int, out: Path) -> None:
    base = [CLI, "audit"]
    where = ["--audit-dir", str(directory)]
    print(f"{count} records, {sum(p.stat().st_size for p in directory.glob('*.ndjson')):,} bytes")
    baseline = best_of([CLI, "--version"])
    print(f"  {'sandbox-agent --version (process start)':42} {baseline * 1000:7.0f} ms")
    for label, args in [
        ("audit verify", ["verify", *where]),
        ("audit export --format jsonl", ["export", "-f", "jsonl", *where, "-o", str(out)]),
        ("audit export --format csv", ["export", "-f", "csv", *where, "-o", str(out)]),
        ("audit export --format ocsf", ["export", "-f", "ocsf", *where, "-o", str(out)]),
        ("audit report", ["report", *where, "-o", str(out)]),
    ]:
        took = best_of([*base, *args])
        size = out.stat().st_size if "-o" in args else 0
        print(f"  {label:42} {took * 1000:7.0f} ms  {count / took:9,.0f} records/s"
              f"  {size:12,} bytes out")


def run_events(tracing: telemetry.Tracing | None, runs: int = 50) -> float:
    bus = HookBus()
    if tracing is not None:
        tracing.attach(bus)
    began = time.perf_counter()
    events = 0
    for _ in range(runs):
        for event in [*hook_events(), CompleteEvent(status="ok", turns=3)]:
            bus.emit(event)
            events += 1
    return (time.perf_counter() - began) / events


def bench_tracing() -> None:
    redactor = Redactor({})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}"
    plain = run_events(None)
    print(f"hook event without tracing: {plain * 1e6:.0f} µs")
    with OtlpReceiver() as live, OtlpReceiver(hang=True) as dead:
        for label, endpoint in [("collector answering", live.endpoint),
                                ("connection refused", refused),
                                ("collector accepting, never answering", dead.endpoint)]:
            tracing = telemetry.Tracing.create(endpoint + "/v1/traces", redactor, environ={})
            per_event = run_events(tracing)
            began = time.perf_counter()
            tracing.close()
            closing = time.perf_counter() - began
            print(f"  {label:38} {per_event * 1e6:6.0f} µs a hook event, close "
                  f"{closing * 1000:6.0f} ms (bound {telemetry.SHUTDOWN_TIMEOUT_S * 1000:.0f} ms)")
        print(f"  spans the answering collector got: {len(live.spans)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "audit"
        began = time.perf_counter()
        count = build_log(directory, args.records)
        print(f"wrote the log in {time.perf_counter() - began:.1f} s")
        bench_exports(directory, count, Path(scratch) / "out")
    bench_tracing()


if __name__ == "__main__":
    main()
