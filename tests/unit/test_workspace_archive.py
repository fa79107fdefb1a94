"""The copy that goes into a copy workspace: what it holds, what it leaves out, its format.

The archive is streamed through the very extractor the container runs (executor/sandbox/
copy.py), here on the host into a temporary directory, and read back with tarfile.
"""

from __future__ import annotations

import hashlib
import io
import os
import select
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from executor.errors import ProjectTooLargeError
from executor.sandbox.copy import EXTRACT
from executor.workspace.archive import Archive, Limits, overlay, plan
from executor.workspace.manifest import Entry
from executor.workspace.paths import Excludes

LIMITS = Limits(max_bytes=10 << 20, max_entries=10_000)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o4755)  # set-uid on the host: never copied in
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("TOP SECRET\n")
    return root


def stream(root: Path, limits: Limits = LIMITS, **kwargs: object) -> tuple[Archive, bytes, bytes]:
    archive = Archive(root, plan(root, limits), uid=1234, gid=1234, git_uid=65534, git_gid=65534,
                      **kwargs)  # type: ignore[arg-type]
    return archive, b"".join(archive.main()), b"".join(archive.git())


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def extract(data: bytes, dest: Path) -> subprocess.CompletedProcess[bytes]:
    dest.mkdir()
    return subprocess.run([sys.executable, "-c", EXTRACT, str(dest)], input=data,
                          capture_output=True, check=True, timeout=60)


def test_links_are_copied_as_links_and_never_read_through(project: Path, tmp_path: Path):
    (project / "escape").symlink_to(tmp_path / "outside")
    (project / "secret-link").symlink_to(tmp_path / "outside" / "secret.txt")
    archive, main, _ = stream(project)
    found = members(main)
    assert found["escape"].issym() and found["escape"].linkname == str(tmp_path / "outside")
    assert found["secret-link"].issym()
    assert b"TOP SECRET" not in main and not any(n.startswith("escape/") for n in found)
    assert archive.manifest["escape"] == Entry("symlink", 0o777, target=str(tmp_path / "outside"))


def test_modes_are_plain_and_owned_by_the_sandbox_user(project: Path):
    archive, main, _ = stream(project)
    found = members(main)
    assert found["run.sh"].mode == 0o755 and found["src/app.py"].mode == 0o644
    assert found["src"].isdir() and found["src"].mode == 0o755
    assert {(m.uid, m.gid) for m in found.values()} == {(1234, 1234)}
    app = (project / "src" / "app.py").read_bytes()
    assert archive.manifest["src/app.py"] == Entry("file", 0o644, len(app),
                                                   hashlib.sha256(app).hexdigest())


def test_repositories_go_apart_owned_by_another_user_and_out_of_the_base(project: Path):
    archive, main, git = stream(project)
    assert not any(name.startswith(".git") for name in members(main))
    in_git = members(git)
    assert set(in_git) == {".git", ".git/hooks", ".git/config"}
    assert {(m.uid, m.gid) for m in in_git.values()} == {(65534, 65534)}
    assert not any(path.startswith(".git") for path in archive.manifest)


def test_special_files_state_and_excludes_are_left_out(project: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    os.mkfifo(project / "pipe")
    (project / ".sandbox-agent").mkdir()
    (project / ".sandbox-agent" / "session.ndjson").write_text("{}\n")
    (project / "state").mkdir()
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(project / "state"))
    (project / "node_modules" / "x").mkdir(parents=True)
    (project / "debug.log").write_text("log\n")
    limits = Limits(10 << 20, 10_000, Excludes(["node_modules/", "*.log"]))
    archive, main, _ = stream(project, limits)
    names = set(members(main))
    assert not names & {"pipe", ".sandbox-agent", "state", "node_modules", "debug.log"}
    assert not any(n.startswith((".sandbox-agent/", "state/", "node_modules/")) for n in names)
    assert archive.notes == ["skipped pipe: not a regular file, directory or link"]


def test_the_size_guard_names_what_is_big(project: Path):
    (project / "data").mkdir()
    (project / "data" / "blob.bin").write_bytes(b"x" * 200_000)
    with pytest.raises(ProjectTooLargeError) as caught:
        plan(project, Limits(100_000, 10_000))
    assert "data 195.3 KB" in caught.value.message and "--exclude" in str(caught.value.fix)
    with pytest.raises(ProjectTooLargeError, match="more than 3 files"):
        plan(project, Limits(10 << 20, 3))


