"""`--output FILE` of `audit export` and `audit report` in a tree a repository ships: a link at
that name is replaced (never written through), a FIFO there is one error line (never a hang).

Through the real console script in a subprocess with a timeout, so a hang fails the test.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from executor.state import replacing
from tests.fakes.audit_log import full_run

SANDBOX_AGENT = Path(sys.executable).parent / "sandbox-agent"
TIMEOUT = 60
"""Seconds one CLI run may take: a FIFO that blocks the open would run into it."""
VICTIM = "ssh-ed25519 AAAA person@laptop\n"

COMMANDS = {
    "export": ["audit", "export", "--format", "jsonl"],
    "report": ["audit", "report"],
}


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SANDBOX_AGENT), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, stdin=subprocess.DEVNULL, timeout=TIMEOUT, check=False)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "audit"
    full_run(directory)
    return directory


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    return root


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_at_the_output_name_is_replaced_not_followed(
        command: str, log_dir: Path, project: Path, tmp_path: Path) -> None:
    victim = tmp_path / "authorized_keys"  # outside the project, writable by the CI user
    victim.write_text(VICTIM)
    (project / "out.txt").symlink_to("../authorized_keys")  # shipped by the pull request

    done = cli(*COMMANDS[command], "--audit-dir", log_dir, "--output", "out.txt", cwd=project)

    assert done.returncode == 0, done.stderr
    assert victim.read_text() == VICTIM
    written = project / "out.txt"
    info = os.lstat(written)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    text = written.read_text()
    if command == "export":
        assert [json.loads(line)["seq"] for line in text.splitlines()][:2] == [1, 2]
    else:
        assert text.startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in project.iterdir()) == ["out.txt"]  # no temporary left


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_at_the_output_name_is_one_error_line_not_a_hang(
        command: str, log_dir: Path, project: Path) -> None:
    os.mkfifo(project / "out.txt")

    done = cli(*COMMANDS[command], "--audit-dir", log_dir, "--output", "out.txt", cwd=project)

    assert done.returncode == 50, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: cannot write out.txt: a FIFO is there, not a regular file",
        "fix: name a file to write (in a folder that exists), or leave out --output for stdout"]
    assert stat.S_ISFIFO(os.lstat(project / "out.txt").st_mode)
    assert sorted(p.name for p in project.iterdir()) == ["out.txt"]


def test_a_dash_is_stdout(log_dir: Path, project: Path) -> None:
    done = cli("audit", "export", "--format", "jsonl", "--audit-dir", log_dir, "--output", "-",
               cwd=project)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["seq"] == 1
    assert list(project.iterdir()) == []


def test_what_fails_half_way_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("old\n")

    with pytest.raises(RuntimeError), replacing(target) as out:
        out.write("half")
        raise RuntimeError("the report failed")

    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_directory_at_the_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()

    with pytest.raises(OSError, match="a directory is there"), replacing(tmp_path / "out"):
        pytest.fail("nothing is written")
