"""CLI commands that need no Docker print what the model and the repository chose inert."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from executor.cli import app


def test_policy_explain_shows_arguments_and_a_policy_files_text_inert(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    policy = tmp_path / "policy.toml"  # the person's, outside the project
    policy.write_text('[[rules]]\nname = "x\\u001b[2K"\nprefix = "rm"\ndecision = "deny"\n'
                      'reason = "nope\\u202eepon"\n')
    args = json.dumps({"command": "rm -rf src #\x1b[2K\x1b[1G$ ls"})
    done = CliRunner().invoke(app, ["policy", "explain", "--tool", "run_shell_command",
                                    "--args", args, "--root", str(root),
                                    "--policy", str(policy)])
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.output and "\u202e" not in done.output
    assert r"nope\u202eepon" in done.output
    shown = CliRunner().invoke(app, ["policy", "show", "--root", str(root),
                                     "--policy", str(policy)])
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.output and r"nope\u202eepon" in shown.output


def test_an_error_line_shows_its_message_inert(tmp_path: Path) -> None:
    root = tmp_path / "proj\x1b[2K\x1b[1Gok"  # a directory a repository can name so
    root.mkdir()
    done = CliRunner().invoke(app, ["sessions", "show", "nope", "--root", str(root)])
    assert done.exit_code == 4, done.output
    assert "\x1b" not in done.output
    assert r"error: no session named 'nope' in " in done.output
    assert r"proj\x1b[2K\x1b[1Gok" in done.output
