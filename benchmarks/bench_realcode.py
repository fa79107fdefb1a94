"""Everyday requests on real code nobody here wrote: a small pure-Python library whose source
distribution ships its tests, fetched by pip when the benchmark runs (never committed).

    python benchmarks/bench_realcode.py [-k NAME] [--logs DIR] [-- extra ask flags]

The library is webcolors 1.11.1: one 784-line module (src/webcolors.py), five unittest files,
36 tests, no dependencies. Its sdist goes to build/realcode/ (`pip download --no-binary :all:`;
the package mirror pip is configured with is used, nothing else). Each task runs in a fresh
copy through the real CLI with the embedded model (`bench_agent.run_task`), judged by its real
effect: the suite run in a throwaway container, the answer, or the review's findings. Prints
each task, then the pass rate and the median time, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_tasks import Check, Judge, Task, all_of, answer_has, python_ok
from bench_agent import CLI, Outcome, _line, load, run_cli, run_task

PACKAGE, VERSION = "webcolors", "1.11.1"
BUILD = Path(__file__).resolve().parent.parent / "build" / "realcode"
MODULE = "src/webcolors.py"
SUITE = ["-m", "unittest", "discover", "-s", "tests", "-t", "."]
TESTS = 36
PLANT = ("return 0 if value < 0 else 255 if value > 255 else value",
         "return 0 if value < 0 else 255 if value < 255 else value")
"""A one-character bug in _normalize_integer_rgb: most of the suite fails with it."""


def fetch() -> Path:
    """The unpacked sdist in build/realcode/ (downloaded by pip the first time)."""
    unpacked = BUILD / f"{PACKAGE}-{VERSION}"
    if unpacked.is_dir():
        return unpacked
    BUILD.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--no-binary", ":all:", f"{PACKAGE}=={VERSION}", "-d", str(BUILD)],
                   check=True)
    with tarfile.open(BUILD / f"{PACKAGE}-{VERSION}.tar.gz") as archive:
        archive.extractall(BUILD, filter="data")
    return unpacked


def project_files(unpacked: Path) -> dict[str, str]:
    """Every text file of the sdist, by relative path (not the .mypy_cache it ships by
    mistake, nor its egg-info)."""
    files = {}
    for path in sorted(unpacked.rglob("*")):
        parts = path.relative_to(unpacked).parts
        if any(p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        if path.is_file():
            try:
                files[str(path.relative_to(unpacked))] = path.read_text()
            except UnicodeDecodeError:
                continue
    return files


def suite_passes(files: dict[str, str], at_least: int = TESTS,
                 unchanged: tuple[str, ...] = ()) -> Judge:
    """The library's own suite runs at least `at_least` tests and passes; `unchanged` files
    are as shipped."""
    code = f"""
        import os, re, subprocess, sys
        env = {{**os.environ, "PYTHONPATH": "src"}}
        done = subprocess.run([sys.executable, *{SUITE!r}], capture_output=True, text=True,
                              env=env, timeout=120)
        ran = re.search(r"Ran (\\d+) tests?", done.stderr)
        assert done.returncode == 0, done.stderr[-400:]
        assert ran and int(ran[1]) >= {at_least}, done.stderr[-400:]
        """

    def same(check: Check) -> str | None:
        changed = [p for p in unchanged if (check.root / p).read_text() != files[p]]
        return f"changed {changed}" if changed else None

    return all_of(same, python_ok(code))


def has_no(name: str) -> Judge:
    def judge(check: Check) -> str | None:
        left = [str(p.relative_to(check.root)) for p in check.root.rglob("*.py")
                if ".sandbox-agent" not in p.parts and name in p.read_text(errors="replace")]
        return f"{name} still in {left}" if left else None

    return judge


def tasks(files: dict[str, str]) -> list[Task]:
    """The everyday requests (the names match the issue's list)."""
    planted = {**files, MODULE: files[MODULE].replace(*PLANT)}
    return [
        Task("wc-run-tests", "run", "check",
             "Run this project's test suite and tell me how many tests ran and whether they "
             "passed.", files, answer_has(str(TESTS))),
        Task("wc-answer", "answer", "check",
             "What does normalize_hex turn a three-digit value like #09C into?", files,
             answer_has("#0099cc")),
        Task("wc-fix-bug", "find-edit", "check",
             "Since my last change a lot of tests fail. Find the bug and fix it so that the "
             "suite passes again.", planted,
             suite_passes(files, unchanged=tuple(p for p in files if p.startswith("tests/")))),
        Task("wc-add-test", "edit", "check",
             "Add a test for rgb_to_hex to tests/test_conversion.py.", files,
             suite_passes(files, TESTS + 1)),
        Task("wc-rename", "find-edit", "check",
             "Rename the private helper _percent_to_integer to _percent_to_int, and update "
             "where it is used.", files,
             all_of(has_no("_percent_to_integer"), suite_passes(files))),
    ]


def review_task(files: dict[str, str], extra: Sequence[str]) -> Outcome:
    """`review --diff-base HEAD~1` of the commit that planted the bug: is it found?"""
    line = files[MODULE].splitlines().index("    " + PLANT[0]) + 1
    with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
        root = Path(tmp) / "project"
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        subprocess.run([*git, "init", "-q"], cwd=root, check=True)
        subprocess.run([*git, "add", "."], cwd=root, check=True)
        subprocess.run([*git, "commit", "-qm", "as shipped"], cwd=root, check=True)
        (root / MODULE).write_text(files[MODULE].replace(*PLANT))
        subprocess.run([*git, "commit", "-qam", "Tidy the clamping"], cwd=root, check=True)
        env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": f"{tmp}/state",
               "SANDBOX_AGENT_CONFIG_DIR": f"{tmp}/config"}
        started = time.monotonic()
        code, out, err = run_cli([CLI, "review", "--provider", "embedded", "--root", str(root),
                                  "--diff-base", "HEAD~1", "--format", "json", *extra], env,
                                 timeout=1800)
        seconds = time.monotonic() - started
    reason = _review_verdict(code, out, err, line)
    return Outcome("wc-review", "review", "check", reason is None, reason or "",
                   round(seconds, 1), 0.0, code, None, None, out[-500:])


