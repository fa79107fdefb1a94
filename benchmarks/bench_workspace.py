"""Copy-workspace figures, measured side by side in one run (ratios matter, not absolutes).

    python benchmarks/bench_workspace.py [--starts 5] [--calls 300] [--no-remote]

1. session start on a 5,000-file / 50 MB project: bind against copy, each until start()
   returns and until the first tool call has its answer (a copy's first call waits for the
   copy to be in place); the target is copy <= 1.5x bind;
2. `diff` of 1,000 changed files: collecting them from the sandbox, rendering the diff
   in-process, and `sandbox-agent diff` as a person runs it (a new process); target <= 1 s;
3. per-call cost on a remote engine (a second dockerd started here, blind to the project,
   with the image shipped by `sandbox-agent image copy`): the median read_file on it in copy
   mode against bind mode on the local engine, and each engine's API round trip (ping).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from executor.config import DEFAULT_IMAGE
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect
from executor.workspace.changes import Base, collect, save_changes
from executor.workspace.copyload import ArchiveLoader
from executor.workspace.render import diff, reader
from executor.workspace.store import BlobStore, ensure_session_dir

BIN = Path(sys.executable).parent


def make_tree(root: Path, files: int, size: int) -> None:
    """`files` text files of about `size` bytes in 50 x 20 nested directories."""
    line = b"x = 'some text to fill a line of code'\n"
    data = line * max(1, size // len(line))
    for i in range(files):
        folder = root / f"pkg{i % 50}" / f"mod{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.py").write_bytes(data)


def config(root: Path, workspace: str) -> SandboxConfig:
    return SandboxConfig(root=root, session_id="bw" + uuid.uuid4().hex[:10],
                         image=DEFAULT_IMAGE, workspace=workspace)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def one_start(root: Path, workspace: str, client: Any) -> tuple[float, float]:
    """(seconds until start() returned, until the first read_file answered)."""
    began = time.perf_counter()
    box = DockerSandbox(config(root, workspace), client=client, copy_loader=ArchiveLoader())
    try:
        box.start()
        started = time.perf_counter() - began
        assert box.call("read_file", {"path": "pkg0/mod0/f0.py"}).ok
        return started, time.perf_counter() - began
    finally:
        box.stop()


def starts(root: Path, client: Any, count: int) -> None:
    """Section 1: bind and copy starts, interleaved so both see the same machine."""
    got: dict[str, list[tuple[float, float]]] = {"bind": [], "copy": []}
    for _ in range(count):
        for workspace in ("bind", "copy"):
            got[workspace].append(one_start(root, workspace, client))
    print("1. session start, 5,000 files / 50 MB "
          f"(median of {count}; ms)")
    print(f"   {'':<8}{'start() returns':>18}{'first call answered':>22}")
    for workspace, samples in got.items():
        print(f"   {workspace:<8}{median_ms([s for s, _ in samples]):>18.0f}"
              f"{median_ms([r for _, r in samples]):>22.0f}")
    ratio = median_ms([r for _, r in got["copy"]]) / median_ms([r for _, r in got["bind"]])
    print(f"   copy / bind (first call answered): {ratio:.2f}x (target <= 1.5x)")


def diffs(client: Any, state: Path) -> None:
    """Section 2: 1,000 changed files collected, rendered, shown by the CLI."""
    with tempfile.TemporaryDirectory(prefix="bench-diff-") as tmp:
        root = Path(tmp)
        make_tree(root, 1000, 2000)
        box = DockerSandbox(config(root, "copy"), client=client, copy_loader=ArchiveLoader())
        with box:
            manifest = box.copy_manifest()
            assert manifest is not None
            edit = box.call("run_shell_command", {
                "command": "find . -name '*.py' | xargs sed -i '3s/.*/y = 2  # changed/'"})
            assert edit.ok, edit.output
            began = time.perf_counter()
            changeset = collect(box.call, root, "bench", Base(manifest, "t0"),
                                BlobStore.for_root(root))
            collected = time.perf_counter() - began
        assert len(changeset.changes) == 1000, len(changeset.changes)
        began = time.perf_counter()
        text = "".join(diff(changeset.changes, reader(BlobStore.for_root(root)), safe=True))
        rendered = time.perf_counter() - began
        save_changes(ensure_session_dir(root, "bench"), changeset)
        began = time.perf_counter()
        shown = subprocess.run([str(BIN / "sandbox-agent"), "diff", "--root", str(root)],
                               capture_output=True, text=True, check=True,
                               env={**os.environ, "SANDBOX_AGENT_STATE_DIR": str(state)})
        cli = time.perf_counter() - began
        began = time.perf_counter()
        subprocess.run([str(BIN / "sandbox-agent"), "--version"], capture_output=True,
                       check=True)
        bare = time.perf_counter() - began
    assert len(shown.stdout) > 100_000, shown.stderr
    print("2. 1,000 changed files (one line each)")
    print(f"   collect from the sandbox (listing, fetch, checks) {collected * 1000:8.0f} ms")
    print(f"   render the unified diff in-process              {rendered * 1000:8.0f} ms "
          f"({len(text):,} characters)")
    print(f"   `sandbox-agent diff` (a new process)            {cli * 1000:8.0f} ms "
          f"(target <= 1000; `sandbox-agent --version` alone: {bare * 1000:.0f} ms)")


def remote(root: Path, client: Any, calls: int) -> None:
    """Section 3: per-call cost on a second engine in copy mode against bind mode here."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.docker.second_engine import SecondEngine  # the tests' helper, as is

    hidden = Path(tempfile.mkdtemp(prefix="bench-hidden-"))
    with SecondEngine(hidden) as engine:
        shipped = subprocess.run([str(BIN / "sandbox-agent"), "image", "copy", "--to",
                                  engine.url], capture_output=True, text=True, timeout=900,
                                 env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"})
        assert shipped.returncode == 0, shipped.stderr
        there = engine.client()
        local = per_call(DockerSandbox(config(root, "bind"), client=client), calls)
        far = per_call(DockerSandbox(config(root, "copy"), client=there,
                                     copy_loader=ArchiveLoader()), calls)
        pings = [_ping(client) for _ in range(calls)], [_ping(there) for _ in range(calls)]
    os.rmdir(hidden)
    print(f"3. per-call cost (median of {calls}; ms)")
    print(f"   read_file, bind mode, local engine        {median_ms(local):7.2f}")
    print(f"   read_file, copy mode, second engine       {median_ms(far):7.2f}")
    print(f"   API round trip (ping): local {median_ms(pings[0]):.2f}, "
          f"second engine {median_ms(pings[1]):.2f}")


def per_call(box: DockerSandbox, calls: int) -> list[float]:
    with box:
        samples = []
        for _ in range(calls):
            began = time.perf_counter()
            assert box.call("read_file", {"path": "pkg0/mod0/f0.py"}).ok
            samples.append(time.perf_counter() - began)
    return samples


def _ping(client: Any) -> float:
    began = time.perf_counter()
    client.ping()
    return time.perf_counter() - began


def main() -> None:
    """All sections on one machine, in one run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--no-remote", action="store_true", help="skip section 3")
    options = parser.parse_args()
    client = connect()
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        root, state = Path(tmp) / "proj", Path(tmp) / "state"
        os.environ["SANDBOX_AGENT_STATE_DIR"] = str(state)  # never the person's own
        root.mkdir()
        make_tree(root, 5000, 10_000)
        starts(root, client, options.starts)
        diffs(client, state)
        if not options.no_remote:
            remote(root, client, options.calls)


if __name__ == "__main__":
    main()
