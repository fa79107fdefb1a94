"""The copy workspace through the real CLI and real containers: the host tree is untouched
during the run; writes, edits, shell-made files, deletions, the executable bit and links come
back as pending changes; `diff`, `apply` (conflicts refused, exit 61) and `undo` land or take
them back; bind sessions can be undone as far as their content was kept."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.docker.cli_support import ask, assert_ok, explain, run_cli, tool_exchanges
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under root (.git included): mode, mtime and content or link target."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            what = "-> " + os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            what = "dir"
        found[path.relative_to(root).as_posix()] = (st.st_mode, st.st_mtime_ns, what)
    return found


def script(server: ModelServer, *calls: Call, answer: str = "done") -> None:
    for call in calls:
        server.reply(tool_calls=[call])
    server.reply(answer)


def results(server: ModelServer) -> list[str]:
    return [result for _, _, result in tool_exchanges(server.last_chat)]


def cli(*args: Any, stdin: str | None = None) -> Any:
    return run_cli(*args, stdin=stdin)


THE_TASK = (
    Call("write_file", {"path": "notes/new.md", "content": "# new\n"}),
    Call("edit_file", {"path": "src/app.py", "old_text": "a + b", "new_text": "a - b"}),
    Call("run_shell_command", {"command": "rm hello.py && printf '#!/bin/sh\\necho hi\\n' > "
                                          "deploy.sh && chmod +x deploy.sh && ln -s "
                                          "/etc/passwd pw && cat src/app.py"}),
)


def test_a_copy_session_leaves_the_tree_alone_and_its_changes_wait(project: Path,
                                                                   model_server: ModelServer):
    before = snapshot(project)
    script(model_server, *THE_TASK)

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy")

    assert_ok(done, "done")
    assert snapshot(project) == before
    assert "a - b" in results(model_server)[2]  # the sandbox saw its own edit
    assert "copy workspace: 6 paths changed, +4 -2, 2 flagged" in done.stderr, explain(done)
    assert "your tree is untouched" in done.stderr
    assert f"sandbox-agent apply --root {project} --session" in done.stderr
    shown = cli("diff", "--root", project)
    assert shown.returncode == 0, explain(shown)
    assert "-    return a + b\n+    return a - b\n" in shown.stdout
    assert "!! runs on the host (*.sh)\n!! gains the executable bit\n" in shown.stdout
    assert "!! link leaving the project (-> /etc/passwd)" in shown.stdout
    assert "deleted file mode 100644\n--- a/hello.py\n" in shown.stdout
    changes = json.loads(cli("diff", "--root", project, "--json").stdout)
    assert {c["path"]: c["status"] for c in changes["changes"]} == {
        "notes": "A", "notes/new.md": "A", "src/app.py": "M", "hello.py": "D",
        "deploy.sh": "A", "pw": "A"}
    assert cli("diff", "--root", project, "--stat").stdout.splitlines()[-1] == (
        "6 paths changed, +4 -2, 2 flagged for review")


def test_a_change_that_puts_size_and_mtime_back_still_comes_back(project: Path,
                                                                   model_server: ModelServer):
    # In place, same size, mtime put back: only the ctime the kernel sets tells (the copy's
    # baseline: what is unchanged since it arrived is not read again at the end).
    script(model_server, Call("read_file", {"path": "hello.py"}), Call("run_shell_command", {
        "command": "python3 -c \"import os; p='hello.py'; st=os.stat(p); f=open(p, 'r+b'); "
                   "f.write(b'#'); f.close(); os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\""
                   " && stat -c %s hello.py"}))

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy")

    assert_ok(done, "done")
    assert results(model_server)[1].strip().endswith("15"), results(model_server)
    changes = json.loads(cli("diff", "--root", project, "--json").stdout)["changes"]
    assert [(c["path"], c["status"]) for c in changes] == [("hello.py", "M")], changes
    assert cli("apply", "--root", project, "--yes").returncode == 0
    assert (project / "hello.py").read_text() == '#rint("hello")\n'


def test_the_copys_extractor_imports_nothing_of_the_repository(project: Path,
                                                               model_server: ModelServer):
    """Red-team round 26: the extractor ran as `python3 -c` in the copy, so a `json.py` the
    repository shipped was imported there, as the user that owns the copy's repositories,
    and made the copy's `.git` writable (here: the copy failed with its traceback)."""
    (project / "json.py").write_text("open('/tmp/repository-code-ran', 'w').write('ran')\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "echo RAN=$(cat /tmp/repository-code-ran 2>/dev/null)"})])
    model_server.reply("Looked.")
    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy")
    assert_ok(done, "Looked.")
    [(_, _, output)] = tool_exchanges(model_server.last_chat)
    assert output.rstrip().endswith("RAN="), output


def test_apply_lands_the_changes_once_and_undo_takes_them_back(project: Path,
                                                               model_server: ModelServer):
    script(model_server, *THE_TASK)
    assert_ok(ask(project, model_server, "ollama", "--yes", "--workspace", "copy"), "done")
    untouched = snapshot(project)

    refused = cli("apply", "--root", project)
    assert refused.returncode == 2 and "--yes" in refused.stderr, explain(refused)
    applied = cli("apply", "--root", project, "--yes")
    assert applied.returncode == 0, explain(applied)
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (project / "notes" / "new.md").read_text() == "# new\n"
    assert not (project / "hello.py").exists()
    assert (project / "deploy.sh").stat().st_mode & 0o7777 == 0o755
    assert os.readlink(project / "pw") == "/etc/passwd"
    again = cli("apply", "--root", project, "--yes")
    assert again.returncode == 0 and "nothing to apply" in again.stderr, explain(again)

    applied_tree = snapshot(project)
    refused_undo = cli("undo", "--root", project)
    assert refused_undo.returncode == 2, explain(refused_undo)
    assert "no terminal to ask" in refused_undo.stderr and "--yes" in refused_undo.stderr
    assert snapshot(project) == applied_tree  # asked, not answered: nothing changed
    undone = cli("undo", "--root", project, "--yes")
    assert undone.returncode == 0, explain(undone)
    assert {p: v[2] for p, v in snapshot(project).items()} == {
        p: v[2] for p, v in untouched.items()}
    records = [json.loads(line) for line in cli("audit", "export", "--root", project,
                                                "--format", "jsonl").stdout.splitlines()]
    [apply_record] = [r for r in records if r["kind"] == "apply"]
    assert apply_record["approved_by"] == "--yes"
    assert {f["path"] for f in apply_record["files"]} >= {"src/app.py", "deploy.sh"}
    assert [r["kind"] for r in records].count("undo") == 1
    assert cli("audit", "verify", "--root", project).returncode == 0


def test_a_file_changed_on_the_host_meanwhile_is_refused_not_merged(project: Path,
                                                                    model_server: ModelServer):
    script(model_server, *THE_TASK)
    assert_ok(ask(project, model_server, "ollama", "--yes", "--workspace", "copy"), "done")
    (project / "src" / "app.py").write_text("def add(a, b):\n    return b + a  # mine\n")

    applied = cli("apply", "--root", project, "--yes")

    assert applied.returncode == 61, explain(applied)
    assert "src/app.py" in applied.stderr.splitlines()[-2], explain(applied)
    assert (project / "src" / "app.py").read_text().endswith("# mine\n")
    assert (project / "notes" / "new.md").exists() and not (project / "hello.py").exists()
    left = json.loads(cli("diff", "--root", project, "--json").stdout)
    assert left["pending"] == 1


def test_ask_apply_applies_at_the_end(project: Path, model_server: ModelServer):
    script(model_server, THE_TASK[0])

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy", "--apply")

    assert_ok(done, "done")
    assert (project / "notes" / "new.md").read_text() == "# new\n"
    bind = ask(project, model_server, "ollama", "--yes", "--apply")
    assert bind.returncode == 2 and "--workspace copy" in bind.stderr, explain(bind)


def test_the_copy_keeps_the_invariants(project: Path, model_server: ModelServer):
    legacy = project / ".sandbox-agent"
    legacy.mkdir()
    (legacy / "sessions").mkdir()
    (legacy / "sessions" / "old.ndjson").write_text('{"secret": "transcript"}\n')
    script(model_server, Call("run_shell_command", {"command": (
        "ls -a; echo x >> .git/config; echo $?; git init -q sub && echo made; "
        "cp /bin/true tool && chmod 4755 tool; echo chmod=$?; ls -l tool")}))

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy")

    assert_ok(done, "done")
    [result] = results(model_server)
    assert ".sandbox-agent" not in result and "Permission denied" in result, result
    assert "sub/.git was disabled" in result and "chmod=1" in result, result
    paths = {c["path"]: c for c in json.loads(cli("diff", "--root", project,
                                                  "--json").stdout)["changes"]}
    assert "sub" in paths and not any(".git" in p for p in paths), paths
    assert paths["tool"]["after"]["mode"] == "0755"
    assert cli("apply", "--root", project, "--yes").returncode == 0
    assert not (project / "sub" / ".git").exists() and os.listdir(project / "sub") == []
    assert (project / "tool").stat().st_mode & 0o7777 == 0o755


def test_apply_never_writes_what_git_on_the_host_runs_or_reads_as_config(
        project: Path, model_server: ModelServer):
    """The repository's hooksPath and the config .git/config includes are ordinary files in a
    copy: `diff` flags a change to them loudly, `apply` refuses it (exit 61) and lands the rest,
    and git on the host runs nothing the sandbox wrote, also through what a refused config
    change would have included."""
    git = functools.partial(subprocess.run, check=True, capture_output=True, text=True,
                            cwd=project)
    (project / "tools" / "hooks").mkdir(parents=True)
    (project / "tools" / "repo.gitconfig").write_text("[core]\n\tautocrlf = false\n")
    (project / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (project / "tools" / "hooks" / "pre-commit").chmod(0o755)
    git(["git", "config", "core.hooksPath", "tools/hooks"])
    git(["git", "config", "include.path", "../tools/repo.gitconfig"])
    marker = project.parent / "PWNED"
    fsmonitor = f'[core]\\n\\tfsmonitor = \\"touch {marker}; false\\"\\n'
    script(model_server, Call("run_shell_command", {"command": (
        f"printf '{fsmonitor}' >> tools/repo.gitconfig && "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > tools/hooks/pre-commit && "
        "printf '[include]\\n\\tpath = ../extra.gitconfig\\n' >> tools/repo.gitconfig && "
        f"printf '{fsmonitor}' > extra.gitconfig && echo fixed >> hello.py")}))
    assert_ok(ask(project, model_server, "ollama", "--yes", "--workspace", "copy"), "done")

    shown = cli("diff", "--root", project)
    assert shown.returncode == 0, explain(shown)
    assert ("!! git on the host runs or reads this: git reads it as config (included by "
            ".git/config) — apply refuses it\ndiff --sandbox-agent a/tools/repo.gitconfig"
            in shown.stdout), explain(shown)
    assert ("!! git on the host runs or reads this: inside tools/hooks: git runs the hooks in "
            "it (core.hooksPath in .git/config) — apply refuses it\n" in shown.stdout)
    assert ("!! git on the host runs or reads this: git would read it as config if the change "
            "to tools/repo.gitconfig were made — apply refuses it\n" in shown.stdout)
    applied = cli("apply", "--root", project, "--yes")

    assert applied.returncode == 61, explain(applied)
    for path in ("tools/repo.gitconfig", "tools/hooks/pre-commit", "extra.gitconfig"):
        assert f"not applied: {path}: git on the host runs or reads this" in applied.stderr
    assert (project / "hello.py").read_text().endswith("fixed\n")
    assert (project / "tools" / "repo.gitconfig").read_text() == "[core]\n\tautocrlf = false\n"
    assert not (project / "extra.gitconfig").exists()
    git(["git", "status", "--short"])
    git(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
         "-m", "x"])
    assert not marker.exists()


def test_a_resumed_copy_session_goes_on_from_its_own_changes(project: Path,
                                                             model_server: ModelServer):
    script(model_server, THE_TASK[0])
    first = ask(project, model_server, "ollama", "--yes", "--workspace", "copy",
                "--session", "keep")
    assert_ok(first, "done")
    script(model_server, Call("run_shell_command", {"command": "cat notes/new.md; ls hello.py"}))

    second = ask(project, model_server, "ollama", "--yes", "--session", "keep", "--resume")

    assert_ok(second, "done")
    assert "# new" in results(model_server)[-1] and "hello.py" in results(model_server)[-1]
    assert not (project / "notes").exists()
    pending = json.loads(cli("diff", "--root", project, "--json").stdout)
    assert {c["path"] for c in pending["changes"]} == {"notes", "notes/new.md"}


def test_a_project_too_big_to_copy_is_one_clear_error(project: Path, model_server: ModelServer):
    (project / "data.bin").write_bytes(b"x" * 4096)

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy",
               "--copy-limit", "2k")

    assert done.returncode == 62, explain(done)
    assert "more than 2.0 KB" in done.stderr and "--exclude" in done.stderr, explain(done)


