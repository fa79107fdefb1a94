"""One writable bind session per project root: a second process fails at once, naming the
session that holds the root; the sessions of one process (a delegated child) share it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.errors import SandboxError
from executor.gitsafety.walk import TreeScan
from executor.sandbox import rootlock, runrecord
from executor.sandbox.config import SandboxConfig, default_lock_dir
from executor.sandbox.deployment import Deployment
from executor.sandbox.gc import GcResult, _finish

REPO = Path(__file__).resolve().parents[2]
_HOLDER = """
import sys
from pathlib import Path
from executor.sandbox import rootlock
rootlock.hold(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def other_process(tmp_path: Path) -> Iterator[Path]:
    """The root `tmp_path/proj`, held by session `sess-a` in another process."""
    root, locks = tmp_path / "proj", tmp_path / "locks"
    root.mkdir()
    locks.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(locks),
                               str(root), "sess-a"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    yield root
    holder.communicate("")


def free(lock_dir: Path, root: Path) -> bool:
    """Whether another process could take the root's lock now."""
    done = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from executor.sandbox import rootlock; rootlock.hold(Path(sys.argv[1]),"
                           " Path(sys.argv[2]), 'probe', wait=False)", str(lock_dir), str(root)],
                          cwd=REPO, capture_output=True, check=False)
    return done.returncode == 0


def test_a_second_process_fails_naming_the_session_that_holds_the_root(
        tmp_path: Path, other_process: Path):
    with pytest.raises(SandboxError) as caught:
        rootlock.hold(tmp_path / "locks", other_process, "sess-b", wait=False)
    assert caught.value.exit_code == 10
    assert caught.value.message == (
        f"the project {other_process} is in use by bind session sess-a in another process: "
        "two bind sessions on one project would race each other's checks of it")
    assert "--workspace copy" in (caught.value.fix or "")


def test_the_sessions_of_one_process_share_it_until_the_last_gives_it_back(tmp_path: Path):
    locks, root = tmp_path / "locks", tmp_path / "proj"
    locks.mkdir()
    root.mkdir()
    parent = rootlock.hold(locks, root, "parent")
    child = rootlock.hold(locks, root, "child")
    rootlock.release(child)
    assert not free(locks, root)
    rootlock.release(parent)
    assert free(locks, root)


def test_the_lock_file_names_only_its_holder_after_a_longer_name(tmp_path: Path):
    """The name is written, then the file cut to it: nothing of the last holder's stays."""
    locks, root = tmp_path / "locks", tmp_path / "proj"
    locks.mkdir()
    root.mkdir()
    rootlock.release(rootlock.hold(locks, root, "a-much-longer-session-name"))
    held = rootlock.hold(locks, root, "short")
    try:
        assert rootlock.lock_path(locks, root).read_bytes() == b"short"
    finally:
        rootlock.release(held)


def test_a_link_or_a_fifo_where_the_lock_goes_is_never_followed(tmp_path: Path):
    locks = tmp_path / "locks"
    locks.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    rootlock.lock_path(locks, tmp_path / "a").symlink_to(target)
    os.mkfifo(rootlock.lock_path(locks, tmp_path / "b"))
    for root in (tmp_path / "a", tmp_path / "b"):
        root.mkdir()
        with pytest.raises(SandboxError, match=r"not a lock file of ours|could not open the "
                                               r"project's lock"):
            rootlock.hold(locks, root, "s", wait=False)
    assert target.read_text() == "keep\n"


def test_another_lock_dir_or_spelling_of_the_root_is_the_same_lock(
        tmp_path: Path, other_process: Path):
    """Red-team round 21: keyed by the path in a lock dir chosen from `$XDG_RUNTIME_DIR` or
    `$HOME`, a session started from another environment, or through a link, ran beside."""
    elsewhere = tmp_path / "other-env-locks"
    elsewhere.mkdir()
    spelled = tmp_path / "link-to-proj"
    spelled.symlink_to(other_process)
    for lock_dir in (tmp_path / "locks", elsewhere):
        assert not free(lock_dir, other_process)
        assert not free(lock_dir, spelled.resolve())


@pytest.mark.parametrize(("workspace", "read_only", "takes"),
                         [("bind", False, True), ("bind", True, False), ("copy", False, False)])
def test_only_a_writable_bind_session_takes_the_roots_lock(
        tmp_path: Path, workspace: str, read_only: bool, takes: bool):
    root, locks = tmp_path / "proj", tmp_path / "locks"
    root.mkdir()
    locks.mkdir()
    config = SandboxConfig(root=root, session_id="s", lock_dir=locks, workspace=workspace,
                           read_only=read_only)
    place = Deployment(config, warn=lambda m: None)
    place.lock_root()
    try:
        assert free(locks, root) is not takes
    finally:
        place.unlock()
    assert free(locks, root)


def test_gc_leaves_a_dead_runs_checks_while_a_bind_session_holds_its_root(
        tmp_path: Path, other_process: Path, monkeypatch: pytest.MonkeyPatch):
    """They would race that session's sandbox; the next run on the root runs them."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    locks = tmp_path / "locks"
    os.rename(locks, tmp_path / "sandbox-agent-locks")  # (the dir the holder's lock is in)
    assert default_lock_dir() == tmp_path / "sandbox-agent-locks"
    (other_process / "planted" / ".git").mkdir(parents=True)
    runrecord.RunRecord(name="sandbox-agent-dead", root=str(other_process), started_ns=0,
                        tree=TreeScan()).save(default_lock_dir())
    result = GcResult(removed=[], in_use=[], skipped=[])
    _finish("sandbox-agent-dead", result)
    assert (other_process / "planted" / ".git").is_dir()
    assert result.notes == [f"the checks after sandbox-agent-dead wait for the next run: the "
                            f"project {other_process} is in use by bind session sess-a in "
                            "another process: two bind sessions on one project would race "
                            "each other's checks of it"]
    assert [r.name for r in runrecord.abandoned(default_lock_dir())] == ["sandbox-agent-dead"]


def test_a_root_inside_or_around_a_held_one_is_refused_and_a_sibling_is_not(
        tmp_path: Path, other_process: Path):
    """Red-team round 22: a session on a subdirectory of the project (or on the directory
    around it) ran beside one on the project itself."""
    (other_process / "sub").mkdir()
    (tmp_path / "sibling").mkdir()
    locks = tmp_path / "locks"
    assert not free(locks, other_process / "sub")
    assert not free(locks, tmp_path)
    assert free(locks, tmp_path / "sibling")
    with pytest.raises(SandboxError, match=r"lies inside .*, in use by a bind session"):
        rootlock.hold(locks, other_process / "sub", "sess-b", wait=False)
