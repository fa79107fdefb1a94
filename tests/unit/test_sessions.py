"""Sessions: NDJSON files on disk, crash safety, listing, and the `sessions` CLI sub-app."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from executor.cli.sessions import app as sessions_app
from executor.errors import (
    ConfigError,
    SessionCorruptError,
    SessionError,
    SessionNotFoundError,
)
from executor.messages import Message, ToolCall
from executor.protocols import SessionStore
from executor.session import (
    NdjsonSessionStore,
    TornLineWarning,
    generate_name,
    list_sessions,
    session_names,
    sessions_dir,
)
from executor.state import ensure_project_dir

REPO = Path(__file__).resolve().parents[2]


def conversation() -> list[Message]:
    call = ToolCall(id="call_1", name="read_file", arguments={"path": "src/app.py", "start": 1})
    return [
        Message.system("You are a coding agent."),
        Message.user("What does app.py do?"),
        Message.assistant("", [call]),
        Message.tool(call, "\n".join(f"{n}: line {n}" for n in range(1, 41))),
        Message.assistant("It prints hello.\u2028(with a line separator)"),
    ]


def new_store(root: Path, name: str = "s1", **header: str) -> NdjsonSessionStore:
    return NdjsonSessionStore.create(root, name=name, model="qwen", provider="ollama", **header)


def lines(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\n")


def test_session_files_are_private(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    assert store.path == sessions_dir(tmp_path) / "s1.ndjson"
    assert tmp_path.resolve() not in store.path.parents  # state never lives in the project
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


# --- format and round trip -----------------------------------------------------------------------


def test_round_trip_and_readable_format(tmp_path: Path) -> None:
    store = new_store(
        tmp_path, image="sandbox-agent:latest", image_digest="sha256:abababababababababababababababababababababababababababababababab", mount_mode="ro"
    )
    for message in conversation():
        store.append(message)
    assert isinstance(store, SessionStore)
    assert NdjsonSessionStore.open(tmp_path, "s1").load() == conversation()
    records = [json.loads(line) for line in lines(store.path) if line]
    header = records[0]
    assert header["type"] == "header" and header["version"] == 1 and header["name"] == "s1"
    assert header["image_digest"] == "sha256:abababababababababababababababababababababababababababababababab" and header["mount_mode"] == "ro"
    assert header["root"] == str(tmp_path.resolve()) and header["started_at"].endswith("Z")
    assert [r["type"] for r in records[1:]] == ["message"] * 5
    assert records[3]["tool_calls"][0] == {
        "id": "call_1", "name": "read_file", "arguments": {"path": "src/app.py", "start": 1}
    }  # fmt: skip
    assert records[4]["tool_call_id"] == "call_1" and records[4]["ts"].endswith("Z")
    assert len(lines(store.path)) == 7  # header, 5 messages, '' after the final newline


def test_unknown_record_types_are_skipped(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.append(Message.user("one"))
    with store.path.open("a") as out:
        out.write(json.dumps({"type": "checkpoint", "from": "a newer version"}) + "\n")
    store.append(Message.user("two"))
    assert [m.content for m in store.load()] == ["one", "two"]


def test_events_update_the_header_without_rewriting_it(tmp_path: Path) -> None:
    store = new_store(tmp_path, container="sandbox-agent-00000000a01d", image_digest="sha256:0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d")
    first_line = lines(store.path)[0]
    store.append(Message.user("hi"))
    store.record_event("resumed", pid=123)
    store.update_header(container="sandbox-agent-00000000beef")
    assert store.header.container == "sandbox-agent-00000000beef"
    assert NdjsonSessionStore.open(tmp_path, "s1").header.container == "sandbox-agent-00000000beef"
    reopened = NdjsonSessionStore.open(tmp_path, "s1")
    assert reopened.read().header.container == "sandbox-agent-00000000beef"
    assert reopened.header.image_digest == "sha256:0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
    assert lines(store.path)[0] == first_line
    assert [e.event for e in reopened.read().entries] == [None, "resumed", "header_update"]
    assert reopened.load() == [Message.user("hi")]
    for fixed in ("name", "id", "started_at"):
        with pytest.raises(ConfigError, match="cannot change"):
            store.update_header(**{fixed: "other"})


# --- crash safety --------------------------------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from executor.messages import Message
from executor.session import NdjsonSessionStore

store = NdjsonSessionStore.create(Path(sys.argv[1]), name="killed", model="m")
filler = "x" * int(sys.argv[2])
i = 0
while True:
    store.append(Message.user(f"msg {i} {filler}"))
    i += 1
"""


