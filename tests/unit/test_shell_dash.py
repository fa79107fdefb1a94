"""The analysis against the shell that really runs the commands: /bin/sh in the sandbox image
is dash, while the parse follows bash's grammar. Whenever the analysis says it knows every
command a text runs, dash must run no program it did not find (an outside review ran
`true &>/dev/null rm -rf d8` past a deny rule for rm: bash reads one command, dash two)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from executor.shell import analyze

DASH = shutil.which("dash")
pytestmark = pytest.mark.skipif(DASH is None, reason="dash is not installed")

STUBS = ("rm", "ls", "cat", "grep", "git", "a", "b", "x", "f")
"""Programs the texts name; each is a stub that logs its name when dash runs it."""

CORPUS = [
    # what bash and dash read differently (each must be unresolved, or dash agrees)
    "true &>/dev/null rm -rf d8", "true &>>log rm -rf d8", "ls |& rm x", "$'rm' x",
    "cat <<< rm", "((rm -rf x))", "cat <(rm x)", "a=(rm x)", "ls >& rm", "ls > out rm x",
    "function f { rm x; }; f", "echo $\"x\" && rm y", "select v in a; do rm x; done </dev/null",
    "ls\r#; rm -rf d1", "ls\v#; rm x", "ls\f#; rm x", "ls\x1b#; rm x",
    # ordinary texts (resolved, and dash agrees)
    "ls 2>&1", "ls >/dev/null 2>&1", "ls && rm x", "ls | grep x", "ls; rm x",
    "if ls; then rm x; fi", "f() { rm x; }; f", "ls & rm x", "echo $(rm x)", "echo `rm x`",
    "rm${IFS}x", "cat <<EOF\n$(rm x)\nEOF", "git grep -n x -- .", "ls 2>&- >&2",
]


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("stubs")
    for name in STUBS:
        stub = folder / name
        stub.write_text(f'#!{DASH}\necho "{name}" >> "$RAN"\n')
        stub.chmod(0o755)
    return folder


def ran_under_dash(text: str, stubs: Path, work: Path) -> set[str]:
    log = work / "ran.log"
    subprocess.run([str(DASH), "-c", text], cwd=work, capture_output=True, timeout=10,
                   check=False, env={"PATH": str(stubs), "RAN": str(log), "IFS": " \t\n"})
    return set(log.read_text().split()) if log.exists() else set()


@pytest.mark.parametrize("text", CORPUS)
def test_dash_runs_nothing_the_analysis_did_not_find(text: str, stubs: Path, tmp_path: Path):
    found = analyze(text)
    ran = ran_under_dash(text, stubs, tmp_path)
    if found.resolved:
        assert ran <= {c.program for c in found.commands}, (text, ran, found.commands)


def test_the_reviews_spelling_is_unresolved_and_dash_would_have_run_rm(stubs: Path,
                                                                       tmp_path: Path):
    text = "true &>/dev/null rm -rf d8"
    assert not analyze(text).resolved
    assert "rm" in ran_under_dash(text, stubs, tmp_path)  # the oracle sees the difference


def test_the_corpus_exercises_both_sides():
    resolved = [t for t in CORPUS if analyze(t).resolved]
    assert 10 <= len(resolved) < len(CORPUS)
    assert os.path.basename(str(DASH)) == "dash"