def test_the_extractor_writes_what_the_archive_holds(project: Path, tmp_path: Path):
    long_dir = "d" * 90 + "/" + "e" * 90
    (project / long_dir).mkdir(parents=True)
    (project / long_dir / ("f" * 120)).write_text("long\n")
    (project / "far").symlink_to("t" * 150)
    (project / "empty.txt").write_bytes(b"")
    _, main, _ = stream(project)
    done = extract(main, tmp_path / "copy")
    assert done.stdout.startswith(b'{"ok": true')
    copy = tmp_path / "copy"
    assert (copy / long_dir / ("f" * 120)).read_text() == "long\n"
    assert os.readlink(copy / "far") == "t" * 150
    assert (copy / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert (copy / "empty.txt").read_bytes() == b""
    assert int((copy / "src" / "app.py").stat().st_mtime) == int(
        (project / "src" / "app.py").stat().st_mtime)


def test_the_extractor_refuses_what_the_archiver_never_writes(tmp_path: Path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    done = extract(buf.getvalue(), tmp_path / "copy")
    assert b'"ok": false' in done.stdout and b"refused entry name" in done.stdout
    assert not (tmp_path / "escaped.txt").exists()


def test_pending_changes_are_put_back_into_a_new_copy(project: Path, tmp_path: Path):
    from executor.workspace.store import BlobStore

    blobs = BlobStore(tmp_path / "blobs")
    digest = blobs.put(b"changed\n")
    found = overlay(plan(project, LIMITS), {
        "src/app.py": Entry("file", 0o644, 8, digest), "run.sh": None,
        "new/dir": Entry("dir", 0o755), "new": Entry("dir", 0o755)})
    archive = Archive(project, found, uid=1, gid=1, git_uid=2, git_gid=2, blobs=blobs.get)
    extract(b"".join(archive.main()), tmp_path / "copy")
    assert (tmp_path / "copy" / "src" / "app.py").read_bytes() == b"changed\n"
    assert not (tmp_path / "copy" / "run.sh").exists()
    assert (tmp_path / "copy" / "new" / "dir").is_dir()


def test_a_file_replaced_after_planning_is_skipped_not_read_through(project: Path,
                                                                    tmp_path: Path):
    found = plan(project, LIMITS)
    (project / "src" / "app.py").unlink()
    (project / "src" / "app.py").symlink_to(tmp_path / "outside" / "secret.txt")
    archive = Archive(project, found, uid=1, gid=1, git_uid=2, git_gid=2)
    main = b"".join(archive.main())
    assert b"TOP SECRET" not in main
    assert any(n.startswith("skipped src/app.py") for n in archive.notes), archive.notes


def test_the_extractor_answers_while_its_stdin_stays_open(project: Path, tmp_path: Path):
    """The host never closes the extractor's stdin: the end marker alone must end it."""
    _, main, _ = stream(project)
    (tmp_path / "copy").mkdir()
    run = subprocess.Popen([sys.executable, "-c", EXTRACT, str(tmp_path / "copy")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert run.stdin is not None and run.stdout is not None
    run.stdin.write(main)
    run.stdin.flush()
    try:
        assert select.select([run.stdout], [], [], 30)[0], "the extractor waits for more input"
        assert run.stdout.readline().startswith(b'{"ok": true')  # stdin still open
    finally:
        run.stdin.close()
        run.wait(timeout=30)


def test_a_copy_many_chunks_long_holds_every_file_whole(tmp_path: Path):
    root = tmp_path / "many"
    for i in range(1500):  # about 1.5 MiB of tar: the stream is cut into more than one chunk
        folder = root / f"d{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(b"%d\n" % i * (i % 300))
    (root / "big.bin").write_bytes(os.urandom(3 << 20))  # one file over a chunk, read whole
    archive = Archive(root, plan(root, LIMITS), uid=1234, gid=1234, git_uid=65534,
                      git_gid=65534)
    chunks = list(archive.main())
    assert len(chunks) > 2
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                 if m.isfile()}
    assert files["big.bin"] == (root / "big.bin").read_bytes()
    for i in range(1500):
        name = f"d{i % 7}/f{i}.txt"
        assert files[name] == (root / name).read_bytes()
        assert archive.manifest[name].sha256 == hashlib.sha256(files[name]).hexdigest()
