"""The REPL, approvals and live progress at a real pseudo-terminal, rendered by pyte.

The terminal answers cursor-position requests (prompt_toolkit asks), so the line editor runs as
it does for a person; the tests type keys and read the screen.
"""

from __future__ import annotations

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyte
import pytest

from executor.session import sessions_dir
from executor.state import project_dir
from tests.docker.cli_support import SANDBOX_AGENT, cli_env, model_args, run_cli, tool_exchanges
from tests.docker.conftest import SECRET
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

COLUMNS, ROWS = 160, 200
QUESTION = "Allow this call? [y/n/a/r/v] (n):"
NO_GRANT = "Allow this call? [y/n/r/v] (n):"
"""Asked when "always" cannot be offered."""


class Answering(pyte.Screen):
    """A screen that answers the terminal's status requests (cursor position) like a terminal."""

    master = -1

    def write_process_input(self, data: str) -> None:
        os.write(self.master, data.encode())


class Terminal:
    """`sandbox-agent ARGV` at a pseudo-terminal (stdin and stderr; stdout too unless piped)."""

    def __init__(self, argv: list[str], *, stdout_piped: bool = False, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        self.screen = Answering(COLUMNS, ROWS)
        self.screen.master = self.master
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        """Every byte the terminal was sent (what a screen shows only for a moment too)."""
        self.proc = subprocess.Popen(  # in a session of its own, the pty its terminal: ^C works
            argv, stdin=slave, stderr=slave, stdout=subprocess.PIPE if stdout_piped else slave,
            env=cli_env(COLUMNS=str(COLUMNS), LINES=str(ROWS), TERM="xterm", **(env or {})),
            cwd=cwd,
            start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        TERMINALS.append(self)
        os.close(slave)
        self.closed = False

    def lines(self) -> list[str]:
        lines = [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def text(self) -> str:
        return "\n".join(self.lines())

    def pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return
            self.raw += chunk
            self.stream.feed(chunk)

    def wait(self, check: Callable[[list[str]], bool], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.lines()):
            assert not self.closed and time.monotonic() < deadline, f"no {what}:\n{self.text()}"
            self.pump(0.2)

    def at_prompt(self) -> None:
        self.wait(lambda lines: bool(lines) and lines[-1].startswith("you>")
                  and lines[-1].strip() == "you>", "prompt")

    def at_question(self) -> None:
        self.wait(lambda lines: bool(lines) and lines[-1] in (QUESTION, NO_GRANT),
                  "approval question")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())
        self.pump(0.3)

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self.pump(0.2)
        code = self.proc.wait(timeout=30)
        os.close(self.master)
        return code


TERMINALS: list[Terminal] = []


@pytest.fixture(autouse=True)
def _stop_what_is_left() -> Any:
    """A failed test's CLI is stopped like a person would (SIGTERM: it removes its container)."""
    yield
    while TERMINALS:
        term = TERMINALS.pop()
        if term.proc.poll() is None:
            term.proc.terminate()
            term.proc.wait(timeout=60)


def ask(project: Path, server: ModelServer, *flags: str) -> list[str]:
    return [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(server, "ollama"),
            *flags]


def audit_records(project: Path) -> list[dict[str, Any]]:
    done = run_cli("audit", "export", "--root", project, "--format", "jsonl")
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_repl_edits_lines_keeps_history_and_runs_slash_commands(
        project: Path, model_server: ModelServer):
    model_server.reply("It is **fine**; see [the docs](https://example.com/real).")
    term = Terminal(ask(project, model_server, "-i"))
    term.at_prompt()
    assert "model is thinking" not in term.text()  # no spinner left behind the prompt
    before = bytes(term.raw).split(b"interactive session")[0]
    assert b"model is thinking" not in before and b"\xe2\xa0" not in before  # nor before it
    term.type("/help\r")
    term.wait(lambda lines: any("/usage" in line for line in lines), "help")
    term.at_prompt()
    term.type("\r")  # an empty line does nothing
    term.at_prompt()
    term.type("is it fine?\r")
    term.wait(lambda lines: any(line.startswith("done ·") for line in lines), "answer")
    term.at_prompt()
    assert "It is fine; see the docs (https://example.com/real)." in term.lines()
    term.type("/usage\r")
    term.wait(lambda lines: any("1 model turn" in line and line.startswith("session")
                                for line in lines), "usage")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()

    history = project_dir(project) / "repl_history"
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    assert "is it fine?" in history.read_text()

    again = Terminal(ask(project, model_server, "-i", "--resume"))
    again.at_prompt()
    assert "last exchange:" in again.lines() and "you> is it fine?" in again.lines()
    again.type("\x1b[A")  # Up: the history of the project, kept from the last session
    again.wait(lambda lines: lines[-1] == "you> /exit", "history")
    again.type("\r")
    assert again.finish() == 0, again.text()


def test_ctrl_c_cancels_a_running_command_and_the_session_goes_on(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "echo started; sleep 60; echo never"})])
    model_server.reply("still here")
    term = Terminal(ask(project, model_server, "-i", "--yes"))
    term.at_prompt()
    term.type("run it\r")
    term.wait(lambda lines: any(line.strip() == "│ started" for line in lines), "live tail")
    began, mark = time.monotonic(), len(term.raw)
    term.type("\x03")
    term.wait(lambda lines: any(line.startswith("cancelled") for line in lines), "cancel")
    term.at_prompt()
    assert time.monotonic() - began < 30
    assert b"model is thinking" not in term.raw[mark:]  # no model turn follows a cancel
    lines = term.lines()  # what it printed stays, and the call is named as cut short
    [named] = [i for i, line in enumerate(lines) if "echo started; sleep 60; echo never" in line
               and ("interrupted" in line or "no result" in line)]
    assert lines[named + 1].strip() == "│ started", term.text()
    term.type("and now?\r")
    term.wait(lambda lines: "still here" in lines, "next answer")
    term.at_prompt()
    [(_, _, result)] = tool_exchanges(model_server.last_chat)
    assert "no result" in result  # the interrupted call was answered for the model
    term.type("\x03")
    term.wait(lambda lines: any("Ctrl-C again" in line for line in lines), "hint")
    term.type("\x03")
    assert term.finish() == 0, term.text()


