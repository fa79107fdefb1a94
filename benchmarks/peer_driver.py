"""One peer sandbox, driven line by line from bench_peers.py (runs in the benchmark venv).

    build/bench-venv/bin/python benchmarks/peer_driver.py PEER --image IMAGE --root DIR

PEER is `mini-swe-agent` or `llm-sandbox`. It prints one JSON line when ready
({"ready": true, "version": "..."}, or {"ready": false, "error": "..."} when the peer cannot be
imported), then answers each stdin line `start` with {"ms": ..., "output": "...", "calls": []}:
the time from nothing to the first shell command's answer (`cat small.txt` in the mounted
project); `calls N` also times N more such commands in that session, one by one (ms each). The
container is then removed with `docker rm -f` outside the timed part (both peers' own clean-ups
stop the container first, which waits 10 s for a `sleep` that ignores SIGTERM).

Only this file imports the peers, so their dependencies never meet sandbox-agent's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

COMMAND = "cat small.txt"


def mini_swe_agent(image: str, root: str) -> tuple[str, Callable[[], str]]:
    """mini-swe-agent's DockerEnvironment: `docker run -d` then `docker exec` per command."""
    from minisweagent.environments.docker import DockerEnvironment

    env = DockerEnvironment(image=image, cwd="/workspace",
                            run_args=["--rm", "--network", "none", "-v", f"{root}:/workspace"])
    return str(env.container_id), lambda: str(env.execute({"command": COMMAND})["output"])


def llm_sandbox(image: str, root: str) -> tuple[str, Callable[[], str]]:
    """llm-sandbox's Docker session: the SDK's create + start, then exec per command."""
    from llm_sandbox import SandboxBackend, SandboxSession

    session: Any = SandboxSession(
        backend=SandboxBackend.DOCKER, lang="python", image=image, keep_template=True,
        skip_environment_setup=True, workdir="/workspace",
        runtime_configs={"network_mode": "none",
                         "volumes": {root: {"bind": "/workspace", "mode": "rw"}}})
    session.open()
    return (str(session.container.id),
            lambda: str(session.execute_command(COMMAND, workdir="/workspace").stdout))


PEERS = {"mini-swe-agent": (mini_swe_agent, "mini-swe-agent", "minisweagent.environments.docker"),
         "llm-sandbox": (llm_sandbox, "llm-sandbox", "llm_sandbox")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--image", required=True)
    parser.add_argument("--root", required=True)
    options = parser.parse_args()
    run, dist, module = PEERS[options.peer]
    out = os.fdopen(os.dup(1), "w")  # the protocol's; what the peers print goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        version = metadata.version(dist)
        importlib.import_module(module)  # imported before any timing
    except (ImportError, metadata.PackageNotFoundError) as exc:
        print(json.dumps({"ready": False, "error": f"cannot import {dist}: {exc!r}"}), file=out,
              flush=True)
        return 1
    print(json.dumps({"ready": True, "version": version}), file=out, flush=True)
    for line in sys.stdin:
        words = line.split()
        if words and words[0] in ("start", "calls"):
            calls = int(words[1]) if words[0] == "calls" else 0
            print(json.dumps(one(run, options.image, options.root, calls)), file=out, flush=True)
    return 0


def one(run: Any, image: str, root: str, calls: int) -> dict[str, Any]:
    """Time one start and first command (then `calls` more commands, each timed); remove it."""
    container = ""
    try:
        began = time.perf_counter()
        container, command = run(image, root)
        output = command()
        took = (time.perf_counter() - began) * 1000
        each = []
        for _ in range(calls):
            began = time.perf_counter()
            command()
            each.append((time.perf_counter() - began) * 1000)
    except Exception as exc:  # reported to the benchmark, which prints it
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if container:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
    return {"ms": took, "output": output, "calls": each}


if __name__ == "__main__":
    sys.exit(main())
