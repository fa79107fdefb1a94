"""`@path` in a request attaches that file, as Claude Code and Aider do.

Each `@path` (at the start of a word: `a@b.c` is an address, not a mention) is read with the
sandbox's own `read_file`, never by opening the path on the host: the same rules as the model's
reads (inside the project, no link out, protected paths refused). The file is added after the
request as read_file shows it. A mention that cannot be read refuses the request with one line
(ConfigError) before the model is asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from executor.errors import ConfigError
from executor.messages import ToolResult

MENTION = re.compile(r"(?<![\w@])@([^\s@`]+)")
"""`@path` at the start of a word."""
_TRAILING = ".,;:!?)]}'\""
"""Punctuation after a mention that is the sentence's, not the path's."""

Reader = Callable[[str], ToolResult]
"""Reads one path through the sandbox (`read_file`)."""


def mentioned(query: str) -> list[str]:
    """The paths `query` mentions with `@`, in order, each once."""
    found: list[str] = []
    for match in MENTION.finditer(query):
        path = match.group(1).rstrip(_TRAILING)
        if path and path not in found:
            found.append(path)
    return found


def with_attachments(query: str, read: Reader) -> tuple[str, list[str]]:
    """(the request with every mentioned file added after it, the paths attached)."""
    paths = mentioned(query)
    blocks = []
    for path in paths:
        result = read(path)
        if not result.ok:
            reason = (result.output.strip().splitlines() or ["not readable"])[0][:200]
            raise ConfigError(f"cannot attach @{path}: {reason}",
                              fix="put a file of the project after @ (a plain @ needs a "
                                  "space after it)")
        blocks.append(f"[file @{path}, attached by the user, as read_file shows it]\n"
                      f"{result.output}")
    if not blocks:
        return query, []
    return query + "\n\n" + "\n\n".join(blocks), paths