def test_ctrl_c_on_one_request_names_the_cut_call_and_how_to_resume(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "echo started; sleep 60; echo never"})])
    term = Terminal(ask(project, model_server, "--yes", "run it"))
    term.wait(lambda lines: any(line.strip() == "│ started" for line in lines), "live tail")
    mark = len(term.raw)
    term.type("\x03")
    assert term.finish() == 130, term.text()
    assert b"model is thinking" not in term.raw[mark:]  # no turn 2 after the cut
    lines = term.lines()
    [named] = [i for i, line in enumerate(lines) if line.startswith("✗ interrupted: ")]
    assert re.fullmatch(r"✗ interrupted: run_shell_command echo started; sleep 60; echo never "
                        r"after \d+\.\d s", lines[named]), term.text()
    assert lines[named + 1].strip() == "│ started" and not any(" 0 ms" in x for x in lines)
    [at] = [i for i, line in enumerate(lines) if " kept; continue it with: " in line]
    hint = "".join(lines[at:-1])  # a long tmp root wraps it over lines
    name = hint.split()[1]
    assert hint.endswith(f"sandbox-agent ask --root {project} --resume --session {name}")
    assert lines[-1] == "interrupted"
    assert (sessions_dir(project) / f"{name}.ndjson").is_file()


def test_always_allow_a_command_prefix_and_say_why_not(project: Path,
                                                        model_server: ModelServer):
    for command in ("git status", "git status --short", "git status --porcelain",
                    "git status; touch pwned"):
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("done")
    term = Terminal(ask(project, model_server, "--deny-command", "git status --porcelain",
                        "check git"), stdout_piped=True)
    term.at_question()
    assert "a: always allow run_shell_command git status … in this session" in term.text()
    term.type("a\r")
    term.wait(lambda lines: sum(line.startswith((QUESTION, NO_GRANT)) for line in lines) == 2,
              "second question")
    assert "$ git status; touch pwned" in term.lines()
    assert term.lines()[-1] == NO_GRANT  # nothing to grant for two commands
    term.type("r\r")
    term.wait(lambda lines: lines[-1].startswith("Why not?"), "reason question")
    term.type("no chaining\r")
    assert term.finish() == 0, term.text()

    refusals = [line for line in term.lines() if "touch pwned" in line and "✗" in line]
    assert refusals == ["✗ run_shell_command git status; touch pwned — declined (you said: "
                        "no chaining)"]
    assert not any(line.startswith("! run_shell_command git status; touch") for line in
                   term.lines())
    assert not (project / "pwned").exists()
    calls = [r for r in audit_records(project) if r["kind"] == "tool_call"]
    assert [(c["arguments"]["command"], c["decision"], c["approved_by"]) for c in calls] == [
        ("git status", "allow", "user:session"),
        ("git status --short", "allow", "user:session"),
        ("git status --porcelain", "deny", None),
        ("git status; touch pwned", "deny", None),
    ]
    assert calls[2]["rule"] == "flag --deny-command"
    results = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert "who said: no chaining" in results[3]


