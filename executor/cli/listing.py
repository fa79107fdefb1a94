"""`sandbox-agent sessions` as a table, for the common case without typer, pydantic or Rich.

A listing is a quick command: in a pipe most of its time was importing (typer about 70 ms,
Rich about 90 ms, pydantic more) rather than reading. So `main` hands the plain forms
(`sessions`, `sessions --root DIR`) to `quick_listing` first; it prints the table exactly as
Rich lays it out into a pipe, or returns False, and typer runs the command as always: a
terminal (colours, the full width), a cell Rich measures otherwise than one column a
character, a table wider than the pipe, no session at all, any other flag.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from executor.text import PIPED_WIDTH, inert_line

TITLES = ("name", "started (UTC)", "turns", "status", "model", "last message")
_PLAIN = frozenset(map(chr, range(0x20, 0x7F))) | {"…", "→"}
"""Characters one column wide for Rich as for us: cells of only these are laid out without it."""


def cells(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Each row's cells as shown (inert, one line each)."""
    shown = []
    for row in rows:
        model = f"{row['model']} ({row['provider']})" if row["provider"] else row["model"]
        started = row["started_at"].replace("T", " ")[:19]
        values = (row["name"], started, str(row["turns"]), row["status"], model,
                  row["last_message"])
        shown.append(tuple(inert_line(value) for value in values))
    return shown


def plain_table(rows: list[tuple[str, ...]]) -> str | None:
    """The table Rich prints into a pipe, laid out without Rich; None where Rich must do it."""
    env = os.environ
    if sys.stdout.isatty() or {"FORCE_COLOR", "TTY_COMPATIBLE", "JUPYTER_COLUMNS"} & env.keys():
        return None
    columns = env.get("COLUMNS", "")
    if columns and not columns.isdigit():
        return None
    widths = [max(len(title), 8 if title == "last message" else 0) for title in TITLES]
    for row in rows:
        if not all(set(cell) <= _PLAIN for cell in row):
            return None
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    if sum(widths) + 2 * (len(widths) - 1) > (int(columns) if columns else PIPED_WIDTH):
        return None  # Rich squeezes the last column
    lines = ["  ".join(cell.rjust(width) if i == 2 else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
             for row in [TITLES, *rows]]
    return "".join(line + "\n" for line in lines)


def quick_listing(argv: list[str]) -> bool:
    """Print the listing `sandbox-agent ARGV` asks for when it is a plain one; False when
    typer must run the command (it then reads the sessions again)."""
    root = _plain_root(argv)
    if root is None or any(name.startswith("_SANDBOX_AGENT_COMPLETE") for name in os.environ):
        return False
    from executor.session_index import summary_rows

    rows = summary_rows(root)
    table = plain_table(cells(rows)) if rows else None
    if table is None:
        return False
    sys.stdout.write(table)
    sys.stdout.flush()
    return True


def _plain_root(argv: list[str]) -> Path | None:
    """The directory of `sessions`, `sessions --root DIR` (or -r DIR, --root=DIR); None for
    any other command line or a root that is not a directory (typer's errors say why)."""
    match argv:
        case ["sessions"]:
            value = "."
        case ["sessions", "--root" | "-r", value] if not value.startswith("-"):
            pass
        case ["sessions", option] if option.startswith("--root=") and len(option) > 7:
            value = option[7:]
        case _:
            return None
    root = Path(os.path.realpath(value))  # as click's resolve_path does
    return root if root.is_dir() else None
