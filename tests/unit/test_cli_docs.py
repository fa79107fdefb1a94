"""The options the docs name are the options typer has, command by command, both ways.

docs/CONFIGURATION.md lists every knob's flag and the run-only flags (those of `ask`, then
those only `review`, `orchestrate` and `improve` have); docs/CLI_JSON.md and docs/REVIEW.md
name the flags they are about. A flag added without its line, or a line left for a flag that
went, fails here.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from executor.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FOREIGN = {"CLI_JSON.md": {"--output-format"},  # claude -p's, named for comparison
           "REVIEW.md": {"--reference", "--shared"}}  # git clone's, in an example
"""Flags the docs name that belong to other programs."""


@functools.cache
def options(*path: str) -> set[str]:
    """The long option names typer shows for the command at `path` (hidden ones left out)."""
    command = typer.main.get_command(app)
    for name in path:
        command = command.get_command(typer.Context(command), name)  # type: ignore[attr-defined]
    return {name for param in command.params if not getattr(param, "hidden", False)
            for name in [*param.opts, *getattr(param, "secondary_opts", [])]
            if name.startswith("--") and name != "--help"}


def _configuration() -> tuple[set[str], dict[str, set[str]]]:
    """(the flags of the knob table, the run-only flags: "" for ask's, else per command)."""
    text = (DOCS / "CONFIGURATION.md").read_text()
    table = text.split("## Every knob", 1)[1].split("\n\n", 2)[1]
    knobs = {flag for row in table.splitlines()[2:] for flag in _FLAG.findall(row.split("|")[2])}
    run_only = text.split("Run-only flags", 1)[1].split("See `sandbox-agent ask --help`", 1)[0]
    parts = re.split(r"; for `(\w+)`:", run_only)
    by_command = {"": set(_FLAG.findall(parts[0]))}
    for command, flags in zip(parts[1::2], parts[2::2], strict=True):
        by_command[command] = set(_FLAG.findall(flags))
    return knobs, by_command


KNOBS, RUN_ONLY = _configuration()
ASK = KNOBS | RUN_ONLY[""]


def test_the_configuration_doc_was_read() -> None:
    assert {"--provider", "--stream", "--no-stream", "--workspace"} <= KNOBS
    assert {"--root", "--json", "--resume"} <= RUN_ONLY[""]
    assert set(RUN_ONLY) == {"", "review", "orchestrate", "improve"}


def test_ask_has_exactly_the_documented_options() -> None:
    assert options("ask") == ASK


def test_orchestrate_has_asks_options_and_its_own() -> None:
    assert options("orchestrate") == ASK | RUN_ONLY["orchestrate"]
    assert not RUN_ONLY["orchestrate"] & options("ask")  # refused there: not in its help


@pytest.mark.parametrize("command", ["review", "improve"])
def test_review_and_improve_have_their_documented_options_and_no_other(command: str) -> None:
    own = RUN_ONLY[command]
    assert own <= options(command)
    assert options(command) - ASK - own == set()


@pytest.mark.parametrize(("doc", "commands"), [
    ("CLI_JSON.md", [("ask",)]),
    ("REVIEW.md", [("review",)]),
])
def test_the_flags_a_doc_names_exist(doc: str, commands: list[tuple[str, ...]]) -> None:
    named = set(_FLAG.findall((DOCS / doc).read_text())) - FOREIGN[doc]
    known = set().union(*(options(*c) for c in commands))
    assert named - known == set()


def test_review_doc_names_every_review_only_option() -> None:
    text = (DOCS / "REVIEW.md").read_text()
    missing = {flag for flag in options("review") - ASK if flag not in text
               and flag.replace("--", "--no-", 1) not in text}
    assert missing == set()


def _every_command() -> list[list[str]]:
    """The path of every command and subcommand the app has (groups included)."""
    paths: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        for name in command.list_commands(typer.Context(command)):
            sub = command.get_command(typer.Context(command), name)
            paths.append([*path, name])
            if hasattr(sub, "list_commands"):
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def test_help_texts_name_no_missing_argument_and_no_python_types() -> None:
    runner = CliRunner()
    every = _every_command()
    assert {("audit", "verify"), ("policy", "show"), ("ask",)} <= {tuple(p) for p in every}
    for path in every:
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}).output
        assert shown.startswith("Usage: "), path
        assert " DIR" not in shown and "<list[" not in shown, path
        assert "mounted at /workspace" not in shown, path
    approvals = runner.invoke(app, ["ask", "--help"], env={"COLUMNS": "200"}).output
    assert "v: view all of it" in approvals
