"""`apply` and `undo` signalled half way: no file they write goes unjournaled or unaudited.

(They hold the signal until their writes are done and recorded, then exit 130; a design that
stopped early would pass too, as long as all it wrote is on record.) Through the real console
script: a copy session's changeset of hundreds of small files (each write is fsynced: about
10 ms a file here), the command signalled once some are in the tree.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor.audit import AuditLog, read_records
from executor.workspace.changes import Change, Changeset, save_changes
from executor.workspace.manifest import Entry
from executor.workspace.store import BlobStore, ensure_session_dir, read_lines, session_dir

SANDBOX_AGENT = Path(sys.executable).parent / "sandbox-agent"
FILES = 300
NEW = b"changed\n"
TIMEOUT = 120


def entry(data: bytes) -> Entry:
    return Entry("file", 0o644, len(data), hashlib.sha256(data).hexdigest())


def old(i: int) -> bytes:
    return f"v1 {i}\n".encode()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A tree of FILES small files and a copy session `s1` that changed every one."""
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    blobs = BlobStore.for_root(root)
    blobs.put(NEW)
    changes = []
    for i in range(FILES):
        (root / "src" / f"f{i}.txt").write_bytes(old(i))
        changes.append(Change(f"src/f{i}.txt", entry(old(i)), entry(NEW)))
    save_changes(ensure_session_dir(root, "s1"), Changeset("s1", str(root), changes))
    return root


def changed(root: Path) -> set[str]:
    """The files of the tree that hold NEW (not the apply's temporaries next to them)."""
    return {f"src/f{i}.txt" for i in range(FILES)
            if (root / "src" / f"f{i}.txt").read_bytes() == NEW}


def signalled(root: Path, *args: str, until: int) -> subprocess.CompletedProcess[str]:
    """Run `sandbox-agent ARGS --root ROOT --session s1 --yes`; SIGTERM it once more than
    `until` files hold NEW (fewer for undo: counted down)."""
    run = subprocess.Popen([str(SANDBOX_AGENT), *args, "--root", str(root), "--session", "s1",
                            "--yes"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        start = len(changed(root))
        while time.monotonic() < deadline and run.poll() is None:
            if abs(len(changed(root)) - start) > until:
                break
            time.sleep(0.01)
        assert run.poll() is None, "it ended before it could be signalled: make FILES larger"
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


def journaled(root: Path, kind: str) -> set[str]:
    records = read_lines(session_dir(root, "s1") / "journal.ndjson")
    return {f["path"] for r in records if r["type"] == kind for f in r["files"]}


def audited(root: Path, kind: str) -> set[str]:
    directory = AuditLog.for_root(root, session="s1").directory
    return {f["path"] for r in read_records(directory) if r["kind"] == kind for f in r["files"]}


def test_an_apply_stopped_half_way_has_every_write_on_record_and_undo_takes_them_back(
        root: Path) -> None:
    done = signalled(root, "apply", until=10)

    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr and "Traceback" not in done.stderr
    written = changed(root)
    assert written and journaled(root, "apply") == written == audited(root, "apply")

    back = subprocess.run([str(SANDBOX_AGENT), "undo", "--root", str(root), "--session", "s1",
                           "--yes"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=TIMEOUT, check=False)

    assert back.returncode == 0, back.stderr
    assert changed(root) == set()
    assert all((root / "src" / f"f{i}.txt").read_bytes() == old(i) for i in range(FILES))


def test_an_undo_stopped_half_way_has_every_write_on_record(root: Path) -> None:
    applied = subprocess.run([str(SANDBOX_AGENT), "apply", "--root", str(root), "--session",
                              "s1", "--yes"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=TIMEOUT, check=False)
    assert applied.returncode == 0, applied.stderr
    assert len(changed(root)) == FILES

    done = signalled(root, "undo", until=10)

    assert done.returncode == 130, done.stderr
    restored = {f"src/f{i}.txt" for i in range(FILES)} - changed(root)
    assert restored and journaled(root, "undo") == restored == audited(root, "undo")
