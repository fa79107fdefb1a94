"""Start-up stays light: what a quick command must not import (benchmarks/bench_startup.py has
the figures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("docker", "httpx", "tiktoken", "tree_sitter", "pydantic", "rich", "prompt_toolkit")


def modules_after(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules in sys.modules after `sandbox-agent ARGV` ran in a fresh interpreter."""
    code = ("import sys\nfrom executor.cli import main\n"
            f"sys.argv = ['sandbox-agent', *{list(argv)!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('modules:', ' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env)
    return set(done.stderr.rsplit("modules:", 1)[1].split())


def loaded_by(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    """Top-level packages in sys.modules after `sandbox-agent ARGV` ran in a fresh interpreter."""
    return {m.split(".")[0] for m in modules_after(*argv, env=env)}


@pytest.mark.parametrize("argv", [("--version",), ("--help",)])
def test_version_and_help_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    assert not loaded_by(*argv) & set(HEAVY)


def test_version_does_not_even_load_typer() -> None:
    executor = {m for m in modules_after("--version") if m.startswith("executor")}
    assert executor == {"executor", "executor.cli"}
    assert "typer" not in loaded_by("--version")


def test_a_subcommand_imports_only_what_it_uses() -> None:
    assert not loaded_by("ask", "--help") & set(HEAVY)
    assert not loaded_by("audit", "verify", "--help") & set(HEAVY)
    mine = {m for m in modules_after("sessions", "--help") if m.startswith("executor.cli.")}
    assert not mine & {"executor.cli.run", "executor.cli.review", "executor.cli.system"}


def test_listing_no_sessions_reads_nothing_heavy(tmp_path: Path) -> None:
    env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": str(tmp_path / "state")}
    assert not loaded_by("sessions", "--root", str(tmp_path), env=env) & set(HEAVY)


def test_the_cli_modules_import_nothing_heavy() -> None:
    code = ("import sys, executor.cli, executor.cli.repl, executor.ui, executor.text\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not set(done.stdout.split()) & set(HEAVY)
