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


@pytest.mark.parametrize(("granted_command", "later"), [
    # the outside review's: `git grep TODO` granted, then a pager that is a shell command
    ("git grep TODO", "git grep --open-files-in-pager='rm -rf src; echo' TODO"),
    ("git grep TODO", "git grep --open='rm -rf src; echo' TODO"),  # an abbreviation
    ("git grep TODO", "git grep -O'rm -rf src; echo' TODO"),
    ("git grep TODO", "git grep -nO'rm -rf src; echo' TODO"),  # in a cluster
    ("git log", "git log --output=src/app.py"),
    ("git fetch origin", "git fetch --upload-pack='rm -rf src' origin"),
    ("rg TODO", "rg --pre 'rm -rf src' TODO"),
    ("tar -tf a.tar", "tar -xf a.tar --to-command='rm -rf src'"),
    ("tar -tf a.tar", "tar -xf a.tar --use-compress='rm -rf src'"),
    ("sort a.txt", "sort --compress-program=./evil a.txt"),
    ("make test", "make test --eval='x:;rm -rf src'"),
    ("find . -name x", "find . -name x -exec rm {} +"),
    ("less a.txt", "less +'!rm -rf src' a.txt"),
    # programs whose arguments are code: the exact argv only
    ("sed -n 1p a.txt", "sed 'e rm -rf src' a.txt"),
    ("awk '{print}' a.txt", "awk 'BEGIN{system(\"rm -rf src\")}'"),
    ("python3 app.py", "python3 -c 'import shutil; shutil.rmtree(\"src\")'"),
    ("python3 -m pytest", "python3 -m pip install ./evil"),
    ("node app.js", "node -e 'require(\"fs\").rmSync(\"src\", {recursive: true})'"),
    ("perl tool.pl", "perl -e 'system(\"rm -rf src\")'"),
    # the third review: git subcommands that run what they are given
    ("git submodule status", "git submodule foreach 'rm -rf ../src; true'"),
    ("git config --get user.name", "git config --global core.fsmonitor 'rm -rf src; false'"),
    ("git bisect log", "git bisect run sh -c 'rm -rf src'"),
    ("git clone a b", "git clone -u 'rm -rf src' a b"),
])
def test_a_grant_never_covers_a_command_hidden_in_arguments(granted_command: str,
                                                            later: str) -> None:
    grants = SessionGrants()
    offer = grants.offer(SHELL, {"command": granted_command})
    assert offer is not None, granted_command
    grants.add(offer)
    assert grants.covers(SHELL, {"command": later}) is None


@pytest.mark.parametrize(("granted_command", "later"), [
    ("git grep TODO", "git grep -n FIXME -- src"),
    ("python3 -m pytest", "python3 -m pytest tests/test_app.py -q"),
    ("sed -n 1p a.txt", "sed -n 1p a.txt"),
    ("ls", "ls -la src"),
    ("make test", "make test V=1"),
])
def test_a_grant_still_covers_what_it_names(granted_command: str, later: str) -> None:
    assert granted(granted_command).covers(SHELL, {"command": later}) is not None


def test_nothing_is_offered_for_a_command_that_runs_another() -> None:
    assert SessionGrants().offer(SHELL, {"command": "git grep -O'rm -rf src' x"}) is None
