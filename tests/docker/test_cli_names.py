"""File names that are not UTF-8, through the CLI: the model reads them in a form it can pass
back (`caf\\xe9.txt`, docs/TOOLS.md), every path tool takes that form, and the terminal shows
the same form, inert."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.docker.cli_support import ask, explain
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def test_a_name_that_is_not_utf8_is_listed_found_read_and_written_back(
        workdir: Path, model_server: ModelServer):
    root = os.fsencode(workdir / "proj")
    os.makedirs(os.path.join(root, b"d\xff"))
    with open(os.path.join(root, b"caf\xe9.txt"), "wb") as out:
        out.write(b"needle one\n")
    with open(os.path.join(root, b"d\xff", b"x.txt"), "wb") as out:
        out.write(b"needle two\n")
    with open(os.path.join(root, b"lit\\xe9.txt"), "wb") as out:  # ASCII that looks escaped
        out.write(b"needle three\n")
    model_server.reply(tool_calls=[Call("list_files", {}),
                                   Call("search_files", {"pattern": "needle"})])
    model_server.reply(tool_calls=[
        Call("read_file", {"path": "caf\\xe9.txt"}),
        Call("read_file", {"path": "lit\\\\xe9.txt"}),
        Call("edit_file", {"path": "caf\\xE9.txt", "old_text": "one", "new_text": "1"}),
        Call("write_file", {"path": "d\\xff/new\\xfe.txt", "content": "made\n"})])
    model_server.reply("done")

    done = ask(Path(os.fsdecode(root)), model_server, "ollama", "--yes")

    assert done.returncode == 0, explain(done)
    results = [m["content"] for m in model_server.last_chat.body["messages"]
               if m["role"] == "tool"]
    listed, found, read, literal, edited, wrote = results
    assert listed.splitlines() == ["caf\\xe9.txt", "d\\xff/", "d\\xff/x.txt",
                                   "lit\\\\xe9.txt"], listed
    assert "caf\\xe9.txt:1:needle one" in found and "d\\xff/x.txt:1:needle two" in found, found
    assert "lit\\\\xe9.txt:1:needle three" in found and "passed over" not in found, found
    assert "needle one" in read and "needle three" in literal, (read, literal)
    assert "1 replacement" in edited and "wrote 5 bytes" in wrote, (edited, wrote)
    assert "\ufffd" not in "".join(results)
    with open(os.path.join(root, b"caf\xe9.txt"), "rb") as f:
        assert f.read() == b"needle 1\n"
    with open(os.path.join(root, b"d\xff", b"new\xfe.txt"), "rb") as f:
        assert f.read() == b"made\n"
    terminal = done.stdout + done.stderr
    assert "d\\xff/new\\xfe.txt" in terminal and "caf\\xe9.txt" in terminal, explain(done)
    assert "\ufffd" not in terminal and "\\udc" not in terminal, explain(done)
    assert not CONTROL.search(terminal), explain(done)