def test_a_granted_search_never_covers_a_command_in_its_options(project: Path,
                                                                 model_server: ModelServer):
    """The second outside review: `a` to `git grep TODO`, then `git grep -O'<shell>'` ran
    with no question (git runs the pager option's text through a shell)."""
    (project / "src").mkdir(exist_ok=True)
    (project / "src" / "keep.py").write_text("# TODO\n")
    hidden = "git grep --open-files-in-pager='rm -rf src; echo' TODO"
    for command in ("git grep TODO", hidden):
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("done")
    term = Terminal(ask(project, model_server, "search"), stdout_piped=True)
    term.at_question()
    term.type("a\r")
    term.wait(lambda lines: sum(line.startswith((QUESTION, NO_GRANT)) for line in lines) == 2,
              "second question")
    assert f"$ {hidden}" in term.lines() and term.lines()[-1] == NO_GRANT
    term.type("a\r")  # not on offer: asked again, never granted
    term.wait(lambda lines: any(line.startswith("answer y (yes), n (no), r") for line in lines),
              "the answers on offer")
    term.type("n\r")
    assert term.finish() == 0, term.text()
    assert (project / "src" / "keep.py").exists()
    calls = [r for r in audit_records(project) if r["kind"] == "tool_call"]
    assert [(c["decision"], c["approved_by"]) for c in calls] == [("allow", "user:session"),
                                                                   ("deny", None)]


def test_the_answer_is_printed_once_when_stdout_is_piped(project: Path,
                                                          model_server: ModelServer):
    model_server.reply("the-unique-answer")
    term = Terminal(ask(project, model_server, "--stream", "go"), stdout_piped=True)
    assert term.finish() == 0, term.text()
    assert term.proc.stdout is not None and term.proc.stdout.read() == b"the-unique-answer\n"
    assert "the-unique-answer" not in term.text()  # streamed live, then gone: not twice
    assert any(line.startswith("done ·") and "tokens" in line for line in term.lines())


def test_piped_requests_work_line_by_line(project: Path, model_server: ModelServer):
    model_server.reply("one").reply("two")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "-i",
                   stdin="first\n\n/usage\nsecond\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "one\ntwo\n"
    assert "Traceback" not in done.stderr and "2 model turns" not in done.stderr
    assert len(model_server.chat_requests) == 2


def test_an_approval_inside_the_repl_then_the_prompt_again(project: Path,
                                                            model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "note.txt", "content": "hi\n"})])
    model_server.reply("Wrote it.")
    term = Terminal(ask(project, model_server, "-i"))
    term.at_prompt()
    term.type("write a note\r")
    term.at_question()
    assert "write_file note.txt (new file, 1 line, 3 bytes)" in term.lines()
    term.type("y\r")
    term.wait(lambda lines: "Wrote it." in lines, "answer")
    term.at_prompt()
    assert (project / "note.txt").read_text() == "hi\n"
    term.type("\x04")  # Ctrl-D leaves
    assert term.finish() == 0, term.text()


def test_diff_and_undo_in_the_repl_of_a_bind_session(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("edit_file", {"path": "src/app.py", "old_text": "a + b",
                                                      "new_text": "a - b"})])
    model_server.reply("Edited.")
    term = Terminal(ask(project, model_server, "-i", "--yes"))
    term.at_prompt()
    term.type("/diff\r")
    term.wait(lambda lines: any("nothing changed yet" in line or "no changes in this session"
                                in line for line in lines), "no diff")
    term.at_prompt()
    term.type("make add subtract\r")
    term.wait(lambda lines: any(line.startswith("done ·") for line in lines), "answer")
    term.at_prompt()
    term.type("/diff\r")
    term.wait(lambda lines: "+    return a - b" in lines, "diff")
    term.at_prompt()
    lines = term.lines()
    assert "-    return a + b" in lines and "--- a/src/app.py" in lines
    term.type("/undo\r")  # the undo command's own question (it shows what it would do)
    # the question names the root, so a long tmp path wraps it over lines (pytest-xdist's)
    term.wait(lambda lines: "Undo these 1 changes" in "".join(lines[-4:])
              and "".join(lines[-4:]).rstrip().endswith("[y/n] (n):"), "undo's question")
    term.type("y\r")
    term.wait(lambda lines: any("restored" in line and "src/app.py" in line for line in lines),
              "undo")
    term.at_prompt()
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    term.type("/diff\r")
    term.wait(lambda lines: any("no changes in this session so far" in line for line in lines),
              "empty diff")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()


