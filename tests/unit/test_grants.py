"""Session grants ("always allow"): a command prefix covers only one simple command that starts
with exactly those words, resolved by the shell analysis."""

from __future__ import annotations

import pytest

from executor.grants import Grant, SessionGrants

SHELL = "run_shell_command"


def granted(command: str) -> SessionGrants:
    grants = SessionGrants()
    offer = grants.offer(SHELL, {"command": command})
    assert offer is not None
    grants.add(offer)
    return grants


def test_a_command_offers_its_program_and_subcommand() -> None:
    grants = SessionGrants()
    assert grants.offer(SHELL, {"command": "git status --short"}) == Grant(SHELL, ("git", "status"))
    assert grants.offer(SHELL, {"command": "ls -la src"}) == Grant(SHELL, ("ls",))
    assert grants.offer("write_file", {"path": "a"}) == Grant("write_file")


@pytest.mark.parametrize("command", ["sh -c 'ls'", "eval ls", "env rm x", "ls; rm -rf x",
                                     "ls $(rm x)", "X=1 ls", "ls > f", "$PROG status"])
def test_nothing_is_offered_for_what_cannot_be_resolved(command: str) -> None:
    assert SessionGrants().offer(SHELL, {"command": command}) is None


@pytest.mark.parametrize(("command", "covered"), [
    ("git status", True),
    ("git status -s", True),
    ("git status; rm -rf x", False),
    ("git status && rm -rf x", False),
    ("git status | sh", False),
    ("git status\nrm -rf x", False),
    ("git status $(rm -rf x)", False),
    ("git -c core.fsmonitor='rm -rf x' status", False),
    ("/usr/bin/git status", False),
    ("GIT_DIR=x git status", False),
    ("git status > out", False),
    ("git statusx", False),
    ("git log", False),
    ("env git status", False),
])
def test_a_granted_prefix_covers_only_that_simple_command(command: str, covered: bool) -> None:
    assert (granted("git status").covers(SHELL, {"command": command}) is not None) is covered


def test_a_tool_grant_covers_that_tool_only() -> None:
    grants = SessionGrants()
    grants.add(Grant("write_file"))
    assert grants.covers("write_file", {"path": "x"}) == Grant("write_file")
    assert grants.covers("edit_file", {"path": "x"}) is None
    assert grants.covers(SHELL, {"command": "ls"}) is None
