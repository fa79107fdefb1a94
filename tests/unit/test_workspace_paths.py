"""Which paths a changeset may hold, and gitignore-style excludes of a copy."""

from __future__ import annotations

import pytest

from executor.workspace.paths import Excludes, problem


@pytest.mark.parametrize("path", ["a.py", "src/app.py", "a/b/c.txt", ".github/workflows/ci.yml",
                                  ".gitignore", "dir with space/x", "caf\u00e9.txt"])
def test_plain_relative_paths_pass(path: str):
    assert problem(path) is None


@pytest.mark.parametrize(("path", "why"), [
    ("", "not a path"), (None, "not a path"), ("/etc/passwd", "absolute"),
    ("../outside", "plain relative"), ("a/../../b", "plain relative"), ("a//b", "plain"),
    ("./a", "plain"), ("a/", "plain"), ("a\0b", "NUL"), (".git/hooks/pre-commit", "git"),
    ("sub/.git/config", "git"), ("sub/.GIT/config", "git"), ("x/.Git", "git"),
    ("sub/.git.quarantined-1234abcd/hooks/x", "git"), (".sandbox-agent/policy.toml", "reserved"),
    ("a" * 300, "too long"), ("/".join(["d"] * 3000), "too long"),
])
def test_hostile_paths_are_refused_with_a_reason(path: object, why: str):
    reason = problem(path)
    assert reason is not None and why in reason, reason


def test_gitignore_style_excludes():
    rules = Excludes(["# a comment", "node_modules/", "*.log", "!keep.log", "/build",
                      "docs/**/*.tmp", "**/cache", "secret?.txt", "[Tt]emp/"])
    cases = {
        ("node_modules", True): True, ("pkg/node_modules", True): True,
        ("node_modules", False): False,  # a file of that name: the pattern ends in '/'
        ("a.log", False): True, ("deep/x/a.log", False): True, ("keep.log", False): False,
        ("build", True): True, ("src/build", True): False,
        ("docs/a/b/c.tmp", False): True, ("docs/c.tmp", False): True, ("c.tmp", False): False,
        ("x/y/cache", True): True, ("secret1.txt", False): True, ("secret12.txt", False): False,
        ("Temp", True): True, ("temp", True): True, ("src/app.py", False): False,
    }
    for (path, is_dir), expected in cases.items():
        assert rules.excluded(path, is_dir) is expected, (path, is_dir)
    assert not Excludes() and not Excludes(["", "  ", "# only a comment"])
