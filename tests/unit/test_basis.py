"""What a run reads at its start (executor/basis.py): the files the person names are refused in
the project, and what later phases and children get is values, read from nothing again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from executor.basis import check_named_file, read_basis
from executor.config import derive_settings, load_settings
from executor.errors import ConfigError
from executor.policy import PolicyOverrides, ToolInfo
from executor.tools.base import RiskLevel
from tests.conftest import PRIVATE_ENV

SHELL = ToolInfo("run_shell_command", RiskLevel.HIGH)
DENY = '[[rules]]\ntool = "run_shell_command"\ndecision = "deny"\n'


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("SANDBOX_AGENT_") and n not in PRIVATE_ENV]:
        monkeypatch.delenv(name)


def test_derived_settings_read_neither_the_environment_nor_the_config_again(
        _private_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _private_state / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("max_turns = 7\n")
    base = load_settings({"model": "m1"})
    config.write_text("not_a_setting = 1\n")  # read again, this would be a ConfigError
    monkeypatch.setenv("SANDBOX_AGENT_MAX_TURNS", "99")
    derived = derive_settings(base, {"model": "m2"})
    assert (derived.max_turns, derived.model) == (7, "m2")
    assert derive_settings(derived, {}).max_turns == 7
    with pytest.raises(ValidationError):
        derive_settings(base, {"max_turns": "many"})


def test_a_policy_file_in_the_project_is_refused_with_its_fix(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "p.toml").write_text(DENY)
    (tmp_path / "p.toml").write_text(DENY)
    settings = load_settings({})
    with pytest.raises(ConfigError, match=r"the --policy file .*p.toml is inside the project "
                       "root") as err:
        read_basis(root, settings, policy_file=root / "p.toml")
    assert "sandbox-agent policy trust" in (err.value.fix or "")
    basis = read_basis(root, settings, policy_file=tmp_path / "p.toml")
    assert basis.policy.evaluate(SHELL, {"command": "ls"}).decision == "deny"
    with pytest.raises(ConfigError, match="--system-prompt-file") as err:
        check_named_file(root, root / "p.toml", "--system-prompt-file")
    assert "AGENTS.md" in (err.value.fix or "")


def test_a_policy_under_other_flags_keeps_its_rules_and_reads_nothing(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(DENY + '[[rules]]\ntool = "write_file"\ndecision = "ask"\n')
    basis = read_basis(root, load_settings({}), policy_file=policy)
    policy.unlink()
    child = basis.policy.with_overrides(PolicyOverrides(yes=True, read_only=True))
    assert child.evaluate(SHELL, {"command": "ls"}).decision == "deny"  # --yes never undoes it
    write = ToolInfo("write_file", RiskLevel.MEDIUM)
    assert child.evaluate(write, {}).rule == "flag --read-only"
    assert basis.policy.with_overrides(PolicyOverrides(yes=True)).evaluate(
        write, {}).approved_by == "--yes"
    assert child.source == basis.policy.source
