"""The one declaration of each tool's arguments, which the host's pydantic models are built from.

The toolbox validates requests against it (wire.SPECS is derived from it); the host offers the
model, and validates its calls against, models made from it (executor/tools/builtin.py). Plain
classes and dicts: the toolbox is stdlib-only and does not import typing at run time.
"""

from __future__ import annotations

from .limits import LIST_GLOB_DEPTH, SEARCH_LIMIT

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from typing import Union

    Default = Union[str, int, bool, None]

STR, INT, BOOL, NUMBER, OBJECT, LIST = (
    "a string", "an integer", "true or false", "a number", "a JSON object", "a list")
"""Argument kinds, worded as the toolbox's error names them ("must be an integer")."""


class Arg:
    """One argument: its kind, whether it is required, its default, bounds and what the model
    reads about it. `host_only`: added by the host after an approval, never offered."""

    __slots__ = ("default", "doc", "high", "host_only", "kind", "low", "required")

    def __init__(self, kind: str, doc: str = "", *, required: bool = False,
                 default: Default = None, low: int | None = None, high: int | None = None,
                 host_only: bool = False) -> None:
        self.kind, self.doc, self.required, self.default = kind, doc, required, default
        self.low, self.high, self.host_only = low, high, host_only


_PATH = "File path relative to the project root."
_EXPECT = Arg(STR, host_only=True)  # sha256 the person was shown ("absent": no file)
_EXPECT_AFTER = Arg(STR, host_only=True)  # sha256 of what the approved call writes
TOOL_ARGS: dict[str, dict[str, Arg]] = {
    "read_file": {
        "path": Arg(STR, _PATH, required=True),
        "start_line": Arg(INT, "First line to return (1-based).", low=1),
        "end_line": Arg(INT, "Last line to return (inclusive).", low=1),
        # Lines one call shows at most, below the toolbox's own cap: the host's page for a
        # model with a small context window (the rest is named in the truncation note).
        "page_lines": Arg(INT, low=1, host_only=True),
    },
    "write_file": {
        "path": Arg(STR, _PATH, required=True),
        "content": Arg(STR, "The complete new file content.", required=True),
        "expect_sha256": _EXPECT, "expect_sha256_after": _EXPECT_AFTER,
    },
    "edit_file": {
        "path": Arg(STR, _PATH, required=True),
        "new_text": Arg(STR, "Replacement text (the whole file when creating).", required=True),
        "old_text": Arg(STR, "Exact text to replace; omit to create a new file."),
        "replace_all": Arg(BOOL, "Replace every occurrence of old_text.", default=False),
        "expect_sha256": _EXPECT, "expect_sha256_after": _EXPECT_AFTER,
    },
    "search_files": {
        "pattern": Arg(STR, "Regular expression to search for.", required=True),
        "path": Arg(STR, "Directory or file to search, relative to the root.", default="."),
        "max_results": Arg(INT, "Maximum matching lines returned.", default=100, low=1,
                           high=SEARCH_LIMIT),
    },
    "list_files": {
        "path": Arg(STR, "Directory to list, relative to the project root.", default="."),
        "glob": Arg(STR, "Only names matching this glob; omit it to list everything."),
        "depth": Arg(INT, "How many levels deep to list.", low=1, high=LIST_GLOB_DEPTH),
    },
    "run_shell_command": {
        "command": Arg(STR, "Shell command, run with sh -c in the project root.", required=True),
        # The model is offered whole seconds; the toolbox also takes a fraction (host probes).
        "timeout_seconds": Arg(NUMBER, "Kill the command after this many seconds (default: the "
                                       "session's timeout).", low=1, high=3600),
    },
}
"""Each tool's arguments, in the order the model is offered them. The toolbox checks kinds and
required-ness (wire.validate) and its handlers' defaults match these
(tests/unit/test_tool_contract.py); the host's models also check the bounds."""

