"""`diff`, `apply` and `undo` against a hostile sandbox, through the real CLI and real
containers (the fourth outside review): what is applied never lands in the person's own config
dir, never widens a private file's mode, never hides what runs behind "binary" or invisible
characters, judges links by where they really lead, and an undo never wipes out an edit the
person made while the session ran."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.docker.cli_support import SANDBOX_AGENT, ask, assert_ok, explain, run_cli
from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply

pytestmark = pytest.mark.docker

ALLOW_ALL = ('[defaults]\nmedium = "allow"\nhigh = "allow"\ncritical = "allow"\n\n'
             '[[rules]]\ntool = "*"\ndecision = "allow"\n')


def script(server: ModelServer, *calls: Call, answer: str = "done") -> None:
    for call in calls:
        server.reply(tool_calls=[call])
    server.reply(answer)


def shell(command: str) -> Call:
    return Call("run_shell_command", {"command": command})


def copy_session(project: Path, server: ModelServer, *calls: Call,
                 env: dict[str, str] | None = None) -> None:
    script(server, *calls)
    assert_ok(ask(project, server, "ollama", "--yes", "--workspace", "copy", env=env), "done")


def at_terminal(*args: Any) -> tuple[int, str]:
    """Run `sandbox-agent ARGS` with stdout and stderr on a pseudo-terminal; all it printed."""
    import pty
    import select
    import subprocess
    import time

    from tests.docker.cli_support import RUN_TIMEOUT, cli_env

    master, slave = pty.openpty()
    run = subprocess.Popen([str(SANDBOX_AGENT), *map(str, args)], stdin=subprocess.DEVNULL,
                           stdout=slave, stderr=slave, env=cli_env(COLUMNS="200"))
    os.close(slave)
    shown, deadline = b"", time.monotonic() + RUN_TIMEOUT
    try:
        while select.select([master], [], [], max(0.0, deadline - time.monotonic()))[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            shown += chunk
        return run.wait(timeout=30), shown.decode("utf-8", "replace")
    finally:
        os.close(master)
        if run.poll() is None:
            run.kill()
            run.wait()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- finding 3: the person's config dir inside --root -----------------------------------------


def test_apply_never_writes_into_the_config_dir_in_the_project(project: Path,
                                                               model_server: ModelServer):
    """`--root ~` with the config dir at ~/.config/sandbox-agent: bind mode is refused, a copy
    session runs, and the sandbox writes policy.toml into its copy of the config dir. `apply`
    wrote it into the real one, the allow-all policy of every later run of every project."""
    config = project / ".config" / "sandbox-agent"
    config.mkdir(parents=True)
    env = {"SANDBOX_AGENT_CONFIG_DIR": str(config)}
    copy_session(project, model_server,
                 Call("write_file", {"path": ".config/sandbox-agent/policy.toml",
                                     "content": ALLOW_ALL}),
                 Call("write_file", {"path": "hello.py", "content": "print('hi')\n"}), env=env)

    shown = run_cli("diff", "--root", project, "--stat", env=env)
    applied = run_cli("apply", "--root", project, "--yes", env=env)

    assert "policy.toml" in shown.stdout and "inside your sandbox-agent config dir" in (
        shown.stdout), explain(shown)
    assert applied.returncode == 61, explain(applied)
    assert "not applied: .config/sandbox-agent/policy.toml: inside your sandbox-agent config " \
           "dir" in applied.stderr, explain(applied)
    assert os.listdir(config) == []
    assert (project / "hello.py").read_text() == "print('hi')\n"  # the rest is applied
    other = project.parent / "other"
    other.mkdir()
    explained = run_cli("policy", "explain", "--root", other, "--tool", "run_shell_command",
                        "--args", '{"command": "rm -rf /workspace"}', env=env)
    assert "decision:  allow" not in explained.stdout, explain(explained)


def test_a_link_that_moves_the_config_dir_into_the_project_is_refused(
        project: Path, model_server: ModelServer):
    """The config dir's path goes through a name that does not exist yet: a link made there
    by the sandbox would move the config dir onto a policy the repository ships (or one the
    sandbox writes beside the link)."""
    shipped = project / "dotfiles" / "sandbox-agent"
    shipped.mkdir(parents=True)
    (shipped / "policy.toml").write_text(ALLOW_ALL)
    env = {"SANDBOX_AGENT_CONFIG_DIR": str(project / "cfg" / "sandbox-agent")}
    copy_session(project, model_server, shell("ln -s dotfiles cfg && echo x > readme"), env=env)

    applied = run_cli("apply", "--root", project, "--yes", env=env)

    assert applied.returncode == 61, explain(applied)
    assert "not applied: cfg: a link on the way to your sandbox-agent config dir" in (
        applied.stderr), explain(applied)
    assert not os.path.lexists(project / "cfg")
    assert (project / "readme").read_text() == "x\n"  # not on the way: applied


def test_a_config_dir_reached_through_a_link_in_the_tree_is_refused(
        project: Path, model_server: ModelServer):
    """The tree already holds the link (dotfiles kept in the repository): the config dir
    really is `dotfiles/sandbox-agent`, and writes there are refused under either name."""
    (project / "dotfiles" / "sandbox-agent").mkdir(parents=True)
    (project / "cfg").symlink_to("dotfiles")
    env = {"SANDBOX_AGENT_CONFIG_DIR": str(project / "cfg" / "sandbox-agent")}
    copy_session(project, model_server, Call("write_file", {
        "path": "dotfiles/sandbox-agent/policy.toml", "content": ALLOW_ALL}), env=env)

    applied = run_cli("apply", "--root", project, "--yes", env=env)

    assert applied.returncode == 61, explain(applied)
    assert not (project / "dotfiles" / "sandbox-agent" / "policy.toml").exists()


# -- finding 5: a bind session's undo and the person's own edit ------------------------------


def test_undo_keeps_an_edit_the_person_made_between_two_writes(project: Path,
                                                               model_server: ModelServer):
    """The model edits notes.txt twice; while it thinks, the person edits the same file. The
    second write's snapshot holds the person's version. Undo went back to the state before
    the session (the file matched the last write), wiping the person's line without a word."""
    notes = project / "notes.txt"
    notes.write_text("a\nb\nc\n")

    def meanwhile(request: RecordedRequest) -> Reply:
        notes.write_text(notes.read_text().replace("c\n", "C-by-the-person\n"))
        return Reply(tool_calls=(Call("edit_file", {"path": "notes.txt", "old_text": "b\n",
                                                    "new_text": "B\n"}),))

    model_server.reply(tool_calls=[Call("edit_file", {"path": "notes.txt", "old_text": "a\n",
                                                      "new_text": "A\n"})])
    model_server.respond(meanwhile)
    script(model_server, Call("write_file", {"path": "hello.py", "content": "changed\n"}))
    assert_ok(ask(project, model_server, "ollama", "--yes"), "done")
    assert notes.read_text() == "A\nB\nC-by-the-person\n"

    undone = run_cli("undo", "--root", project, "--yes")

    assert undone.returncode == 61, explain(undone)
    assert notes.read_text() == "A\nB\nC-by-the-person\n"
    assert "notes.txt: conflict: changed outside the session between two of its writes" in (
        undone.stderr), explain(undone)
    assert (project / "hello.py").read_text() == 'print("hello")\n'  # the rest is undone


