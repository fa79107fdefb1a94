"""What a big tree costs a whole one-call `ask`, bind and copy, as a curve (µs a file).

    python benchmarks/bench_trees.py [--sizes 1000,20000,100000,300000] [--runs 3]
                                     [--copy-sizes 1000,20000]

For each size a tree of that many small files is made, half of them under `node_modules`
(as a JavaScript project's are), and `sandbox-agent ask --yes` runs on it as a person runs it
(a new process, the stand-in model server on 127.0.0.1 asking for one `read_file`, then
answering), in a bind workspace and in a copy workspace (`--copy-sizes`; the copy's
file limit is raised to fit), turn by turn (bind, copy, bind ...)
so both see the same machine. Medians of `--runs` are printed, and the slope against the
smallest tree: (T(n) - T(smallest)) / (n - smallest), the cost of one more file.
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

from tests.fakes.model_server import Call, ModelServer

CLI = str(Path(sys.executable).parent / "sandbox-agent")


def make_tree(root: Path, files: int) -> None:
    """`files` files of 64 bytes: half in src/, half in node_modules/ (100 files a folder)."""
    data = b"module.exports = function () { return 'some text to fill it'; };\n"
    (root / "small.txt").write_text("hello\n" * 3)
    made: set[Path] = set()
    for i in range(files - 1):
        folder = root / ("node_modules/pkg" if i % 2 else "src/mod") / str(i // 200)
        if folder not in made:
            folder.mkdir(parents=True)
            made.add(folder)
        (folder / f"f{i}.js").write_bytes(data)


def one_ask(root: Path, server: ModelServer, workspace: str, env: dict[str, str]) -> float:
    """Seconds of one `ask` with one read_file call, start to exit."""
    server.reply(tool_calls=[Call("read_file", {"path": "small.txt"})]).reply("done")
    argv = [CLI, "ask", "--root", str(root), "--host", server.url, "--yes",
            "--workspace", workspace, "read small.txt"]
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=900)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"ask failed ({workspace}, exit {done.returncode}): {done.stderr[-800:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,20000,100000,300000")
    parser.add_argument("--copy-sizes", default="1000,20000",
                        help="the sizes a copy workspace is measured at too")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    copy_sizes = {int(s) for s in options.copy_sizes.split(",") if s}
    got: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp, ModelServer() as server:
        env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": str(Path(tmp) / "state"),
               "NO_COLOR": "1",  # a copy as big as asked for (--copy-sizes)
               "SANDBOX_AGENT_COPY_MAX_FILES": str(2 * max(copy_sizes | {50_000}))}
        for size in sizes:
            root = Path(tmp) / f"tree{size}"
            root.mkdir()
            make_tree(root, size)
            modes = ["bind"] + (["copy"] if size in copy_sizes else [])
            for mode in modes:  # warm-up: page cache, the image, .pyc files
                one_ask(root, server, mode, env)
            samples: dict[str, list[float]] = {mode: [] for mode in modes}
            for _ in range(options.runs):
                for mode in modes:
                    samples[mode].append(one_ask(root, server, mode, env))
            for mode in modes:
                got[mode, size] = statistics.median(samples[mode])
            subprocess.run(["rm", "-rf", str(root)], check=True)
    report(got, sizes, options.runs)


def report(got: dict[tuple[str, int], float], sizes: list[int], runs: int) -> None:
    """One row a size: seconds and µs a file above the smallest tree, bind and copy."""
    print(f"A whole one-call `ask`, half the files under node_modules (median of {runs}; "
          "s, and µs a file above the smallest tree)")
    print(f"{'files':>9}{'bind s':>10}{'µs/file':>10}{'copy s':>10}{'µs/file':>10}"
          f"{'copy - bind':>13}")
    first = sizes[0]
    for size in sizes:
        row = f"{size:>9,}"
        for mode in ("bind", "copy"):
            seconds = got.get((mode, size))
            if seconds is None:
                row += f"{'-':>10}{'':>10}"
                continue
            base = got.get((mode, first))
            slope = ((seconds - base) / (size - first) * 1e6
                     if base is not None and size > first else float("nan"))
            row += f"{seconds:>10.2f}{slope:>10.2f}"
        if ("copy", size) in got:
            row += f"{got['copy', size] - got['bind', size]:>12.2f}s"
        print(row)


if __name__ == "__main__":
    main()