def _partial_line_visible(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    finally:
        os.close(fd)


def _lines_written(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def kill_writer(root: Path, filler: int, mid_line: bool) -> Path:
    """Start a child appending messages in a loop and SIGKILL it: after 200 lines, or as soon
    as a line is visibly half-written (the kill then lands inside that write)."""
    path = sessions_dir(root) / "killed.ndjson"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(filler)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (_partial_line_visible(path) if mid_line else _lines_written(path) > 200):
            assert child.poll() is None, "the writer died on its own"
            assert time.monotonic() < deadline, "the writer is too slow"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return path


def test_sigkill_between_appends_loses_nothing_written(tmp_path: Path) -> None:
    path = kill_writer(tmp_path, 10, mid_line=False)
    whole = path.read_bytes().count(b"\n") - 1  # complete lines, minus the header
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        messages = NdjsonSessionStore.open(tmp_path, "killed").load()
    assert whole >= 200
    assert [m.content.split()[1] for m in messages] == [str(i) for i in range(whole)]
    assert all(w.category is TornLineWarning for w in caught)


def test_sigkill_inside_a_write_loses_only_that_line(tmp_path: Path) -> None:
    for _attempt in range(5):  # the write may still finish before the signal lands
        path = kill_writer(tmp_path, 4_000_000, mid_line=True)
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            break
        path.unlink()
    assert not data.endswith(b"\n"), "could not kill the writer inside a write"
    lines = data.split(b"\n")  # the header, whole messages (and summary records), the torn one
    whole = sum(1 for line in lines[1:-1] if line.startswith(b'{"type": "message"'))
    with pytest.warns(TornLineWarning, match=f"line {len(lines)} was cut off"):
        messages = NdjsonSessionStore.open(tmp_path, "killed").load()
    assert [m.content.split()[1] for m in messages] == [str(i) for i in range(whole)]
    store = NdjsonSessionStore.open(tmp_path, "killed")
    store.append(Message.user("after the crash"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the torn fragment is gone: no warning any more
        again = store.load()
    assert again[:-1] == messages and again[-1].content == "after the crash"


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.extend(conversation()[:2])
    with store.path.open("ab") as out:
        out.write(
            b'{"type": "message", "ts": "2026-01-01T00:00:00.000Z", "role": "assistant", "con'
        )
    with pytest.warns(TornLineWarning, match="line 4 was cut off"):
        messages = store.load()
    assert messages == conversation()[:2]
    assert store.warnings == [
        f"{store.path}: line 4 was cut off (the writer was killed); skipped it"
    ]


def test_a_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.extend(conversation())
    text = lines(store.path)
    text[3] = text[3][:20]
    store.path.write_text("\n".join(text))
    with pytest.raises(SessionCorruptError) as caught:
        store.load()
    assert str(store.path) in caught.value.message and "line 4" in caught.value.message
    assert caught.value.exit_code == 41


def test_an_invalid_message_in_the_middle_is_corrupt(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.extend(conversation())
    text = lines(store.path)
    text[2] = json.dumps({"type": "message", "role": "wizard", "content": "?"})
    store.path.write_text("\n".join(text))
    with pytest.raises(SessionCorruptError, match="line 3"):
        store.load()


def test_appending_after_a_torn_line_starts_a_clean_line(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.append(Message.user("before"))
    fragment = b'{"type": "message", "role": "user", "content": "tor'
    with store.path.open("ab") as out:
        out.write(fragment)
    store.append(Message.user("after"))
    records = [json.loads(line) for line in lines(store.path) if line]  # every line is JSON
    assert records[-2]["event"] == "torn_line_dropped" and records[-2]["data"]["bytes"] == len(
        fragment
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [m.content for m in store.load()] == ["before", "after"]


def test_a_last_record_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    with store.path.open("ab") as out:
        out.write(json.dumps({"type": "message", "role": "user", "content": "whole"}).encode())
    assert [m.content for m in store.load()] == ["whole"]
    store.append(Message.user("next"))
    assert [m.content for m in store.load()] == ["whole", "next"]


def test_a_session_cut_off_at_creation_is_reported_not_loaded(tmp_path: Path) -> None:
    sessions = ensure_project_dir(tmp_path) / "sessions"
    sessions.mkdir()
    (sessions / "cut.ndjson").write_bytes(b'{"type": "header", "vers')
    with pytest.raises(SessionCorruptError, match="no session header"):
        NdjsonSessionStore.open(tmp_path, "cut")
    (row,) = list_sessions(tmp_path)
    assert row.name == "cut" and row.last_message.startswith("(unreadable")


def test_ten_thousand_messages_load_whole(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.extend(conversation()[1:] * 2500)
    messages = NdjsonSessionStore.open(tmp_path, "s1").load()
    assert len(messages) == 10_000 and messages[-1] == conversation()[-1]


# --- names, listing, latest, remove ---------------------------------------------------------------


def test_names_are_generated_validated_and_unique(tmp_path: Path) -> None:
    name = generate_name()
    assert len(name) == 20 and name[8] == "-" and name[15] == "-"
    assert NdjsonSessionStore.create(tmp_path).name != NdjsonSessionStore.create(tmp_path).name
    new_store(tmp_path, "taken")
    with pytest.raises(ConfigError, match="already exists"):
        new_store(tmp_path, "taken")
    for bad in ("../escape", ".hidden", "a/b", ""):
        with pytest.raises(ConfigError, match="invalid session name"):
            new_store(tmp_path, bad)


def test_open_unknown_session_lists_the_known_names(tmp_path: Path) -> None:
    new_store(tmp_path, "alpha")
    new_store(tmp_path, "beta")
    with pytest.raises(SessionNotFoundError) as caught:
        NdjsonSessionStore.open(tmp_path, "gamma")
    assert caught.value.fix == "known sessions: alpha, beta" and caught.value.exit_code == 4


def test_listing_is_newest_first_with_turns_and_preview(tmp_path: Path) -> None:
    for name in ("b-first", "c-second", "a-third"):
        store = new_store(tmp_path, name)
        time.sleep(0.002)  # started_at has millisecond resolution
    store.extend(conversation())
    store.append(Message.user("and now " + "very " * 40 + "long"))
    rows = store.list()
    assert [r.name for r in rows] == ["a-third", "c-second", "b-first"]
    assert rows[0].turns == 2 and rows[1].turns == 0
    assert rows[0].model == "qwen" and rows[0].provider == "ollama"
    assert rows[0].last_message.startswith("and now very") and rows[0].last_message.endswith("…")
    assert len(rows[0].last_message) == 72


def test_preview_of_a_tool_call(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.extend(conversation()[:3])
    assert list_sessions(tmp_path)[0].last_message.startswith('→ read_file({"path": "src/app.py"')


def test_latest_is_the_most_recently_written(tmp_path: Path) -> None:
    with pytest.raises(SessionNotFoundError):
        NdjsonSessionStore.latest(tmp_path)
    old = new_store(tmp_path, "old")
    new = new_store(tmp_path, "new")
    os.utime(old.path, (1_500_000_000, 1_500_000_000))
    os.utime(new.path, (1_000_000_000, 1_000_000_000))
    assert NdjsonSessionStore.latest(tmp_path).name == "old"
    new.append(Message.user("resumed"))  # writing makes it the latest
    assert NdjsonSessionStore.latest(tmp_path).name == "new"


def test_remove(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.remove()
    assert not store.path.exists() and session_names(tmp_path) == []
    with pytest.raises(SessionNotFoundError):
        store.remove()


# --- the CLI sub-app -----------------------------------------------------------------------------

cli = typer.Typer()
cli.add_typer(sessions_app, name="sessions")
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    # wide, whatever the test process's terminal is (a pytest-xdist worker's says 80)
    result = runner.invoke(cli, ["sessions", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_cli_lists_newest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from executor.cli.common import out_console, real_console

    # the console of this process keeps the width it was made with (COLUMNS of whichever
    # test first printed, in a pytest-xdist worker): this table is read 200 columns wide
    monkeypatch.setattr(real_console(out_console), "width", 200)
    for name in ("older", "newer"):
        new_store(tmp_path, name).extend(conversation())
        time.sleep(0.002)
    code, out, _ = run("--root", str(tmp_path))
    assert code == 0
    assert out.index("newer") < out.index("older")
    assert "qwen (ollama)" in out and "It prints hello." in out


def test_cli_lists_as_json(tmp_path: Path) -> None:
    new_store(tmp_path, "one").extend(conversation())
    code, out, _ = run("--root", str(tmp_path), "--json")
    (row,) = json.loads(out)
    assert code == 0 and row["name"] == "one" and row["model"] == "qwen"
    assert (row["turns"], row["status"]) == (2, "ok")  # model turns, as `ask` counts them


def test_cli_lists_nothing_when_there_are_no_sessions(tmp_path: Path) -> None:
    assert run("--root", str(tmp_path)) == (0, "", f"no sessions in {tmp_path}\n")
    assert json.loads(run("--root", str(tmp_path), "--json")[1]) == []


def test_cli_uses_the_current_directory_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_store(tmp_path, "here")
    monkeypatch.chdir(tmp_path)
    assert "here" in run()[1]


def test_cli_shows_a_readable_transcript(tmp_path: Path) -> None:
    new_store(tmp_path, "s").extend(conversation())
    code, out, _ = run("show", "s", "--root", str(tmp_path))
    assert code == 0
    assert "session s" in out and "user\n  What does app.py do?" in out
    assert '→ read_file(path="src/app.py", start=1)' in out
    assert "tool read_file (call_1)" in out and "12: line 12" in out
    assert "13: line 13" not in out and "28 more lines" in out
    full = run("show", "s", "--full", "--root", str(tmp_path))[1]
    assert "40: line 40" in full


def test_cli_root_may_come_before_the_subcommand(tmp_path: Path) -> None:
    new_store(tmp_path, "s").extend(conversation())
    assert run("--root", str(tmp_path), "show", "s")[0] == 0


def test_cli_show_warns_about_a_torn_line(tmp_path: Path) -> None:
    store = new_store(tmp_path, "s")
    store.extend(conversation())
    with store.path.open("ab") as stream:
        stream.write(b'{"type": "mess')
    code, out, err = run("show", "s", "--root", str(tmp_path))
    assert code == 0 and "It prints hello." in out
    assert err.startswith("warning: ") and "line 7 was cut off" in err


def test_cli_show_errors(tmp_path: Path) -> None:
    new_store(tmp_path, "s").extend(conversation())
    code, _, err = run("show", "nope", "--root", str(tmp_path))
    assert code == 4 and "no session named 'nope'" in err and "known sessions: s" in err
    path = sessions_dir(tmp_path) / "s.ndjson"
    path.write_text(path.read_text().replace('"role": "user"', '"role": user', 1))
    code, _, err = run("show", "s", "--root", str(tmp_path))
    assert code == 41 and "line 3" in err and "Traceback" not in err


def test_cli_rm(tmp_path: Path) -> None:
    new_store(tmp_path, "gone")
    new_store(tmp_path, "kept")
    code, _, err = run("rm", "gone", "--root", str(tmp_path))
    assert code == 0 and "removed session gone" in err
    assert session_names(tmp_path) == ["kept"]
    assert run("rm", "gone", "--root", str(tmp_path))[0] == 4


def test_header_values_the_controller_acts_on_are_validated(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_header(container="sandbox-agent-/../../../../tmp/x/pwned",
                        sandbox_id="../../x", image_digest="sha256:../../evil", mount_mode="rw")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        header = NdjsonSessionStore.open(tmp_path, "s1").read().header
    assert len([w for w in caught if "ignored header field" in str(w.message)]) == 3
    assert (header.container, header.sandbox_id, header.image_digest) == ("", "", "")
    assert header.mount_mode == "rw"


def test_a_symlink_in_place_of_a_session_file_is_not_followed(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    target = tmp_path / "bashrc"
    target.write_text("original\n")
    store.path.unlink()
    store.path.symlink_to(target)
    with pytest.raises(SessionError):
        store.append(Message.user("$(id > /tmp/x)"))
    assert target.read_text() == "original\n"
    assert "s1" not in session_names(tmp_path)
