"""What change tracking costs a shell call, measured side by side in one run.

    python benchmarks/bench_tracking.py [--calls 30]

For a 5,000-file / 50 MB tree and a 20,000-file tree: the first `run_shell_command "true"`
(it builds the index, hashing every file) and the median of the calls after it (two stat-only
walks each), with tracking on (the toolbox as the host starts it) and with `--no-track`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from executor.config import DEFAULT_IMAGE
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.deployment import Deployment
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.engine import connect
from executor.sandbox.runtime import Runtime


class UntrackedBlueprint(Blueprint):
    """The same container with the toolbox's change tracking switched off."""

    def toolbox_argv(self) -> list[str]:
        return [*super().toolbox_argv(), "--no-track"]


class UntrackedSandbox(DockerSandbox):
    """The same sandbox, made from the `UntrackedBlueprint`."""

    def _blueprint(self, deployment: Deployment, runtime: Runtime) -> Blueprint:
        return UntrackedBlueprint(deployment, runtime, self.git)


def make_tree(root: Path, files: int, size: int) -> None:
    """`files` files of `size` bytes in 50 x 20 nested directories."""
    data = b"x" * size
    for i in range(files):
        folder = root / f"pkg{i % 50}" / f"mod{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.py").write_bytes(data)


def shell_true(box: DockerSandbox) -> float:
    """Seconds one `run_shell_command "true"` takes, host to toolbox and back."""
    start = time.perf_counter()
    result = box.call("run_shell_command", {"command": "true"})
    assert result.ok, result.output
    return time.perf_counter() - start


def measure(
    cls: type[DockerSandbox], root: Path, client: object, calls: int
) -> tuple[float, float]:
    """(first call, median of the next `calls`) in milliseconds."""
    config = SandboxConfig(root=root, session_id="bench" + uuid.uuid4().hex[:8],
                           image=DEFAULT_IMAGE)
    with cls(config, client=client) as box:
        first = shell_true(box)
        rest = [shell_true(box) for _ in range(calls)]
    return first * 1000, statistics.median(rest) * 1000


def main() -> None:
    """Both trees, tracking on and off."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    options = parser.parse_args()
    client = connect()
    print(f"run_shell_command \"true\": first call / median of {options.calls} more (ms)")
    print(f"{'tree':<24}{'tracking on':>22}{'--no-track':>22}")
    for label, files, size in (("5,000 files, 50 MB", 5000, 10_000),
                               ("20,000 files, 20 MB", 20_000, 1000)):
        with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
            root = Path(tmp)
            make_tree(root, files, size)
            on = measure(DockerSandbox, root, client, options.calls)
            off = measure(UntrackedSandbox, root, client, options.calls)
        print(f"{label:<24}{on[0]:>10.1f} /{on[1]:>8.1f}   {off[0]:>10.1f} /{off[1]:>8.1f}")


if __name__ == "__main__":
    main()