def test_review_reads_a_copy(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    model_server.reply("looks fine")

    done = run_cli("review", "--root", project, "--provider", "ollama", "--host",
                   model_server.url, "--workspace", "copy")

    assert done.returncode == 0, explain(done)
    assert "def add" in results(model_server)[0]
    assert "copy workspace" in done.stderr and "paths changed" not in done.stderr


def test_a_bind_session_is_undone_as_far_as_its_content_was_kept(project: Path,
                                                                 model_server: ModelServer):
    (project / "notes.txt").write_text("keep\n")
    script(model_server,
           Call("write_file", {"path": "hello.py", "content": "print('changed')\n"}),
           Call("edit_file", {"path": "src/app.py", "old_text": "a + b", "new_text": "a * b"}),
           Call("run_shell_command", {"command": "echo made > made.txt; echo more >> "
                                                 "notes.txt; echo again >> src/app.py"}))
    assert_ok(ask(project, model_server, "ollama", "--yes"), "done")

    undone = cli("undo", "--root", project, "--yes")

    assert undone.returncode == 64, explain(undone)  # what it could, with what it could not
    assert (project / "hello.py").read_text() == 'print("hello")\n'
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert not (project / "made.txt").exists()
    assert (project / "notes.txt").read_text() == "keep\nmore\n"  # its content was not kept
    assert "cannot restore notes.txt: changed by a shell command" in undone.stderr
    assert undone.stderr.splitlines()[-2] == "error: 1 path cannot be restored: notes.txt"
    again = cli("undo", "--root", project, "--yes")
    assert again.returncode == 64 and again.stdout == "", explain(again)
    assert "cannot restore notes.txt" in again.stderr, explain(again)


def test_a_second_undo_names_the_older_session_it_goes_on_to(project: Path,
                                                              model_server: ModelServer):
    script(model_server, Call("write_file", {"path": "first.txt", "content": "1\n"}))
    assert_ok(ask(project, model_server, "ollama", "--yes", "--session", "monday"), "done")
    script(model_server, Call("write_file", {"path": "second.txt", "content": "2\n"}))
    assert_ok(ask(project, model_server, "ollama", "--yes", "--session", "tuesday"), "done")

    latest = cli("undo", "--root", project, "--yes")
    assert latest.returncode == 0, explain(latest)
    assert latest.stderr.splitlines()[0] == "undoing session tuesday: what it wrote"
    assert not (project / "second.txt").exists() and (project / "first.txt").exists()

    again = cli("undo", "--root", project, "--yes")
    assert again.returncode == 0, explain(again)
    assert again.stderr.splitlines()[0] == (
        "undoing session monday: what it wrote (an older session: tuesday, newer, has nothing "
        "left to undo; --session NAME picks one)")
    assert not (project / "first.txt").exists()


THESIS = b"\\documentclass{article}\r\n\\begin{document}\x00\xff only copy\\end{document}"
"""The person's only copy (a CR, a NUL, a byte that is not UTF-8, no newline at the end)."""


def test_undo_puts_back_a_file_a_command_moved_and_keeps_what_it_removes(
        project: Path, model_server: ModelServer):
    """Issue 23, finding 5: after `mv thesis.tex build/cache.o`, undo removed build/cache.o
    (made by a command), said thesis.tex's content was not kept, asked nothing and exited 0:
    the removed file held exactly that content."""
    from executor.workspace.store import BlobStore

    (project / "thesis.tex").write_bytes(THESIS)
    (project / "build").mkdir()
    script(model_server, Call("run_shell_command", {"command": "mv thesis.tex build/cache.o"}))
    assert_ok(ask(project, model_server, "ollama", "--yes"), "done")
    assert (project / "build" / "cache.o").read_bytes() == THESIS
    after_session = snapshot(project)
    blobs = BlobStore.for_root(project)
    digest = hashlib.sha256(THESIS).hexdigest()
    assert not blobs.has(digest)  # a command's file: nothing kept it yet

    refused = cli("undo", "--root", project)
    assert refused.returncode == 2, explain(refused)
    assert refused.stderr.splitlines()[-2] == ("error: undo asks before it removes or "
                                               "overwrites anything, and there is no terminal "
                                               "to ask"), explain(refused)
    assert "deleted file mode 100644" in refused.stderr  # the list it would have asked about
    assert snapshot(project) == after_session and not blobs.has(digest)

    undone = cli("undo", "--root", project, "--yes")

    assert undone.returncode == 0, explain(undone)
    assert (project / "thesis.tex").read_bytes() == THESIS
    assert not (project / "build" / "cache.o").exists() and (project / "build").is_dir()
    assert blobs.get(digest) == THESIS  # what it removed is kept
    assert undone.stdout.splitlines() == ["removed build/cache.o", "put back thesis.tex"]
    assert "cannot restore" not in undone.stderr, explain(undone)
    records = [json.loads(line) for line in cli("audit", "export", "--root", project,
                                                "--format", "jsonl").stdout.splitlines()]
    [record] = [r for r in records if r["kind"] == "undo"]
    assert {f["path"]: f["sha256_before"] for f in record["files"]} == {
        "build/cache.o": digest, "thesis.tex": None}
    assert record["cannot"] == []


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_a_copy_container_is_hardened_like_any_other(project: Path, docker_client: Any,
                                                     storage: str):
    from executor.sandbox.config import CHANNEL
    from executor.sandbox.docker import DockerSandbox
    from executor.sandbox.hardening import HOSTS
    from executor.workspace.copyload import ArchiveLoader
    from tests.docker.conftest import make_config

    for path in [project, *project.rglob("*")]:  # tools of uid 0 would own the copy's top
        os.lchown(path, 1000, 1000)
    config = make_config(project, workspace="copy", copy_storage=storage)
    with DockerSandbox(config, client=docker_client, copy_loader=ArchiveLoader()) as box:
        host = docker_client.api.inspect_container(box.info.container_id)["HostConfig"]
        mounts = docker_client.api.inspect_container(box.info.container_id)["Mounts"]
        result = box.call("run_shell_command", {"command": "stat -c '%a %u' /workspace/.git; "
                                                           "touch .git/x; id -u"})
        # red-team round 9: a disk copy's top was root's 0777, so `.git` could be swapped
        top = box.call("run_shell_command", {"command": (
            "stat -c 'top %a %u' /workspace; touch new.txt && echo made; "
            "mv .git .git-orig || echo kept; rm -rf .git || echo kept-too; ls -d .git")})
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert host["NetworkMode"] == "none"
    # nothing of the host but the toolbox's channel directory (two FIFOs) and our own hosts
    # file (no network sandbox for the engine to make, as in bind mode), both read-only
    binds = {m["Destination"]: m for m in mounts if m["Type"] == "bind"}
    assert sorted(binds) == ["/etc/hosts", CHANNEL] and not any(m["RW"] for m in binds.values())
    assert Path(binds["/etc/hosts"]["Source"]).read_bytes() == HOSTS
    copied = sum(p.lstat().st_size for p in project.rglob("*") if p.is_file()
                 and not p.is_symlink())  # repositories included: they are in the copy too
    if storage == "memory":  # the copy is charged to the container: the tools keep 512m
        assert host["Memory"] == 512 * 1024 * 1024 + copied
        assert "nosuid" in host["Tmpfs"]["/workspace"] and "nodev" in host["Tmpfs"]["/workspace"]
    else:
        assert host["Memory"] == 512 * 1024 * 1024
        assert sorted(m["Type"] for m in mounts) == ["bind", "bind", "volume"]
    assert "755 65534" in result.output and "Permission denied" in result.output, result.output
    assert "top 1777 0" in top.output and "made" in top.output, top.output
    assert "kept\n" in top.output and "kept-too" in top.output, top.output
    assert "kept-too\n.git\n" in top.output, top.output  # `ls -d .git`: still there


def _at_terminal(argv: list[str], answer: bytes, question: bytes) -> tuple[int, str]:
    """Run `argv` with stdin and stderr on a pseudo-terminal; answer `question` once."""
    import pty
    import select
    import subprocess
    import time

    from tests.docker.cli_support import RUN_TIMEOUT, cli_env

    master, slave = pty.openpty()
    run = subprocess.Popen(argv, stdin=slave, stderr=slave, stdout=subprocess.PIPE,
                           env=cli_env(COLUMNS="120"))
    os.close(slave)
    shown, asked, deadline = b"", False, time.monotonic() + RUN_TIMEOUT
    try:
        while select.select([master], [], [], max(0.0, deadline - time.monotonic()))[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
            if not asked and question in shown:
                os.write(master, answer)
                asked = True
        return run.wait(timeout=30), shown.decode(errors="replace")
    finally:
        os.close(master)
        if run.poll() is None:
            run.kill()
            run.wait()


def test_apply_at_a_terminal_shows_an_inert_diff_and_asks(project: Path,
                                                          model_server: ModelServer):
    from tests.docker.cli_support import SANDBOX_AGENT

    script(model_server, Call("write_file", {"path": "notes.txt",
                                             "content": "clear\x1b[2J\rhidden\u202egnp.exe\n"}))
    assert_ok(ask(project, model_server, "ollama", "--yes", "--workspace", "copy"), "done")
    argv = [str(SANDBOX_AGENT), "apply", "--root", str(project)]

    code, shown = _at_terminal(argv, b"n\n", b"Apply these 1 changes")
    assert code == 63 and not (project / "notes.txt").exists(), shown
    assert "+clear\\x1b[2J\\rhidden\\u202egnp.exe" in shown and "\x1b[2J" not in shown, shown

    code, shown = _at_terminal(argv, b"y\n", b"Apply these 1 changes")
    assert code == 0, shown
    assert (project / "notes.txt").read_bytes() == "clear\x1b[2J\rhidden\u202egnp.exe\n".encode()
    records = [json.loads(line) for line in cli("audit", "export", "--root", project,
                                                "--format", "jsonl").stdout.splitlines()]
    assert [r["approved_by"] for r in records if r["kind"] == "apply"] == ["user"]


def test_stopping_while_the_copy_arrives_ends_it_at_once(project: Path, docker_client: Any):
    import time

    from executor.sandbox.docker import DockerSandbox
    from executor.workspace.copyload import ArchiveLoader
    from tests.docker.conftest import make_config

    for i in range(3000):
        (project / f"d{i % 30}").mkdir(exist_ok=True)
        (project / f"d{i % 30}" / f"f{i}.txt").write_bytes(b"x" * 4000)
    box = DockerSandbox(make_config(project, workspace="copy"), client=docker_client,
                        copy_loader=ArchiveLoader())
    box.start()
    began = time.monotonic()
    box.stop()  # whatever the copy was doing, the container goes and the copy with it
    assert time.monotonic() - began < 20
    assert not box.is_alive()
