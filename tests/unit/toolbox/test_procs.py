"""The toolbox streams a running command's output as progress lines, only when asked."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tests.unit import toolbox_view as toolbox


def serve_one(root: Path, request: dict[str, object]) -> tuple[list[dict], dict]:
    """(progress lines written, the response) for one request to a toolbox on `root`."""
    ctx = toolbox.Context(toolbox.parse_args(["--root", str(root), "--no-track"]))
    out = io.BytesIO()
    reply, _ = toolbox.respond(ctx, json.dumps(request).encode(), out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return lines, reply


def test_output_comes_as_progress_before_the_response(tmp_path: Path) -> None:
    command = "printf 'one\\n'; sleep 0.5; printf 'two\\n' >&2; printf 'th'; printf 'ree\\n'"
    lines, reply = serve_one(tmp_path, {"id": 7, "tool": "run_shell_command", "progress": True,
                                         "args": {"command": command}})
    assert reply["ok"] and reply["id"] == 7 and "one\nthree" in reply["output"]
    assert all(line["id"] == 7 and set(line) == {"id", "progress"} for line in lines)
    streamed = {"stdout": "", "stderr": ""}
    for line in lines:
        streamed[line["progress"]["stream"]] += line["progress"]["text"]
    assert streamed == {"stdout": "one\nthree\n", "stderr": "two\n"}
    assert lines[0]["progress"] == {"stream": "stdout", "text": "one\n", "dropped": 0}


def test_no_progress_unless_asked(tmp_path: Path) -> None:
    lines, reply = serve_one(tmp_path, {"id": 1, "tool": "run_shell_command",
                                         "args": {"command": "echo hi"}})
    assert lines == [] and reply["ok"]
    lines, _ = serve_one(tmp_path, {"id": 2, "tool": "read_file", "progress": True,
                                     "args": {"path": "nope"}})
    assert lines == []


def test_a_flood_is_rate_limited_to_the_newest_text(tmp_path: Path) -> None:
    command = "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"
    lines, reply = serve_one(tmp_path, {"id": 3, "tool": "run_shell_command", "progress": True,
                                         "args": {"command": command}})
    assert reply["ok"]
    assert sum(len(line["progress"]["text"]) for line in lines) <= 4096 * len(lines)
    assert all(len(line["progress"]["text"]) <= toolbox.PROGRESS_CHARS for line in lines)
    assert lines[-1]["progress"]["text"].endswith("line-2999\n")  # the newest is never lost


def test_bytes_split_inside_a_character_are_decoded_whole(tmp_path: Path) -> None:
    command = "printf '\\303'; sleep 0.4; printf '\\251\\n'"  # é in two writes
    lines, _ = serve_one(tmp_path, {"id": 4, "tool": "run_shell_command", "progress": True,
                                     "args": {"command": command}})
    assert "".join(line["progress"]["text"] for line in lines) == "é\n"
