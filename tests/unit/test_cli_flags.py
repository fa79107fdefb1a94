"""RunFlags: the run flags declared once, each command offering its own share of them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from executor.cli import app
from executor.cli.flags import DELEGATION, IMPROVE, REVIEW, RunFlags, run_flags


def _toy(seen: list[tuple[int, RunFlags]]) -> typer.Typer:
    """A command offering --root, --model and --trace, with one option of its own."""
    toy = typer.Typer()

    @toy.command()
    @run_flags(("root", "model", "trace"))
    def run(count: Annotated[int, typer.Option("--count")] = 1, *, flags: RunFlags) -> None:
        seen.append((count, flags))

    return toy


def test_the_offered_flags_arrive_as_one_group(tmp_path: Path) -> None:
    seen: list[tuple[int, RunFlags]] = []
    done = CliRunner().invoke(_toy(seen), ["--count", "2", "--model", "m", "--trace",
                                           "--root", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert seen == [(2, RunFlags(root=tmp_path.resolve(), model="m", trace=True))]


def test_a_flag_not_offered_is_unknown_and_keeps_its_default(tmp_path: Path) -> None:
    seen: list[tuple[int, RunFlags]] = []
    done = CliRunner().invoke(_toy(seen), ["--yes"])
    assert done.exit_code == 2 and "No such option: --yes" in done.output
    shown = CliRunner().invoke(_toy(seen), ["--help"], env={"COLUMNS": "200"}).output
    assert "--root" in shown and "--count" in shown and "--read-only" not in shown
    assert shown.index("--root") < shown.index("--count") < shown.index("--model")


def test_nothing_given_asks_for_nothing(tmp_path: Path) -> None:
    options = RunFlags(root=tmp_path).options()
    assert options == {"read_only": False, "yes": False, "auto_edit": False, "resume": False,
                       "context_summarize": False, "audit_required": False,
                       "audit_prompts": False, "project_instructions": True,
                       "orchestrator": False, "confirm_delegation": True}


def test_given_flags_become_their_settings(tmp_path: Path) -> None:
    flags = RunFlags(root=tmp_path, model="m", deny_tool=["shell"], continue_=True,
                     allow_git_writes=True, exclude=[], max_delegations=1)
    options = flags.options(orchestrator=True)
    assert options["model"] == "m" and options["deny_tools"] == ["shell"]
    assert options["resume"] is True and options["allow_git_writes"] is True
    assert options["max_delegations"] == 1 and "copy_exclude" not in options


def test_delegation_flags_on_ask_are_one_usage_error(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["ask", "--root", str(tmp_path), "--max-delegations", "1",
                                    "hi"])
    assert done.exit_code == 2 and "are for orchestrate" in done.output


def test_review_and_improve_offer_no_delegation_and_no_ask_only_flag() -> None:
    assert not set(DELEGATION) & (set(REVIEW) | set(IMPROVE))
    for command in ("review", "improve"):
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        for flag in ("--max-delegations", "--no-confirm-delegation", "--interactive",
                     "--json-stream", "--apply", "--allow-git-writes"):
            assert flag not in shown, (command, flag)


def test_every_setting_a_run_flag_sets_is_named_by_its_flag_in_errors(tmp_path: Path) -> None:
    from executor.config import FLAGS, Settings, load_settings
    from executor.errors import ConfigError

    values = {"model": "m", "host": "h", "image": "i", "runtime": "r", "workspace": "copy",
              "copy_limit": "1g", "disk_budget": "1g", "think": "on", "provider": "ollama",
              "tool_protocol": "json", "timeout": 1.0, "max_retries": 1, "max_tokens": 512,
              "max_turns": 1, "stream": True, "env": ["X"]}
    options = RunFlags(root=tmp_path, **values).options(orchestrator=True)  # type: ignore[arg-type]
    assert sorted(k for k in options if k in Settings.model_fields and k not in FLAGS) == []
    with pytest.raises(ConfigError, match=r"invalid value for copy_limit \(--copy-limit\)"):
        load_settings({"copy_limit": "-1"})
