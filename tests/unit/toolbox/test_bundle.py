"""The toolbox: The toolbox as the container gets it: the host's bootstrap, the bundle, Python 3.9."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.unit.toolbox.boxes import PACKAGE, PYTHON


def _bootstrapped(root: Path, payload: bytes) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
    """The magic line, ready line and first reply of the host's bootstrap fed `payload`."""
    from executor.sandbox import boot

    proc = subprocess.Popen([PYTHON, "-u", "-c", boot.source("bootstrap"), "--root", str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    request = json.dumps({"id": 1, "tool": "read_file", "args": {"path": "README.md"}})
    out, _ = proc.communicate(b"\n" + payload + request.encode() + b"\n", timeout=30)
    magic, *lines = out.splitlines()
    ready, reply = (json.loads(line) for line in lines)
    assert proc.returncode == 0
    return magic, ready, reply


def test_runs_under_the_hosts_bootstrap(root: Path):
    """The bootstrap says its bytecode format; this one is ours, so it gets our code."""
    from importlib.util import MAGIC_NUMBER

    from executor.sandbox.bundle import toolbox_payload

    payload = toolbox_payload(MAGIC_NUMBER.hex().encode())
    magic, ready, reply = _bootstrapped(root, payload)
    assert magic == MAGIC_NUMBER.hex().encode() and payload.startswith(b"code ")
    assert ready["ready"]
    assert reply["ok"] and reply["output"] == "     1\t# demo"


def test_another_python_gets_the_source(root: Path):
    """An unknown bytecode format (or a garbled line) gets the source, which the bootstrap
    compiles; the same toolbox answers."""
    from executor.sandbox.bundle import toolbox_payload

    for said in (b"00000000", b"not hex at all"):
        payload = toolbox_payload(said)
        assert payload.startswith(b"source ")
        _, ready, reply = _bootstrapped(root, payload)
        assert ready["ready"] and reply["ok"] and reply["output"] == "     1\t# demo"


def test_the_bootstrap_runs_the_code_it_is_sent(root: Path):
    """`code`: the bundle's `toolbox.__main__` runs as the toolbox (here one that only says
    so), importing its sibling modules from the bundle, under their own names."""
    import marshal
    import zlib

    def code(text: str, name: str) -> Any:
        return compile(text, name, "exec")

    bundle = {"toolbox": (True, code("", "toolbox/__init__.py")),
              "toolbox.said": (False, code("import json\nREADY = json.dumps({'ready': "
                                           "'code'})\n", "toolbox/said.py")),
              "toolbox.__main__": (False, code(
                  "import json, sys\nfrom .said import READY\n"
                  "def main(argv):\n    print(READY)\n    print(json.dumps({'argv': sys.argv, "
                  "'name': __name__, 'file': __file__}))\n    return 0\n",
                  "toolbox/__main__.py"))}
    blob = zlib.compress(marshal.dumps(bundle))
    _, ready, reply = _bootstrapped(root, f"code {len(blob)}\n".encode() + blob)
    assert ready == {"ready": "code"}
    assert reply == {"argv": ["toolbox", "--root", str(root)], "name": "toolbox.__main__",
                     "file": "toolbox/__main__.py"}


def test_source_is_python39_syntax():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    for path in files:
        ast.parse(path.read_text(), feature_version=(3, 9))
        assert path.name == "__init__.py" or "from __future__ import annotations" in \
            path.read_text(), path

