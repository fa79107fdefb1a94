"""Start-up stays light: what a quick command must not import (benchmarks/bench_startup.py has
the figures)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("docker", "httpx", "tiktoken", "tree_sitter", "pydantic", "rich", "prompt_toolkit")


def loaded_by(*argv: str) -> set[str]:
    """Top-level packages in sys.modules after `sandbox-agent ARGV` ran in a fresh interpreter."""
    code = ("import sys\nfrom executor.cli import main\n"
            f"sys.argv = ['sandbox-agent', *{list(argv)!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return set(done.stderr.split())


@pytest.mark.parametrize("argv", [("--version",), ("--help",)])
def test_version_and_help_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    assert not loaded_by(*argv) & set(HEAVY)


def test_a_subcommand_imports_only_what_it_uses() -> None:
    # typer coerces a subcommand's parameters with pydantic: that one is typer's own.
    assert not loaded_by("ask", "--help") & (set(HEAVY) - {"pydantic"})
    assert not loaded_by("audit", "verify", "--help") & (set(HEAVY) - {"pydantic"})


def test_the_cli_modules_import_nothing_heavy() -> None:
    code = ("import sys, executor.cli, executor.cli.repl, executor.ui, executor.text\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not set(done.stdout.split()) & set(HEAVY)
