"""The sandbox wing sits below the workspace: nothing in executor/sandbox imports
executor/workspace (a copy is loaded through the `CopyLoader` the composer passes in)."""

from __future__ import annotations

import ast
from pathlib import Path

SANDBOX = Path(__file__).resolve().parents[2] / "executor" / "sandbox"


def imports(source: str, package: str) -> list[str]:
    """Every module `source` (a module of `package`) imports, relative imports made absolute,
    with each imported name as a possible submodule."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return found


def _workspace(names: list[str]) -> list[str]:
    return [n for n in names if n == "executor.workspace" or n.startswith("executor.workspace.")]


def test_the_sandbox_imports_nothing_from_the_workspace():
    files = sorted(SANDBOX.rglob("*.py"))
    assert len(files) > 20  # the walk found the package
    reaching = {}
    for path in files:
        package = ".".join(path.relative_to(SANDBOX.parents[1]).parts[:-1])
        names = _workspace(imports(path.read_text(), package))
        if names:
            reaching[str(path.relative_to(SANDBOX))] = names
    assert reaching == {}


def test_the_check_sees_every_form_of_import():
    """So that the check above can fail."""
    source = ("import executor.workspace.archive\nfrom executor.workspace import store\n"
              "from executor import workspace\nfrom ...workspace.paths import Excludes\n"
              "def later():\n    from executor.workspace.manifest import Manifest\n")
    assert _workspace(imports(source, "executor.toolbox")) == [
        "executor.workspace.archive", "executor.workspace", "executor.workspace.store",
        "executor.workspace", "executor.workspace.paths", "executor.workspace.paths.Excludes",
        "executor.workspace.manifest", "executor.workspace.manifest.Manifest"]
