"""The whole product with the embedded model: `sandbox-agent ask --provider embedded` completes
a real task in a real sandbox. Slow (the model loads and thinks on the CPU); runs in the
embedded target (`make test-embedded`), which CI runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir

pytestmark = pytest.mark.embedded
CLI = str(Path(sys.executable).parent / "sandbox-agent")


def test_agent_creates_hello_py_in_the_sandbox(workdir: Path, docker_client: Any):
    root = workdir / "proj"
    root.mkdir()
    done = subprocess.run(
        [CLI, "ask", "--provider", "embedded", "--root", str(root), "--yes",
         "Create hello.py that prints hello"],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stdout.strip(), "no final answer on stdout"
    hello = root / "hello.py"
    assert hello.is_file(), done.stderr[-3000:]
    ran = subprocess.run([sys.executable, str(hello)], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and "hello" in ran.stdout.lower(), (hello.read_text(), ran)
    audit = b"".join(p.read_bytes() for p in default_audit_dir(root).glob("*.ndjson"))
    records = [json.loads(line) for line in audit.splitlines()]
    writes = [r for r in records if r["kind"] == "write" and r.get("path") == "hello.py"]
    assert writes and writes[0]["sha256_before"] is None, "the write was not audited"
    assert not docker_client.containers.list(all=True, filters={"label": f"sandbox-agent.root={root}"})