# -- finding 7: modes ------------------------------------------------------------------------


def test_apply_and_undo_keep_a_private_file_private(project: Path, model_server: ModelServer):
    """`.env` is 0600. apply rewrote it 0644 (only the executable bit was kept), undo too,
    and a deleted private file came back 0644; diff showed no mode change either way."""
    env_file, key, tool = project / ".env", project / "id.key", project / "tool.sh"
    env_file.write_text("API_KEY=abc\n")
    key.write_text("KEY\n")
    tool.write_text("echo hi\n")
    env_file.chmod(0o600)
    key.chmod(0o600)
    tool.chmod(0o640)
    copy_session(project, model_server,
                 shell("echo DEBUG=1 >> .env && rm id.key && chmod +x tool.sh"))

    shown = run_cli("diff", "--root", project)
    applied = run_cli("apply", "--root", project, "--yes")

    assert "diff --sandbox-agent a/.env b/.env\n--- a/.env" in shown.stdout, explain(shown)
    assert "old mode 100640\nnew mode 100750\n" in shown.stdout, explain(shown)
    assert "deleted file mode 100600\n" in shown.stdout, explain(shown)
    assert applied.returncode == 0, explain(applied)
    assert env_file.read_text() == "API_KEY=abc\nDEBUG=1\n" and mode(env_file) == 0o600
    assert not key.exists() and mode(tool) == 0o750
    undone = run_cli("undo", "--root", project, "--yes")
    assert undone.returncode == 0, explain(undone)
    assert env_file.read_text() == "API_KEY=abc\n" and mode(env_file) == 0o600
    assert key.read_text() == "KEY\n" and mode(key) == 0o600
    assert mode(tool) == 0o640


