"""Listing sessions from the header and the tail: the same rows as reading each file whole,
without parsing a whole file, and the same table as Rich lays out into a pipe."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from executor import session_index
from executor.cli.listing import plain_table
from executor.messages import Message, ToolCall
from executor.session import (
    COMPACTED_NOTE,
    CONTEXT_CLEARED,
    CONTEXT_COMPACTED,
    NdjsonSessionStore,
    SessionWarning,
    list_sessions,
    read_session,
    run_status,
)
from executor.session_index import summary_row, summary_rows

CLI = str(Path(sys.executable).parent / "sandbox-agent")


def whole_file_row(path: Path) -> dict[str, object]:
    """The row as listings computed it before summaries: every record read and validated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)
        contents = read_session(path)
    messages, last = contents.messages, contents.messages[-1] if contents.messages else None
    text = last.content if last else ""
    if last and not text.strip() and last.tool_calls:
        text = "→ " + ", ".join(f"{c.name}({json.dumps(c.arguments)})" for c in last.tool_calls)
    text = " ".join(text.split())
    return {"turns": sum(1 for m in messages if m.role == "assistant"),
            "status": run_status(contents.entries), "model": contents.header.model,
            "provider": contents.header.provider, "started_at": contents.header.started_at,
            "last_message": text if len(text) <= 72 else text[:71] + "…",
            "parent_session": getattr(contents.header, "parent_session", None) or None}


def call(n: int) -> ToolCall:
    return ToolCall(id=f"c{n}", name="read_file", arguments={"path": f"src/m{n}.py"})


def a_run(store: NdjsonSessionStore, request: str, *, end: str | None = "ok",
          output: str = "x = 1\n" * 20, calls: int = 2) -> None:
    store.append(Message.user(request))
    for n in range(calls):
        store.append(Message.assistant("", [call(n)]))
        store.append(Message.tool(call(n), output))
    store.append(Message.assistant(f"done with {request}"))
    if end is not None:
        store.record_event("run_end", status=end, turns=calls + 1)


def finished(store: NdjsonSessionStore) -> None:
    a_run(store, "first")


def two_runs_the_last_unfinished(store: NdjsonSessionStore) -> None:
    a_run(store, "first")
    a_run(store, "second", end=None)


def cleared(store: NdjsonSessionStore) -> None:
    a_run(store, "first")
    store.record_event(CONTEXT_CLEARED)


def compacted_then_a_call(store: NdjsonSessionStore) -> None:
    a_run(store, "first", end="max_turns")
    store.record_event(CONTEXT_COMPACTED, summary="they read two files")
    store.append(Message.assistant("", [call(9)]))


def a_child_resumed_with_another_model(store: NdjsonSessionStore) -> None:
    store.update_header(parent_session="parent-1")
    a_run(store, "first", end="error")
    again = NdjsonSessionStore.open(store.root, store.name)
    again.read()
    again.update_header(provider="openai")
    a_run(again, "second")


def a_long_run_past_a_checkpoint(store: NdjsonSessionStore) -> None:
    a_run(store, "first")
    a_run(store, "big", end=None, output="y" * 40_000, calls=10)  # 400 KB: a summary mid-run


def opened_without_reading(store: NdjsonSessionStore) -> None:
    a_run(store, "first")
    a_run(NdjsonSessionStore.open(store.root, store.name), "second")  # no tally: no summary


SCENARIOS: list[Callable[[NdjsonSessionStore], None]] = [
    finished, two_runs_the_last_unfinished, cleared, compacted_then_a_call,
    a_child_resumed_with_another_model, a_long_run_past_a_checkpoint, opened_without_reading,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_the_tail_gives_the_row_reading_the_whole_file_gives(
        tmp_path: Path, scenario: Callable[[NdjsonSessionStore], None]) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="s", model="qwen", provider="ollama")
    scenario(store)
    row = summary_row(store.path)
    assert {key: row[key] for key in whole_file_row(store.path)} == whole_file_row(store.path)
    assert row["name"] == "s" and row["path"] == str(store.path)


def test_rows_a_run_and_its_summary_are_written_together(tmp_path: Path) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="s", model="qwen", provider="ollama")
    compacted_then_a_call(store)
    records = [json.loads(line) for line in store.path.read_text().splitlines()]
    kinds = [r.get("event", r["type"]) for r in records]
    assert kinds[kinds.index("run_end") + 1] == "summary"
    tally = records[kinds.index("summary")]["tally"]
    assert (tally["turns"], tally["status"], tally["last"]) == (3, "max_turns", "done with first")
    assert store.load()[0] == Message.system(COMPACTED_NOTE + "they read two files")
    assert list_sessions(tmp_path)[0].last_message.startswith('→ read_file({"path": "src/m9.py"')


def test_files_written_before_summaries_are_folded_whole(tmp_path: Path) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="old", model="qwen", provider="ollama")
    lines = store.path.read_bytes() + b"".join(
        (json.dumps({"type": "message", "ts": "", **m.model_dump(exclude_defaults=True)})
         + "\n").encode()
        for m in [Message.user("fix it"), Message.assistant("fixed")])
    store.path.write_bytes(lines)
    row = summary_row(store.path)
    assert (row["turns"], row["status"], row["last_message"]) == (1, "ok", "fixed")