def test_diff_in_the_repl_of_a_copy_session_shows_the_pending_changes(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "notes.txt",
                                                       "content": "pending\n"})])
    model_server.reply("Wrote notes.")
    paged = project.parent / "paged"  # the pager shows it and keeps a copy, as `diff`'s does
    term = Terminal(ask(project, model_server, "-i", "--yes", "--workspace", "copy"),
                    env={"PAGER": f"tee {paged}"})
    term.at_prompt()
    term.type("write notes\r")
    term.wait(lambda lines: any(line.startswith("done ·") for line in lines), "answer")
    term.at_prompt()
    term.type("/diff\r")
    term.wait(lambda lines: "+pending" in lines, "diff")
    term.at_prompt()
    assert "+++ b/notes.txt" in term.lines() and not (project / "notes.txt").exists()
    assert b"+pending" in paged.read_bytes()
    term.type("/undo\r")
    term.wait(lambda lines: any("nothing of it to undo" in line for line in lines), "undo")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert not (project / "notes.txt").exists()  # still pending, as the summary says


def test_model_in_the_repl_refuses_a_name_the_server_lacks(project: Path,
                                                           model_server: ModelServer):
    model_server.model = "llama3:latest"
    model_server.reply("Answered by llama3.")
    term = Terminal(ask(project, model_server, "-i", "--model", "llama3:latest"))
    term.at_prompt()
    term.type("/model nosuch:7b\r")
    term.wait(lambda lines: any("the server does not have 'nosuch:7b'" in line
                                for line in lines), "refusal")
    term.at_prompt()
    assert any("still llama3:latest" in line for line in term.lines())
    term.type("/model llama3\r")  # Ollama's implicit tag
    term.wait(lambda lines: any("model is now llama3:latest" in line for line in lines),
              "switch")
    term.at_prompt()
    term.type("hello\r")
    term.wait(lambda lines: "Answered by llama3." in lines, "answer")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert model_server.last_chat.body["model"] == "llama3:latest"


# -- habits from claude, codex and aider ----------------------------------------------------------


def test_sandbox_agent_alone_at_a_terminal_opens_the_repl_and_says_how_to_resume(
        project: Path, model_server: ModelServer):
    model_server.reply("Hello from the REPL.")
    term = Terminal([str(SANDBOX_AGENT)], cwd=project,
                    env={"SANDBOX_AGENT_HOST": model_server.url})
    term.at_prompt()
    term.type("hi\r")
    term.wait(lambda lines: "Hello from the REPL." in lines, "answer")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    [name] = [p.name.removesuffix(".ndjson") for p in sessions_dir(project).glob("*.ndjson")]
    screen = "".join(term.lines())  # the long line is wrapped at the terminal's width
    assert screen.count("continue it with:") == 1
    assert (f"session {name} kept; continue it with: sandbox-agent ask --root {project} "
            f"--resume --session {name}") in screen, term.text()


def test_ask_without_a_query_at_a_terminal_opens_the_repl(project: Path,
                                                          model_server: ModelServer):
    term = Terminal(ask(project, model_server))
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert model_server.chat_requests == []


