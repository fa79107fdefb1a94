"""The runnable examples in examples/ and docs/ keep working (so the docs cannot rot)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]


def test_library_example_runs_read_only(workdir: Path, model_server: ModelServer):
    root = workdir / "sample"
    shutil.copytree(REPO / "examples" / "sample-project", root,
                    ignore=shutil.ignore_patterns(".sandbox-agent"))
    model_server.reply(tool_calls=[Call("read_file", {"path": "calc.py"})])
    model_server.reply("calc.py defines add and subtract.")
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "library_example.py"), "--root", str(root),
         "--host", model_server.url, "What does calc.py do?"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "-> read_file {'path': 'calc.py'} (allow)" in done.stdout
    assert "calc.py defines add and subtract." in done.stdout
    offered = {t["function"]["name"] for t in model_server.chat_requests[0].body["tools"]}
    assert offered == {"read_file", "list_files", "search_files"}  # read-only: no write tools
    result = model_server.chat_requests[1].body["messages"][-1]["content"]
    assert "def add(a, b):" in result
