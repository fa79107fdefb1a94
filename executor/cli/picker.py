"""`ask --resume` at a terminal without --session: pick the session to continue, as
`claude --resume` and `codex resume` do (`-c` takes the latest without asking)."""

from __future__ import annotations

import os
from pathlib import Path

from executor.cli.common import err_console
from executor.errors import ConfigError, SessionNotFoundError
from executor.text import inert_line

SHOWN = 10
"""Sessions offered: the most recently written ones."""


def pick_session(root: Path) -> str:
    """The name of the session the person picks among the latest (not delegated children)."""
    from executor.session import list_sessions
    from executor.state import real_root

    root = real_root(root)
    rows = [r for r in list_sessions(root) if not r.parent_session and r.status != "unreadable"]
    rows.sort(key=lambda r: os.lstat(r.path).st_mtime_ns, reverse=True)
    rows = rows[:SHOWN]
    if not rows:
        raise SessionNotFoundError(f"no sessions to resume in {root}",
                                   fix="start one with: sandbox-agent ask")
    if len(rows) == 1:
        return rows[0].name
    for number, row in enumerate(rows, 1):
        err_console.print(f"{number:>3}. {inert_line(row.name)}  {row.turns} turn(s)  "
                          f"{inert_line(row.status)}  {inert_line(row.last_message)[:80]}",
                          markup=False, highlight=False)
    while True:
        try:
            answer = err_console.input(f"Resume which (1-{len(rows)}, Enter: 1)? ",
                                       markup=False).strip()
        except EOFError:
            raise ConfigError("no session picked", fix="pass --session NAME, or -c for the "
                              "latest") from None
        if not answer:
            return rows[0].name
        if answer.isdigit() and 1 <= int(answer) <= len(rows):
            return rows[int(answer) - 1].name
        err_console.print(f"answer a number from 1 to {len(rows)}", markup=False)
