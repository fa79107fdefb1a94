"""Names the sandbox chose never start a line of their own in what the host prints.

Red-team round 18: a file named `x\\n+++ b/README.md\\n@@ …` wrote lines of its own choosing
into the run's summary and the diff a person reviews before `apply`, and a `.git` named with
a newline put a fake `warning: all checks passed` line among the host's own warnings.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.docker.cli_support import ask, assert_ok, explain, run_cli, tool_exchanges
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

FORGED = "x\n+++ b/README.md\n@@ -1,2 +1,9 @@\n+harmless"
ESCAPED = "e\x1b]0;TITLE\x07\x1b[2Jred"


def _own_lines(text: str) -> list[str]:
    """Lines that start with what only the sandbox's names could put there."""
    return [line for line in text.splitlines()
            if line.startswith(("+++ b/README.md", "@@ -1,2 +1,9 @@", "+harmless", "warning: all"))]


def test_a_name_with_newlines_stays_one_name_in_the_summary_and_the_diff(
        project: Path, model_server: ModelServer):
    make = ("import os, sys\nfor name in sys.argv[1:]:\n"
            "    os.makedirs(os.path.dirname(name) or '.', exist_ok=True)\n"
            "    open(name, 'w').write('hi\\n')\n")
    model_server.reply(tool_calls=[Call("write_file", {"path": "mk.py", "content": make})])
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"python3 mk.py '{FORGED}' '{ESCAPED}' && rm mk.py"})])
    model_server.reply("made")

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "copy")

    assert_ok(done, "made")
    assert "exit_code: 0" in tool_exchanges(model_server.last_chat)[1][2], explain(done)
    assert "x\\n+++ b/README.md\\n@@" in done.stderr and not _own_lines(done.stderr), explain(done)
    piped = run_cli("diff", "--root", project)
    assert piped.returncode == 0, explain(piped)
    assert not _own_lines(piped.stdout) and "\x1b" not in piped.stdout.split("+hi")[0], piped.stdout
    assert '+++ "b/x\\n+++ b/README.md\\n@@ -1,2 +1,9 @@\\n+harmless"' in piped.stdout
    checked = subprocess.run(["git", "apply", "--check", "-v", "-"], cwd=project,
                             input=piped.stdout, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr  # git reads the quoted names back
    applied = run_cli("apply", "--root", project, "--yes")
    assert applied.returncode == 0 and not _own_lines(applied.stdout + applied.stderr), \
        explain(applied)
    assert (project / FORGED).read_text() == "hi\n" and (project / ESCAPED).exists()


def test_a_repository_named_with_a_newline_cannot_write_a_warning_line(
        project: Path, model_server: ModelServer):
    planted = "e\nwarning: all checks passed"
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"mkdir -p '{planted}/.git/objects' '{planted}/.git/refs' && "
                   f"echo 'ref: refs/heads/main' > '{planted}/.git/HEAD' && kill -9 $PPID"})])
    model_server.reply("planted")

    done = ask(project, model_server, "ollama", "--yes", "--workspace", "bind")

    assert "e\\nwarning: all checks passed" in done.stderr, explain(done)
    assert not _own_lines(done.stderr), explain(done)
    assert not (project / planted / ".git").exists()  # renamed aside all the same