def _review_verdict(code: int, out: str, err: str, line: int) -> str | None:
    if code != 0:
        return f"exit code {code}: {err.strip().splitlines()[-1:]}"
    report = json.loads(out)
    near = [f for f in report["findings"] if f["file"].endswith("webcolors.py")
            and f.get("line") and abs(f["line"] - line) <= 5]
    return None if near else f"no finding near {MODULE}:{line} ({len(report['findings'])} found)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="names", action="append", default=[])
    parser.add_argument("--logs", type=Path)
    parser.add_argument("extra", nargs="*")
    options = parser.parse_args(argv)
    files = project_files(fetch())
    chosen = [t for t in tasks(files) if not options.names or any(n in t.name
                                                                 for n in options.names)]
    review = not options.names or any(n in "wc-review" for n in options.names)
    print(f"{PACKAGE} {VERSION}: {len(files)} files, {MODULE} "
          f"{len(files[MODULE].splitlines())} lines · load {load()}", flush=True)
    outcomes = []
    for task in chosen:
        outcomes.append(run_task(task, options.extra, options.logs))
        print(_line(outcomes[-1]), flush=True)
    if review:
        outcomes.append(review_task(files, options.extra))
        print(_line(outcomes[-1]), flush=True)
    times = [o.seconds for o in outcomes]
    if times:
        print(f"load {load()}\npassed {sum(o.passed for o in outcomes)}/{len(outcomes)} · "
              f"median {statistics.median(times):.1f} s/task")
    return 0


if __name__ == "__main__":
    sys.exit(main())