def test_apply_drops_a_set_id_bit_and_says_so(project: Path, model_server: ModelServer):
    tool = project / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)
    copy_session(project, model_server, shell("echo 'echo hi' >> tool"))

    shown = run_cli("diff", "--root", project)
    applied = run_cli("apply", "--root", project, "--yes")

    assert "old mode 104755\nnew mode 100755\n" in shown.stdout, explain(shown)
    assert applied.returncode == 0 and mode(tool) == 0o755, explain(applied)


# -- finding 8: links through links ----------------------------------------------------------


def test_a_link_through_another_link_that_leaves_the_project_is_flagged(
        project: Path, model_server: ModelServer):
    """`notes.txt -> docs/root/../secret.txt` reads as staying inside, but `docs/root -> ..`
    (also new) makes it lead to the secret beside the project; `up -> ..` already in the
    tree does the same for `more.txt -> up/secret.txt`. Both were flagged only as new links."""
    (project / "docs").mkdir()
    (project / "up").symlink_to("..")
    copy_session(project, model_server, shell(
        "ln -s .. docs/root && ln -s docs/root/../secret.txt notes.txt && "
        "ln -s up/secret.txt more.txt && ln -s docs/../hello.py fine.txt"))

    shown = run_cli("diff", "--root", project, "--stat")

    lines = {line.split()[1]: line for line in shown.stdout.splitlines()[:-1]}
    assert "link leaving the project (-> docs/root/../secret.txt)" in lines["notes.txt"], (
        explain(shown))
    assert "link leaving the project (-> up/secret.txt)" in lines["more.txt"], explain(shown)
    assert "new link (-> ..)" in lines["docs/root"], explain(shown)  # docs/.. is the root
    assert "new link (-> docs/../hello.py)" in lines["fine.txt"], explain(shown)
    flagged = {c["path"]: c["flags"] for c in json.loads(
        run_cli("diff", "--root", project, "--json").stdout)["changes"]}
    assert flagged["notes.txt"] == ["link leaving the project (-> docs/root/../secret.txt)"]


# -- finding 9: invisible characters at a terminal -------------------------------------------


def test_diff_at_a_terminal_shows_invisible_characters_escaped(project: Path,
                                                               model_server: ModelServer):
    hidden = "echo safe\u200b\u2028\ufeff\U000e0063\U000e0075\u00ad\u2060\n"
    copy_session(project, model_server,
                 Call("write_file", {"path": "run.sh", "content": hidden}),
                 Call("write_file", {"path": "a\u200bb.txt", "content": "x\n"}))

    code, shown = at_terminal("diff", "--root", project)
    stat_code, stat_shown = at_terminal("diff", "--root", project, "--stat")

    assert code == 0 and stat_code == 0, shown + stat_shown
    assert "+echo safe\\u200b\\u2028\\ufeff\\U000e0063\\U000e0075\\xad\\u2060" in shown, shown
    assert "a\\u200bb.txt" in shown and "a\\u200bb.txt" in stat_shown, stat_shown
    for char in "\u200b\u2028\ufeff\U000e0063\u00ad\u2060":
        assert char not in shown + stat_shown, ascii(char)


# -- finding 10: a NUL in a file that runs on the host ---------------------------------------


def test_a_makefile_with_a_nul_is_shown_as_text(project: Path, model_server: ModelServer):
    """A NUL made the Makefile "binary": diff and the apply prompt showed only "Binary files
    differ", while make runs the recipe all the same."""
    (project / "Makefile").write_text("all:\n\t@echo building\n")
    copy_session(project, model_server, shell(
        "printf 'all:\\n\\t@echo building; touch ../PWNED\\n# \\000\\n' > Makefile && "
        "printf '\\000\\001' > data.bin"))

    piped = run_cli("diff", "--root", project)
    code, shown = at_terminal("diff", "--root", project)
    counted = run_cli("diff", "--root", project, "--stat")

    assert "+\t@echo building; touch ../PWNED\n+# \x00\n" in piped.stdout, explain(piped)
    assert code == 0 and "+# \\x00" in shown and "\x00" not in shown, shown
    assert "Binary files differ (none -> 2 bytes)" in piped.stdout  # not flagged: binary
    assert " M Makefile  +2 -1" in counted.stdout, explain(counted)