def test_what_is_before_the_last_summary_is_not_read(tmp_path: Path) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="s", model="qwen", provider="ollama")
    a_run(store, "first")
    data = store.path.read_bytes()
    second_line = data.index(b"\n") + 1
    store.path.write_bytes(data[:second_line] + b"{broken\n" + data[second_line:])
    assert summary_row(store.path)["status"] == "ok"  # `show` is what reports the broken line
    a_run(store, "second", end=None)
    store.path.write_bytes(store.path.read_bytes() + b"{broken\n" + b"{}\n")
    row = summary_row(store.path)
    assert row["status"] == "unreadable" and "not valid JSON" in str(row["last_message"])


def test_a_big_file_without_a_summary_near_its_end_is_not_folded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="s", model="qwen", provider="ollama")
    a_run(NdjsonSessionStore.open(tmp_path, "s"), "unsummarized", output="z" * 9000)
    monkeypatch.setattr(session_index, "_CHUNK", 1024)
    monkeypatch.setattr(session_index, "TAIL_CAP", 4096)
    assert summary_row(store.path)["status"] == "ok"  # under FULL_CAP: folded whole
    monkeypatch.setattr(session_index, "FULL_CAP", 8192)
    row = summary_row(store.path)
    assert row["status"] == "unreadable" and "no summary in its last" in str(row["last_message"])


def test_a_header_of_a_newer_version_is_unreadable(tmp_path: Path) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="new", model="qwen")
    header = json.loads(store.path.read_text())
    store.path.write_text(json.dumps({**header, "version": 2}) + "\n")
    (row,) = summary_rows(tmp_path)
    assert row["status"] == "unreadable" and "format version 2" in str(row["last_message"])


# --- the table without Rich ---------------------------------------------------------------------


def rich_table(rows: list[tuple[str, ...]], width: int) -> str:
    from rich.console import Console

    from executor.cli.sessions import _table

    out = io.StringIO()
    Console(file=out, width=width, highlight=False, soft_wrap=True, emoji=False).print(
        _table(rows))
    return out.getvalue()


def a_row(last: str, name: str = "s1", turns: str = "3") -> tuple[str, ...]:
    return (name, "2026-12-02 01:00:00", turns, "ok", "qwen (ollama)", last)


@pytest.mark.parametrize("rows", [
    [a_row("It prints hello.")],
    [a_row("→ read_file({\"path\": \"a\\u202e.py\"})", turns="12"), a_row("", name="longer-name")],
    [a_row("x" * 71 + "…"), a_row("[red]not markup[/red] \\x1b[2J")],
])
def test_the_plain_table_is_what_rich_prints_into_a_pipe(
        rows: list[tuple[str, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert plain_table(rows) == rich_table(rows, 200)


@pytest.mark.parametrize("last", ["汉字 are two columns wide", "e\u0301 combines", "x" * 100])
def test_rich_lays_out_what_the_plain_table_cannot(
        last: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert plain_table([a_row(last)]) is None


def run_cli(root: Path, env: dict[str, str]) -> str:
    code = (f"import sys\nsys.argv = [{CLI!r}, 'sessions', '--root', {str(root)!r}]\n"
            "from executor.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    loaded = {m.split(".")[0] for m in done.stderr.split()}
    return done.stdout + ("" if loaded & {"typer", "pydantic", "rich"} else "(quick)")


def test_a_plain_listing_runs_without_typer_and_prints_what_typer_would(tmp_path: Path) -> None:
    env: dict[str, str] = {}  # the state dir is this test's (tests/conftest.py)
    for name in ("older", "newer"):
        finished(NdjsonSessionStore.create(tmp_path, name=name, model="qwen", provider="x"))
    quick = run_cli(tmp_path, env)
    by_typer = run_cli(tmp_path, {**env, "TTY_COMPATIBLE": "0"})  # a pipe, but Rich's table
    assert quick.endswith("(quick)") and not by_typer.endswith("(quick)")
    assert quick.removesuffix("(quick)") == by_typer
    assert by_typer.index("newer") < by_typer.index("older") and "done with first" in by_typer


@pytest.mark.parametrize("calls", [
    [ToolCall(id="w", name="write_file", arguments={"path": "a.py", "content": "x = 1\n" * 5000})],
    [call(1), ToolCall(id="g", name="grep", arguments={"pattern": "  a   b  " * 30})],
    [ToolCall(id="r", name="read_file", arguments={"path": " " * 500 + "end", "q": "é\u202e"})],
])
def test_a_call_is_previewed_from_the_start_of_its_arguments_alone(
        tmp_path: Path, calls: list[ToolCall]) -> None:
    store = NdjsonSessionStore.create(tmp_path, name="s", model="qwen", provider="ollama")
    store.extend([Message.user("go"), Message.assistant("", calls)])
    store.record_event("run_end", status="ok", turns=1)
    assert summary_row(store.path)["last_message"] == whole_file_row(store.path)["last_message"]
