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
from tests.conftest import IMAGE

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


def ask(root: Path, request: str) -> subprocess.CompletedProcess[str]:
    """`sandbox-agent ask --provider embedded --yes REQUEST` in `root`, as a user runs it."""
    return subprocess.run(
        [CLI, "ask", "--provider", "embedded", "--root", str(root), "--yes", request],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )


def python_in_sandbox_image(docker_client: Any, root: Path, code: str) -> str:
    """Run `code` against the project in a throwaway container (the model wrote the files)."""
    output = docker_client.containers.run(
        IMAGE, ["python3", "-c", code], working_dir="/project", remove=True,
        volumes={str(root): {"bind": "/project", "mode": "ro"}}, network_disabled=True,
        read_only=True, environment={"PYTHONDONTWRITEBYTECODE": "1"}, cap_drop=["ALL"],
    )
    return output.decode() if isinstance(output, bytes) else str(output)


def test_read_then_edit_adds_a_function_and_keeps_the_others(
        workdir: Path, docker_client: Any) -> None:
    root = workdir / "proj"
    root.mkdir()
    (root / "geometry.py").write_text(
        '"""Rectangle helpers."""\n\n\ndef area(width, height):\n    return width * height\n'
        "\n\ndef perimeter(width, height):\n    return 2 * (width + height)\n"
    )
    done = ask(root, "Add a function volume(width, height, depth) to geometry.py that returns "
                     "width * height * depth. Keep the other functions.")
    assert done.returncode == 0, done.stderr[-3000:]
    checked = python_in_sandbox_image(docker_client, root, (
        "import geometry as g\n"
        "assert g.volume(2, 3, 4) == 24 and g.area(2, 3) == 6 and g.perimeter(2, 3) == 10\n"
        "print('ok')\n"))
    assert checked.strip() == "ok", (root / "geometry.py").read_text()


def test_find_then_modify_changes_the_right_setting_only(
        workdir: Path, docker_client: Any) -> None:
    root = workdir / "proj"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "settings.py").write_text(
        'CURRENCY = "EUR"\nMAX_ITEMS_PER_ORDER = 10\nPAGE_SIZE = 20\n')
    (root / "shop" / "orders.py").write_text(
        "from shop.settings import MAX_ITEMS_PER_ORDER\n\n\ndef accept(items):\n"
        "    return len(items) <= MAX_ITEMS_PER_ORDER\n")
    done = ask(root, "An order may have at most 10 items. Raise that limit to 25.")
    assert done.returncode == 0, done.stderr[-3000:]
    checked = python_in_sandbox_image(docker_client, root, (
        "from shop import settings, orders\n"
        "assert settings.MAX_ITEMS_PER_ORDER == 25, settings.MAX_ITEMS_PER_ORDER\n"
        "assert settings.PAGE_SIZE == 20 and settings.CURRENCY == 'EUR'\n"
        "assert orders.accept(['x'] * 25) and not orders.accept(['x'] * 26)\n"
        "print('ok')\n"))
    assert checked.strip() == "ok", (root / "shop" / "settings.py").read_text()
