"""apply and undo on a real tree: per file, conflicts refused, journaled and audited."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest

from executor.audit import AuditLog, read_records, verify
from executor.workspace import apply as apply_module
from executor.workspace.apply import (
    Outcome,
    applied_paths,
    apply_changes,
    execute,
    pending,
    plan_undo,
    undo,
    undo_content,
)
from executor.workspace.changes import Change, Changeset
from executor.workspace.manifest import Entry
from executor.workspace.store import BlobStore, append_line, ensure_session_dir, read_lines


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file(data: bytes, mode: int = 0o644) -> Entry:
    return Entry("file", mode, len(data), sha(data))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_bytes(b"v1\n")
    (root / "old.txt").write_bytes(b"old\n")
    (root / "gone").mkdir()
    (root / "gone" / "x").write_bytes(b"x\n")
    return root


@pytest.fixture
def changeset(root: Path) -> Changeset:
    blobs = BlobStore.for_root(root)
    for data in (b"v2\n", b"new\n", b"#!/bin/sh\n", b"v1\n", b"old\n", b"x\n"):
        blobs.put(data)
    return Changeset("s1", str(root), [
        Change("src/app.py", file(b"v1\n"), file(b"v2\n")),
        Change("new/deep/n.txt", None, file(b"new\n")),
        Change("new", None, Entry("dir")), Change("new/deep", None, Entry("dir")),
        Change("run.sh", None, file(b"#!/bin/sh\n", 0o755)),
        Change("link", None, Entry("symlink", 0o777, target="src/app.py")),
        Change("old.txt", file(b"old\n"), None),
        Change("gone/x", file(b"x\n"), None), Change("gone", Entry("dir"), None),
    ])


def audit_log(root: Path) -> AuditLog:
    return AuditLog.for_root(root, session="s1")


def test_apply_writes_every_change_and_records_it(root: Path, changeset: Changeset):
    outcome = apply_changes(root, changeset, approved_by="--yes", audit=audit_log(root))
    assert not outcome.conflicts and len(outcome.done) == 9
    assert (root / "src" / "app.py").read_bytes() == b"v2\n"
    assert (root / "new" / "deep" / "n.txt").read_bytes() == b"new\n"
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (root / "link").readlink() == Path("src/app.py")
    assert not (root / "old.txt").exists() and not (root / "gone").exists()
    assert pending(root, changeset) == []
    [record] = [r for r in read_records(audit_log(root).directory) if r["kind"] == "apply"]
    assert record["approved_by"] == "--yes" and record["session"] == "s1"
    files = {f["path"]: f for f in record["files"]}
    assert files["src/app.py"]["sha256_before"] == sha(b"v1\n")
    assert files["src/app.py"]["sha256_after"] == sha(b"v2\n")
    assert files["run.sh"]["mode_after"] == "0755"
    assert verify(audit_log(root).directory).ok


def test_applying_twice_is_a_no_op(root: Path, changeset: Changeset):
    apply_changes(root, changeset, approved_by="user")
    again = apply_changes(root, changeset, approved_by="user")
    assert again.done == [] and again.conflicts == []


def test_a_file_changed_on_the_host_is_refused_and_the_rest_applied(root: Path,
                                                                    changeset: Changeset):
    (root / "src" / "app.py").write_bytes(b"edited by the person\n")
    (root / "run.sh").write_bytes(b"mine\n")
    outcome = apply_changes(root, changeset, approved_by="user")
    assert dict(outcome.conflicts) == {
        "src/app.py": "conflict: changed on the host since the copy",
        "run.sh": "conflict: created on the host since the copy"}
    assert (root / "src" / "app.py").read_bytes() == b"edited by the person\n"
    assert (root / "run.sh").read_bytes() == b"mine\n"
    assert (root / "new" / "deep" / "n.txt").exists()
    assert {c.path for c in pending(root, changeset)} == {"src/app.py", "run.sh"}
    (root / "src" / "app.py").write_bytes(b"v1\n")  # put back as it was: it goes through now
    (root / "run.sh").unlink()
    assert not apply_changes(root, changeset, approved_by="user").conflicts
    assert (root / "src" / "app.py").read_bytes() == b"v2\n"


def test_a_link_planted_on_the_way_is_a_conflict_not_a_write(root: Path, tmp_path: Path,
                                                              changeset: Changeset):
    (tmp_path / "outside").mkdir()
    (root / "new").symlink_to(tmp_path / "outside")
    outcome = apply_changes(root, changeset, approved_by="user")
    assert {p for p, _ in outcome.conflicts} >= {"new", "new/deep", "new/deep/n.txt"}
    assert list((tmp_path / "outside").iterdir()) == []


def test_git_paths_are_refused_even_from_a_forged_changeset(root: Path):
    blobs = BlobStore.for_root(root)
    hook = blobs.put(b"#!/bin/sh\ncurl evil\n")
    outcome = execute(root, [Change(".git/hooks/post-checkout", None,
                                    Entry("file", 0o755, 20, hook)),
                             Change("sub/.GIT/config", None, Entry("file", 0o644, 20, hook))],
                      blobs)
    assert [p for p, _ in outcome.conflicts] == [".git/hooks/post-checkout", "sub/.GIT/config"]
    assert not (root / ".git").exists() and not (root / "sub").exists()


def test_undo_takes_an_apply_back_and_refuses_files_changed_since(root: Path,
                                                                  changeset: Changeset):
    apply_changes(root, changeset, approved_by="user")
    (root / "new" / "deep" / "n.txt").write_bytes(b"the person kept working\n")
    plan = plan_undo(root, "s1")
    assert plan is not None and plan.cannot == []
    outcome = undo(root, plan)
    assert [p for p, _ in outcome.conflicts][:1] == ["new/deep/n.txt"]
    assert (root / "src" / "app.py").read_bytes() == b"v1\n"
    assert (root / "old.txt").read_bytes() == b"old\n" and (root / "gone" / "x").exists()
    assert not (root / "run.sh").exists() and not (root / "link").is_symlink()
    assert (root / "new" / "deep" / "n.txt").read_bytes() == b"the person kept working\n"
    assert set(applied_paths(root, changeset)) == {"new/deep/n.txt", "new", "new/deep"}


def test_bind_writes_are_undone_as_far_as_their_content_was_kept(root: Path):
    journal = ensure_session_dir(root, "b1") / "journal.ndjson"
    blobs = BlobStore.for_root(root)
    blobs.put(b"v1\n")
    (root / "src" / "app.py").write_bytes(b"v3\n")
    (root / "made.txt").write_bytes(b"made\n")
    (root / "old.txt").unlink()
    for record in [
        {"path": "src/app.py", "source": "tool", "before": file(b"v1\n").row(),
         "after": file(b"v2\n").row()},
        {"path": "src/app.py", "source": "tool", "before": file(b"v2\n").row(),
         "after": file(b"v3\n").row()},
        {"path": "made.txt", "source": "command", "before": None, "after": file(b"made\n").row()},
        {"path": "old.txt", "source": "command", "before": file(b"old\n").row(), "after": None},
    ]:
        append_line(journal, {"type": "write", **record})
    plan = plan_undo(root, "b1")
    assert plan is not None
    assert [p for p, _ in plan.cannot] == ["old.txt"]
    assert "changed by a shell command" in plan.cannot[0][1]
    outcome = undo(root, plan)
    assert not outcome.conflicts
    assert (root / "src" / "app.py").read_bytes() == b"v1\n" and not (root / "made.txt").exists()
    assert plan_undo(root, "b1") is not None  # old.txt is still there to name, never restored


def test_a_path_written_again_after_an_undo_can_be_undone_again(root: Path):
    journal = ensure_session_dir(root, "b2") / "journal.ndjson"
    blobs = BlobStore.for_root(root)
    blobs.put(b"v1\n")
    blobs.put(b"v2\n")
    (root / "src" / "app.py").write_bytes(b"v2\n")
    write = {"type": "write", "path": "src/app.py", "source": "tool",
             "before": file(b"v1\n").row(), "after": file(b"v2\n").row()}
    append_line(journal, write)
    plan = plan_undo(root, "b2")
    assert plan is not None
    undo(root, plan)
    assert plan_undo(root, "b2") is None
    (root / "src" / "app.py").write_bytes(b"v2\n")  # a resumed session writes it again
    append_line(journal, write)
    again = plan_undo(root, "b2")
    assert again is not None and [c.path for c in again.changes] == ["src/app.py"]


@pytest.mark.parametrize("shape", ["plain", "head-link", "linked-parts", "commondir"])
def test_apply_never_leaves_a_directory_git_takes_for_a_repository(root: Path, shape: str):
    blobs = BlobStore.for_root(root)
    head, config = b"ref: refs/heads/main\n", b"[core]\n\tfsmonitor = ./pwn.sh\n"
    for data in (head, config, b"..\n"):
        blobs.put(data)
    parts = {
        "plain": [Change("src/objects", None, Entry("dir")),
                  Change("src/refs", None, Entry("dir")),
                  Change("src/HEAD", None, file(head))],
        "head-link": [Change("src/objects", None, Entry("dir")),
                      Change("src/refs", None, Entry("dir")),
                      Change("src/HEAD", None, Entry("symlink", 0o777,
                                                     target="refs/heads/main"))],
        "linked-parts": [Change("src/objects", None, Entry("symlink", 0o777, target=".")),
                         Change("src/refs", None, Entry("symlink", 0o777, target=".")),
                         Change("src/HEAD", None, file(head))],
        "commondir": [Change("src/commondir", None, file(b"..\n")),
                      Change("src/HEAD", None, file(head))],
    }[shape]
    changes = [*parts, Change("src/config", None, file(config))]
    outcome = execute(root, changes, blobs)
    refused = {path for path, why in outcome.conflicts if "look like a git repository" in why}
    assert refused == {c.path for c in changes}
    assert not (root / "src" / "config").exists() and not os.path.lexists(root / "src" / "HEAD")


def test_apply_does_not_complete_a_look_alike_the_host_half_has(root: Path):
    (root / "src" / "objects").mkdir()
    (root / "src" / "refs").mkdir()
    blobs = BlobStore.for_root(root)
    blobs.put(b"ref: refs/heads/main\n")
    outcome = execute(root, [Change("src/HEAD", None, file(b"ref: refs/heads/main\n"))], blobs)
    assert [p for p, _ in outcome.conflicts] == ["src/HEAD"] and not outcome.done
    plain = execute(root, [Change("src/config", None, file(b"ref: refs/heads/main\n"))], blobs)
    assert [c.path for c in plain.done] == ["src/config"]  # a config alone is just a file


def test_undo_leaves_a_path_changed_between_two_recorded_writes(root: Path):
    """The chain v1 -> v2, (someone else: v2 -> v2b), v2b -> v3 has a gap: going back to v1
    would silently undo the outside change too, so the path is a conflict."""
    journal = ensure_session_dir(root, "b3") / "journal.ndjson"
    blobs = BlobStore.for_root(root)
    blobs.put(b"v1\n")
    (root / "src" / "app.py").write_bytes(b"v3\n")
    (root / "made.txt").write_bytes(b"made\n")
    for record in [
        {"path": "src/app.py", "before": file(b"v1\n").row(), "after": file(b"v2\n").row()},
        {"path": "src/app.py", "before": file(b"v2b\n").row(), "after": file(b"v3\n").row(),
         "ts": "T2"},
        {"path": "made.txt", "before": None, "after": file(b"made\n").row()},
    ]:
        append_line(journal, {"type": "write", "source": "tool", **record})
    plan = plan_undo(root, "b3")
    assert plan is not None and [c.path for c in plan.changes] == ["made.txt"]
    outcome = undo(root, plan)
    assert outcome.conflicts == [("src/app.py", "conflict: changed outside the session between "
                                  "two of its writes (before the write at T2); left as it is, "
                                  "so that change is kept")]
    assert (root / "src" / "app.py").read_bytes() == b"v3\n" and not (root / "made.txt").exists()


def test_apply_keeps_permission_bits_and_undo_puts_them_back(root: Path):
    blobs = BlobStore.for_root(root)
    blobs.put(b"v2\n")
    (root / "src" / "app.py").chmod(0o600)
    (root / "old.txt").chmod(0o4640)
    changeset = Changeset("s2", str(root), [
        Change("src/app.py", file(b"v1\n"), file(b"v2\n", 0o755)),
        Change("old.txt", file(b"old\n"), None)])
    apply_changes(root, changeset, approved_by="--yes")
    assert (root / "src" / "app.py").stat().st_mode & 0o7777 == 0o700
    plan = plan_undo(root, "s2")
    assert plan is not None
    undo(root, plan)
    assert (root / "src" / "app.py").stat().st_mode & 0o7777 == 0o600
    assert (root / "old.txt").stat().st_mode & 0o7777 == 0o640  # never a set-id bit


def test_nothing_is_written_into_our_config_or_state_dir(root: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG_DIR", str(root / "cfg" / "sandbox-agent"))
    blobs = BlobStore.for_root(root)
    data = blobs.put(b"[[rules]]\n")
    policy = Entry("file", 0o644, 10, data)
    outcome = execute(root, [
        Change("cfg/sandbox-agent/policy.toml", None, policy),
        Change("other", None, Entry("symlink", target="docs")),
        Change("cfg", None, Entry("symlink", target="docs")),
        Change("docs/sandbox-agent/policy.toml", None, policy),
        Change("docs", None, Entry("dir")), Change("docs/sandbox-agent", None, Entry("dir")),
    ], blobs)
    assert sorted(outcome.touched) == ["docs", "other"]
    assert sorted(p for p, _ in outcome.conflicts) == [
        "cfg", "cfg/sandbox-agent/policy.toml", "docs/sandbox-agent",
        "docs/sandbox-agent/policy.toml"]
    assert "a link on the way to your sandbox-agent config dir" in dict(outcome.conflicts)["cfg"]


def test_a_private_file_replaced_by_a_link_comes_back_private(root: Path):
    (root / "old.txt").chmod(0o600)
    changeset = Changeset("s3", str(root), [
        Change("old.txt", file(b"old\n"), Entry("symlink", target="/etc/passwd"))])
    apply_changes(root, changeset, approved_by="--yes")
    assert (root / "old.txt").is_symlink()
    plan = plan_undo(root, "s3")
    assert plan is not None
    undo(root, plan)
    assert (root / "old.txt").read_bytes() == b"old\n"
    assert (root / "old.txt").stat().st_mode & 0o7777 == 0o600


# -- undo never destroys the last copy ---------------------------------------------------------

THESIS = b"\\documentclass{article}\n\\begin{document}the only copy\\end{document}\n"


def moved(root: Path, session: str = "mv") -> Path:
    """A bind session's `mv thesis.tex build/cache.o`, as the toolbox records it: one path
    deleted, one created, the same hash; the content itself was never kept."""
    (root / "build").mkdir()
    (root / "build" / "cache.o").write_bytes(THESIS)
    journal = ensure_session_dir(root, session) / "journal.ndjson"
    for record in [
        {"path": "build/cache.o", "before": None, "after": file(THESIS).row()},
        {"path": "thesis.tex", "before": file(THESIS).row(), "after": None,
         "bits_before": "0640"},
    ]:
        append_line(journal, {"type": "write", "source": "command", **record})
    return journal


def test_a_moved_file_is_put_back_from_the_file_that_holds_its_content(root: Path):
    moved(root)
    blobs = BlobStore.for_root(root)
    plan = plan_undo(root, "mv")
    assert plan is not None and plan.cannot == []
    assert plan.sources == {sha(THESIS): ["build/cache.o"]}
    assert sorted(c.path for c in plan.changes) == ["build/cache.o", "thesis.tex"]
    assert not blobs.has(sha(THESIS))

    outcome = undo(root, plan)

    assert outcome is not None and not outcome.conflicts and not outcome.cannot
    assert (root / "thesis.tex").read_bytes() == THESIS
    assert (root / "thesis.tex").stat().st_mode & 0o777 == 0o640
    assert not (root / "build" / "cache.o").exists()
    assert blobs.get(sha(THESIS)) == THESIS
    assert plan_undo(root, "mv") is None


def test_undo_asks_before_it_keeps_or_writes_anything_and_no_changes_nothing(root: Path):
    journal = moved(root)
    plan = plan_undo(root, "mv")
    assert plan is not None
    seen = []

    def decline(preview: Outcome) -> bool:
        seen.append(preview)
        return False

    assert undo(root, plan, confirm=decline) is None

    [preview] = seen
    assert [(c.path, c.status) for c in preview.ready] == [("build/cache.o", "D"),
                                                           ("thesis.tex", "A")]
    assert preview.cannot == [] and preview.conflicts == [] and preview.done == []
    assert undo_content(root, plan, preview)(sha(THESIS)) == THESIS  # shown from the host
    assert (root / "build" / "cache.o").read_bytes() == THESIS
    assert not (root / "thesis.tex").exists()
    assert not BlobStore.for_root(root).has(sha(THESIS))
    assert [r["type"] for r in read_lines(journal)] == ["write", "write"]


def test_what_undo_removes_is_kept_first_even_when_nothing_needs_it(root: Path):
    journal = ensure_session_dir(root, "mk") / "journal.ndjson"
    (root / "made.txt").write_bytes(b"the model's notes\n")
    append_line(journal, {"type": "write", "source": "command", "path": "made.txt",
                          "before": None, "after": file(b"the model's notes\n").row()})
    plan = plan_undo(root, "mk")
    assert plan is not None and plan.sources == {}

    outcome = undo(root, plan)

    assert outcome is not None and [c.path for c in outcome.done] == ["made.txt"]
    assert not (root / "made.txt").exists()
    assert BlobStore.for_root(root).get(sha(b"the model's notes\n")) == b"the model's notes\n"


def test_content_no_file_holds_any_more_cannot_be_restored_and_is_named(root: Path):
    """`mv thesis.tex build/cache.o; echo x >> build/cache.o`: nothing holds the thesis now.
    The rest is undone, and what undo removes is kept."""
    journal = moved(root)
    changed = THESIS + b"x\n"
    (root / "build" / "cache.o").write_bytes(changed)
    append_line(journal, {"type": "write", "source": "command", "path": "build/cache.o",
                          "before": file(THESIS).row(), "after": file(changed).row()})
    plan = plan_undo(root, "mv")
    assert plan is not None and [p for p, _ in plan.cannot] == ["thesis.tex"]
    assert "its earlier content (sha256 " in plan.cannot[0][1]

    outcome = undo(root, plan)

    assert outcome is not None and [p for p, _ in outcome.cannot] == ["thesis.tex"]
    assert not (root / "build" / "cache.o").exists()
    assert BlobStore.for_root(root).get(sha(changed)) == changed
    undone = [r for r in read_lines(journal) if r["type"] == "undo"]
    assert [c["path"] for c in undone[0]["cannot"]] == ["thesis.tex"]


def test_a_file_too_big_to_keep_is_left_where_it_is(root: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    moved(root)
    monkeypatch.setattr(apply_module, "MAX_KEEP", 16)
    plan = plan_undo(root, "mv")
    assert plan is not None

    outcome = undo(root, plan)

    assert outcome is not None and not outcome.done
    reasons = dict(outcome.cannot)
    assert "could not be kept first" in reasons["build/cache.o"], reasons
    assert "is not kept anywhere" in reasons["thesis.tex"], reasons
    assert (root / "build" / "cache.o").read_bytes() == THESIS


def test_a_link_planted_where_the_content_is_is_never_followed(root: Path, tmp_path: Path):
    moved(root)
    outside = tmp_path / "outside"
    (root / "build").rename(outside)
    (root / "build").symlink_to(outside)
    plan = plan_undo(root, "mv")
    assert plan is not None

    outcome = undo(root, plan)

    assert outcome is not None and not outcome.done
    assert [p for p, _ in outcome.conflicts] == ["build/cache.o"]
    assert [p for p, _ in outcome.cannot] == ["thesis.tex"]
    assert (outside / "cache.o").read_bytes() == THESIS
    assert not BlobStore.for_root(root).has(sha(THESIS))


def test_a_fifo_where_the_content_was_is_refused_never_opened(root: Path):
    moved(root)
    fifo = root / "build" / "cache.o"
    fifo.unlink()
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()  # blocks until someone opens the FIFO to read
    plan = plan_undo(root, "mv")
    assert plan is not None

    outcome = undo(root, plan)

    writer.join(0.3)
    opened = not writer.is_alive()
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
    writer.join(5)
    assert not opened, "undo opened the FIFO"
    assert outcome is not None and not outcome.done
    assert "cannot be read safely" in dict(outcome.conflicts)["build/cache.o"]
    assert [p for p, _ in outcome.cannot] == ["thesis.tex"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_undo_of_an_apply_asks_keeps_and_names_what_it_cannot_restore(root: Path,
                                                                      changeset: Changeset):
    apply_changes(root, changeset, approved_by="user")
    blobs = BlobStore.for_root(root)
    blobs.path(sha(b"old\n")).unlink()  # the deleted file's content is gone from the store
    plan = plan_undo(root, "s1")
    assert plan is not None and [p for p, _ in plan.cannot] == ["old.txt"]
    assert undo(root, plan, confirm=lambda preview: False) is None
    assert (root / "src" / "app.py").read_bytes() == b"v2\n"

    outcome = undo(root, plan, confirm=lambda preview: True)

    assert outcome is not None and [p for p, _ in outcome.cannot] == ["old.txt"]
    assert (root / "src" / "app.py").read_bytes() == b"v1\n" and not (root / "run.sh").exists()
    assert not (root / "old.txt").exists()
    assert set(applied_paths(root, changeset)) == {"old.txt"}  # still applied, still named


def test_a_file_undo_cannot_take_back_still_gives_its_content_to_another(root: Path):
    """`mv thesis.tex old.txt`: old.txt's own earlier content was never kept, so it stays as
    it is; but it holds what thesis.tex had, so thesis.tex comes back."""
    (root / "old.txt").write_bytes(THESIS)
    journal = ensure_session_dir(root, "over") / "journal.ndjson"
    for record in [
        {"path": "old.txt", "before": file(b"old\n").row(), "after": file(THESIS).row()},
        {"path": "thesis.tex", "before": file(THESIS).row(), "after": None},
    ]:
        append_line(journal, {"type": "write", "source": "command", **record})
    plan = plan_undo(root, "over")
    assert plan is not None and [p for p, _ in plan.cannot] == ["old.txt"]
    assert plan.sources == {sha(THESIS): ["old.txt"]}

    outcome = undo(root, plan)

    assert outcome is not None and [c.path for c in outcome.done] == ["thesis.tex"]
    assert (root / "thesis.tex").read_bytes() == THESIS
    assert (root / "old.txt").read_bytes() == THESIS
    assert [p for p, _ in outcome.cannot] == ["old.txt"]


def test_two_files_swapped_and_a_directory_moved_come_back(root: Path):
    """`mv a t; mv b a; mv t b; mv gone moved`: every earlier content is in a file undo
    removes or overwrites, so all of it comes back though none of it was kept."""
    (root / "a").write_bytes(b"B\n")
    (root / "b").write_bytes(b"A\n")
    (root / "gone").rename(root / "moved")
    journal = ensure_session_dir(root, "swap") / "journal.ndjson"
    for path, before, after in [
        ("a", file(b"A\n"), file(b"B\n")), ("b", file(b"B\n"), file(b"A\n")),
        ("gone", Entry("dir"), None), ("gone/x", file(b"x\n"), None),
        ("moved", None, Entry("dir")), ("moved/x", None, file(b"x\n")),
    ]:
        append_line(journal, {"type": "write", "source": "command", "path": path,
                              "before": before.row() if before else None,
                              "after": after.row() if after else None})
    plan = plan_undo(root, "swap")
    assert plan is not None and plan.cannot == []

    outcome = undo(root, plan)

    assert outcome is not None and not outcome.conflicts and not outcome.cannot
    assert (root / "a").read_bytes() == b"A\n" and (root / "b").read_bytes() == b"B\n"
    assert (root / "gone" / "x").read_bytes() == b"x\n" and not (root / "moved").exists()