def test_auto_edit_writes_without_asking_and_asks_for_a_command(project: Path,
                                                               model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "notes.txt", "content": "hi\n"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    model_server.reply("Wrote notes; the command was declined.")
    term = Terminal([*ask(project, model_server, "--auto-edit"), "write notes, then touch"])
    term.at_question()
    assert any("run_shell_command needs approval" in line for line in term.lines())
    assert not any("write_file needs approval" in line for line in term.lines())
    term.type("n\r")
    assert term.finish() == 0, term.text()
    assert (project / "notes.txt").read_text() == "hi\n" and not (project / "made.txt").exists()
    calls = [r for r in audit_records(project) if r["kind"] == "tool_call"]
    assert [(r["tool"], r.get("approved_by")) for r in calls] == [
        ("write_file", "--auto-edit"), ("run_shell_command", None)]


def test_an_at_path_attaches_the_file_read_through_the_sandbox(project: Path,
                                                               model_server: ModelServer):
    model_server.reply("It adds.")
    term = Terminal(ask(project, model_server, "-i"))
    term.at_prompt()
    term.type("what does @src/app.py do? mail me at me@example.com\r")
    term.wait(lambda lines: "It adds." in lines, "answer")
    term.at_prompt()
    sent = model_server.last_chat.body["messages"][-1]["content"]
    assert sent.startswith("what does @src/app.py do? mail me at me@example.com\n\n")
    assert "[file @src/app.py, attached by the user" in sent and "def add(a, b):" in sent
    assert sent.count("[file @") == 1  # the address is not a mention
    for wrong in ("@nosuch.py", "@../secret.txt"):
        term.type(f"look at {wrong}\r")
        term.wait(lambda lines, w=wrong: any(line.startswith(f"error: cannot attach {w}")
                                             for line in lines), f"refusal of {wrong}")
        term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert len(model_server.chat_requests) == 1  # the refused requests were never sent
    assert SECRET not in json.dumps(model_server.chat_requests[0].body)


def _users(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


def test_clear_and_compact_in_the_repl_and_after_a_resume(project: Path,
                                                          model_server: ModelServer):
    for text in ("A1", "A2", "Two was about the tests.", "A3", "A4"):
        model_server.reply(text)
    term = Terminal(ask(project, model_server, "-i", "--session", "talk"))
    term.at_prompt()
    for request, answer in (("one", "A1"), ("/clear", "conversation cleared"), ("two", "A2"),
                            ("/compact", "Two was about the tests."), ("three", "A3")):
        term.type(f"{request}\r")
        term.wait(lambda lines, a=answer: any(a in line for line in lines), answer)
        term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    one, two, summary, three = model_server.chat_requests
    assert _users(one) == ["one"] and _users(two) == ["two"]  # /clear: "one" is not sent again
    assert "two" in summary.body["messages"][-1]["content"]  # what /compact summarized
    systems = [m["content"] for m in three.body["messages"] if m["role"] == "system"]
    assert any(s.endswith("Two was about the tests.") for s in systems)
    assert _users(three) == ["three"]

    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "--resume",
                   "--session", "talk", "four")
    assert done.returncode == 0, done.stderr
    assert _users(model_server.last_chat) == ["three", "four"]
    assert any(m["content"].endswith("Two was about the tests.")
               for m in model_server.last_chat.body["messages"] if m["role"] == "system")


def test_a_request_goes_on_after_a_trailing_backslash_or_alt_enter(project: Path,
                                                                   model_server: ModelServer):
    model_server.reply("Got three lines.")
    term = Terminal(ask(project, model_server, "-i"))
    term.at_prompt()
    term.type("first \\\r")  # a trailing backslash: the request goes on
    term.type("second\x1b\r")  # Alt-Enter: a new line
    term.type("third\r")
    term.wait(lambda lines: "Got three lines." in lines, "answer")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert _users(model_server.last_chat) == ["first \nsecond\nthird"]


def test_piped_requests_go_on_after_a_trailing_backslash(project: Path,
                                                        model_server: ModelServer):
    model_server.reply("One request.")
    done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), "-i",
                   stdin="line one \\\nline two\n")
    assert done.returncode == 0, done.stderr
    assert _users(model_server.last_chat) == ["line one \nline two"]


def test_resume_at_a_terminal_offers_a_session_picker(project: Path, model_server: ModelServer):
    for name in ("alpha", "beta"):
        model_server.reply(f"Answer in {name}.")
        done = run_cli("ask", "--root", project, *model_args(model_server, "ollama"),
                       "--session", name, f"request in {name}")
        assert done.returncode == 0, done.stderr
    model_server.reply("Back in alpha.")
    term = Terminal(ask(project, model_server, "--resume"))
    term.wait(lambda lines: bool(lines) and lines[-1].startswith("Resume which (1-2"), "picker")
    listed = [line for line in term.lines() if line[:4].strip().rstrip(".").isdigit()]
    assert [line.split()[1] for line in listed] == ["beta", "alpha"]  # latest first
    term.type("2\r")
    term.at_prompt()
    term.type("go on\r")
    term.wait(lambda lines: "Back in alpha." in lines, "answer")
    term.at_prompt()
    term.type("/exit\r")
    assert term.finish() == 0, term.text()
    assert _users(model_server.last_chat) == ["request in alpha", "go on"]
