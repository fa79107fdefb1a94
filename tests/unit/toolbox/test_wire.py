"""The toolbox: Requests checked against the contract: clear errors for bad arguments."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.toolbox.boxes import Box, failed


def test_args_must_be_an_object(box: Box):
    failed(box.request({"id": 9, "tool": "read_file", "args": ["README.md"]}), "JSON object")
    failed(box.request({"id": 10, "tool": "list_files", "args": []}), "JSON object")
    assert box.request({"id": 11, "tool": "list_files", "args": None})["ok"]
    box.alive()


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("read_file", {}, "missing required argument 'path'"),
        ("read_file", {"path": 5}, "argument 'path' must be a string"),
        ("read_file", {"path": "README.md", "start_line": "x"},
         "argument 'start_line' must be an integer"),
        ("read_file", {"path": "README.md", "start_line": True},
         "argument 'start_line' must be an integer"),
        ("read_file", {"path": "README.md", "start_line": 0}, "'start_line' must be 1 or more"),
        ("read_file", {"path": "README.md", "bogus": 1, "zz": 2},
         "unknown arguments for read_file: bogus, zz; allowed: path, start_line, end_line"),
        ("write_file", {"path": "x.txt"}, "missing required argument 'content'"),
        ("edit_file", {"path": "README.md", "old_text": "#", "new_text": "!",
                       "replace_all": "yes"}, "argument 'replace_all' must be true or false"),
        ("search_files", {"pattern": "x", "max_results": 0}, "between 1 and 1000"),
        ("search_files", {"pattern": ""}, "pattern is empty"),
        ("list_files", {"depth": 0}, "'depth' must be 1 or more"),
        ("run_shell_command", {"command": 42}, "argument 'command' must be a string"),
        ("run_shell_command", {"command": "true", "timeout_seconds": "5"},
         "argument 'timeout_seconds' must be a number"),
        ("run_shell_command", {"command": "true", "timeout_seconds": 0}, "more than 0"),
        ("run_shell_command", {"command": "  "}, "command is empty"),
        ("frobnicate", {}, "unknown tool 'frobnicate'; available: read_file, write_file, "
                           "edit_file, search_files, list_files, run_shell_command"),
    ],
)
def test_bad_arguments_are_clear_errors(box: Box, tool: str, args: dict[str, Any], message: str):
    failed(box.call(tool, **args), message)
    box.alive()

