"""How well the agent does everyday tasks end to end: pass rate, per class, median time.

    python benchmarks/bench_agent.py [--split dev|check|all] [-k NAME] [--logs DIR]
                                     [--json FILE] [-- extra ask flags, e.g. --model X]

Each task (benchmarks/agent_tasks.py; the multi-step ones on a real-size generated project in
benchmarks/project_tasks.py, their names starting `geo-`) runs in a fresh temporary project
through the real CLI — `sandbox-agent ask --provider embedded --yes "<task>"`, a real container,
the default settings — and is judged by its real effect: the files on disk, that they still work
(run in a throwaway container with the sandbox image, read-only, no network), and the answer
printed on stdout. Time per task is the whole command, model load included, as a user waits for
it.

The tasks come in two halves: tune against `dev` and run `check` only to confirm that a change
generalises (the default runs both and prints each half apart). The machine's load average is
printed before and after: on a shared machine the times mean little without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_tasks import MULTI_STEP, ONE_STEP, TASKS, Task
from project_tasks import PROJECT_TASKS

CLI = str(Path(sys.executable).parent / "sandbox-agent")
IMAGE = os.environ.get("SANDBOX_AGENT_IMAGE", "sandbox-agent:latest")
TASK_TIMEOUT = 900
_DONE = re.compile(r"done · .*?(\d+) model turns? · .*?(\d+) tool calls?")


@dataclass
class Outcome:
    """One task's run and verdict."""

    name: str
    kind: str
    split: str
    passed: bool
    reason: str
    seconds: float
    cpu_seconds: float
    exit_code: int
    turns: int | None
    tool_calls: int | None
    answer: str


@dataclass
class Checker:
    """What a judge sees: the project after the run and the answer (satisfies `Check`)."""

    root: Path
    answer: str

    def python(self, code: str) -> tuple[int, str]:
        """`python3 -c code` in the project, in a throwaway container: the model wrote it."""
        argv = [
            "docker", "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp",
            "--memory", "512m", "--pids-limit", "128", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "-e", "PYTHONDONTWRITEBYTECODE=1",
            "-v", f"{self.root}:/project:ro", "-w", "/project", IMAGE, "python3", "-c", code,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        return done.returncode, done.stdout + done.stderr


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_task(task: Task, extra: Sequence[str], logs: Path | None) -> Outcome:
    """Set up a fresh project, run the real CLI on the task, judge what it did."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{task.name}-") as tmp:
        root, state = Path(tmp) / "project", Path(tmp) / "state"
        for rel, text in task.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        root.mkdir(exist_ok=True)
        argv = [CLI, "ask", "--provider", "embedded", "--root", str(root), "--yes", *extra]
        argv += ["--trace"] if logs else []
        env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": str(state / "state"),
               "SANDBOX_AGENT_CONFIG_DIR": str(state / "config")}
        started, cpu = time.monotonic(), _children_cpu()
        code, out, err = run_cli([*argv, task.ask], env)
        seconds, cpu = time.monotonic() - started, _children_cpu() - cpu
        reason = _verdict(task, root, out, code)
        if logs:
            _keep_log(logs, task, root, out, err, reason)
    done_line = _DONE.search(err)
    turns, calls = (int(done_line[1]), int(done_line[2])) if done_line else (None, None)
    return Outcome(task.name, task.kind, task.split, not reason, reason or "", round(seconds, 1),
                   round(cpu, 1), code, turns, calls, out.strip())


def run_cli(argv: list[str], env: dict[str, str],
            timeout: float = TASK_TIMEOUT) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the CLI; past `timeout` it gets SIGTERM first, so that
    it removes its container as on Ctrl-C (-1 then), and SIGKILL 30 s later."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, stdin=subprocess.DEVNULL) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            return -1, out, err + "\n[bench: timed out]"


def _children_cpu() -> float:
    """CPU seconds used by finished child processes: less sensitive to load than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _verdict(task: Task, root: Path, answer: str, code: int) -> str | None:
    if code != 0:
        return f"exit code {code}"
    try:
        return task.judge(Checker(root, answer.strip()))
    except Exception as exc:  # a judge tripping over odd output is a failed task, not a crash
        return f"judge error: {type(exc).__name__}: {exc}"


def _text(data: Any) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _keep_log(logs: Path, task: Task, root: Path, out: str, err: str, reason: str | None) -> None:
    files = "\n".join(
        f"--- {p.relative_to(root)}\n{p.read_text(errors='replace')}"
        for p in sorted(root.rglob("*")) if p.is_file() and ".sandbox-agent" not in p.parts
    )
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{task.name}.log").write_text(
        f"ask: {task.ask}\nverdict: {reason or 'pass'}\n\n== stdout\n{out}\n== stderr\n{err}\n"
        f"== files after\n{files}\n"
    )


def summary(outcomes: Sequence[Outcome]) -> list[str]:
    """Pass rate, per-class and per-kind results, median time."""
    if not outcomes:
        return ["no tasks"]
    lines = []
    for label, kinds in (("one-step", ONE_STEP), ("multi-step", MULTI_STEP)):
        group = [o for o in outcomes if o.kind in kinds]
        if group:
            per_kind = ", ".join(_score([o for o in group if o.kind == k], k) for k in kinds
                                 if any(o.kind == k for o in group))
            lines.append(f"  {_score(group, f'{label:<11}')}  ({per_kind})")
    times = [o.seconds for o in outcomes]
    lines.append(f"  passed      {sum(o.passed for o in outcomes)}/{len(outcomes)}   "
                 f"median {statistics.median(times):.1f} s/task "
                 f"(min {min(times):.1f}, max {max(times):.1f}), "
                 f"median CPU {statistics.median(o.cpu_seconds for o in outcomes):.1f} s")
    return lines


def _score(outcomes: Sequence[Outcome], label: str) -> str:
    return f"{label} {sum(o.passed for o in outcomes)}/{len(outcomes)}"


def _line(outcome: Outcome) -> str:
    mark = "pass" if outcome.passed else "FAIL"
    return (f"{mark}  {outcome.split:<5} {outcome.kind:<9} {outcome.name:<22} "
            f"{outcome.seconds:6.1f} s {outcome.cpu_seconds:6.1f} cpu  "
            f"{outcome.turns or '-'} turns  {outcome.reason[:90]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected tasks one after another and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("dev", "check", "all"), default="all")
    parser.add_argument("-k", dest="names", action="append", default=[],
                        help="only tasks whose name contains this (repeatable)")
    parser.add_argument("--logs", type=Path, help="keep each task's trace and files here")
    parser.add_argument("--json", type=Path, help="write every outcome to this file")
    parser.add_argument("extra", nargs="*", help="extra `ask` flags (after --)")
    options = parser.parse_args(argv)
    if not shutil.which("docker"):
        print("bench_agent needs the docker CLI for its judges", file=sys.stderr)
        return 2
    tasks = [t for t in [*TASKS, *PROJECT_TASKS] if options.split in ("all", t.split)
             and (not options.names or any(n in t.name for n in options.names))]
    print(f"{len(tasks)} tasks · ask flags: {' '.join(options.extra) or '(defaults)'} · "
          f"load {load()}", flush=True)
    outcomes = []
    for task in tasks:
        outcomes.append(run_task(task, options.extra, options.logs))
        print(_line(outcomes[-1]), flush=True)
    print(f"load {load()}")
    for split in ("dev", "check"):
        half = [o for o in outcomes if o.split == split]
        if half:
            print(f"{split}:", *summary(half), sep="\n")
    if options.split == "all":
        print("all:", *summary(outcomes), sep="\n")
    if options.json:
        options.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
