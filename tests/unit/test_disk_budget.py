"""The disk budget on the host side: the setting, and what the container and toolbox get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from executor.config import DEFAULT_DISK_BUDGET, Settings, parse_size
from executor.errors import ConfigError
from executor.runner import Runner
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.hardening import container_options


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SANDBOX_AGENT_* of the machine running the tests."""
    import os

    for name in [n for n in os.environ if n.startswith("SANDBOX_AGENT_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(("text", "size"), [
    ("1g", 1 << 30), ("500m", 500 << 20), ("64K", 64 << 10), ("1048576", 1 << 20),
    ("2 GiB", 2 << 30), ("3gb", 3 << 30), (" 7b ", 7), ("0", 0),
])
def test_sizes_are_bytes_or_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "1.5g", "-1", "g", "1q", "1ib", "ten"])
def test_anything_else_is_not_a_size(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_the_budget_defaults_to_one_gib_and_reads_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().disk_budget == DEFAULT_DISK_BUDGET == 1 << 30
    monkeypatch.setenv("SANDBOX_AGENT_DISK_BUDGET", "500m")
    assert Settings().disk_budget == 500 << 20
    assert Settings(disk_budget="0").disk_budget == 0


def test_a_bad_budget_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"disk_budget.*not a size: 'lots'"):
        Runner.build(tmp_path, provider="ollama", model="m", disk_budget="lots")
    with pytest.raises(ConfigError, match="disk_budget"):
        Runner.build(tmp_path, provider="ollama", model="m", disk_budget=-1)


def test_the_runner_hands_the_budget_to_the_sandbox(tmp_path: Path) -> None:
    runner = Runner.build(tmp_path, provider="ollama", model="m", disk_budget="50m")
    assert runner._sandbox_config("s1", "").disk_budget == 50 << 20


def argv(**overrides: Any) -> list[str]:
    config = SandboxConfig(root=Path("/p"), session_id="s1", **overrides)
    return DockerSandbox(config).blueprint.toolbox_argv()


def test_the_toolbox_gets_the_budget_and_the_git_guard() -> None:
    default = argv()
    assert default[default.index("--disk-budget") + 1] == str(1 << 30)
    assert "--git-guard" in default and "--readonly-dir" in default
    off = argv(disk_budget=0, allow_git_writes=True)
    assert off[off.index("--disk-budget") + 1] == "0"
    assert "--git-guard" not in off and "--readonly-dir" not in off


def fsize(tmp_path: Path, **overrides: Any) -> list[tuple[str, int, int]]:
    config = SandboxConfig(root=tmp_path, session_id="s1", **overrides)
    options = container_options(config, tmp_path / "lock", "1000:1000")
    return [(u["Name"], u["Soft"], u["Hard"]) for u in options["ulimits"] if u["Name"] == "fsize"]


def test_one_file_cannot_outgrow_the_budget_between_two_polls(tmp_path: Path) -> None:
    assert fsize(tmp_path, disk_budget=50 << 20) == [("fsize", 50 << 20, 50 << 20)]
    assert fsize(tmp_path, disk_budget=0) == []
    assert fsize(tmp_path, disk_budget=50 << 20, read_only=True) == []
