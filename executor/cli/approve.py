"""The approval prompt: a person at the terminal decides each call the policy leaves to them.

It shows what the call will really do (the whole command, or the real diff against the file in
the sandbox; executor/tools), everything inert (executor/text.py): an escape sequence in a
command, a path or a file's content is printed as `\\x1b`, never run by the terminal. Answers:

    y, yes     run it
    n, no      do not (the default; Ctrl-D too)
    a, always  run it, and every later call like it in this session without asking: the tool,
               or for a shell command its prefix (executor/grants.py); audited as user:session
    r, reason  do not, and tell the model why (the reason is the call's result)
    v, view    show all of a folded preview, then ask again

The heading, the preview and the question fit on one screen: padding (runs of blank lines, or
of blank characters inside a line) is one marker, a preview taller than the screen is folded
with a note of what was left out, and a summary right above the question names what the call
runs (for a shell command, every simple command in it). Only the display changes; what runs is
the call as the model gave it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from executor.cli.common import err_console
from executor.grants import Grant, SessionGrants
from executor.runner import Approval
from executor.text import BLANK_RE, inert, inert_line, markup_safe, visible_blanks

if TYPE_CHECKING:
    from pydantic import BaseModel

    from executor.policy import Decision
    from executor.tools import Preview, Tool
    from executor.ui import ProgressView

FOLD_AT = 80
"""A preview longer than this many lines is shown folded ..."""
FOLD_SHOW = 60
"""... to its first lines; answering v shows all of it before the question is asked again."""
RESERVED_ROWS = 12
"""Rows kept free below a preview for what follows it (what was left out, why the call would
fail, the summary, the legend, the question), so the question and the preview are in sight
together: a preview taller than the screen less these rows is always folded."""
SUMMARY_ROWS = 3
"""Rows the summary right above the question may take at most."""
RUN_CELLS = 60
"""Columns of one command shown in the summary (the rest is `…`)."""
QUESTION = "Allow this call? [y/n/a/r/v] (n): "
QUESTION_NO_GRANT = "Allow this call? [y/n/r/v] (n): "
"""Asked when "always" cannot be offered (the command runs another one, or is not simple)."""
HOST_QUESTION = "Allow this connection? [y/n/a] (n): "
"""Asked about a host no rule allows (a: that host and port for the session)."""
SESSION = "user:session"
"""`approved_by` of a call a session grant allowed."""


class TerminalApprover:
    """Asks the person at the terminal; remembers what they allowed for the session."""

    def __init__(self, view: ProgressView, grants: SessionGrants | None = None) -> None:
        self.view = view
        self.grants = grants or SessionGrants()

    def __call__(
        self, tool: Tool, args: BaseModel, decision: Decision, preview: Preview
    ) -> Approval:
        """The person's answer (or a grant's, without asking)."""
        values = args.model_dump(exclude_none=True)
        if self.grants.covers(tool.name, values) is not None:
            return Approval(True, by=SESSION)
        self.view.close()
        self.view.show_prose()
        err_console.rule(f"[bold]{markup_safe(tool.name, line=True)}[/] needs approval "
                         f"[dim]({markup_safe(decision.rule, line=True)})[/]")
        text = inert(preview.text).removesuffix("\n")
        lines = [visible_blanks(line) for line in _compact(text.split("\n"))]
        shown, left_out = _fit(lines, preview.fold)
        _show(shown, preview.error)
        if left_out:
            err_console.print(f"[yellow]… {left_out} not shown: answer v to see all of it[/]")
        offer = self.grants.offer(tool.name, values)
        summary = _summary(tool.name, text.count("\n") + 1, lines, preview.runs)
        _ask_under(summary, offer)
        return self._answer(lines, preview.error, summary, offer)

    def host(self, host: str, port: int, command: str) -> Literal["y", "n", "a"]:
        """The person's answer about a host no rule allows (y: this connection, a: this host
        and port for the session, n: no, the default). Everything shown is inert."""
        self.view.close()
        where = inert_line(f"{host}:{port}")
        err_console.rule(f"[bold]network[/] needs approval [dim](no rule allows "
                         f"{markup_safe(where, line=True)})[/]")
        err_console.print(f"the sandbox asks to connect to {where}", markup=False,
                          highlight=False)
        if command:
            err_console.print(f"while running: $ {inert_line(command)[:2000]}", markup=False,
                              highlight=False)
        while True:
            _discard_typeahead()
            try:
                answer = err_console.input(HOST_QUESTION, markup=False).strip().lower()
            except EOFError:
                return "n"
            if answer in ("", "n", "no"):
                return "n"
            if answer in ("y", "yes", "a", "always"):
                return "y" if answer.startswith("y") else "a"
            err_console.print("answer y (yes, this connection), n (no) or a (always: this "
                              "host and port for the session)", markup=False)

    def _answer(self, lines: list[str], error: str | None, summary: str,
                offer: Grant | None) -> Approval:
        while True:
            _discard_typeahead()
            try:
                question = QUESTION if offer is not None else QUESTION_NO_GRANT
                answer = err_console.input(question, markup=False).strip().lower()
            except EOFError:
                return Approval(False)
            if answer in ("y", "yes"):
                return Approval(True)
            if answer in ("", "n", "no"):
                return Approval(False)
            if answer in ("a", "always") and offer is not None:
                self.grants.add(offer)
                return Approval(True, by=SESSION)
            if answer in ("r", "reason"):
                return Approval(False, reason=_reason())
            if answer in ("v", "view"):
                _show(lines, error)
                _ask_under(summary, offer)
            else:
                err_console.print("answer y (yes), n (no), "
                                  + ("a (always), " if offer else "")
                                  + "r (no, and say why) or v (view all of it)")


BLANK_RUN = 2
"""Blank lines shown in a row; a longer run is one marker line (it could hide what follows)."""


def _compact(lines: list[str]) -> list[str]:
    """Runs of blank lines (empty, or only blank characters: executor/text.py) folded to one
    marker: nothing can be scrolled out of sight."""
    out: list[str] = []
    blank = 0
    for line in [*lines, "\0"]:
        if line != "\0" and (not line or BLANK_RE.fullmatch(line)):
            blank += 1
            continue
        out += [""] * blank if blank <= BLANK_RUN else [f"[… {blank} blank lines …]"]
        blank = 0
        if line != "\0":
            out.append(line)
    return out


def _fit(lines: list[str], fold: bool) -> tuple[list[str], str | None]:
    """What to show before asking, and what it leaves out (None: nothing). Counted in rendered
    rows (a long line wraps over several), so the question and the preview are on one screen:
    all of it, or a screenful (cutting a long line if need be) and a note of the rest."""
    width, height = _screen()
    rows = [_rows(line, width) for line in lines]
    room = max(3, height - RESERVED_ROWS)
    if sum(rows) <= (min(FOLD_AT, room) if fold else room):
        return lines, None
    budget = min(FOLD_SHOW, room) if fold else room
    shown: list[str] = []
    used = 0
    for line, row in zip(lines, rows, strict=True):
        if used + row > budget:
            break
        shown.append(line)
        used += row
    rest = len(lines) - len(shown)
    parts = []
    if used < budget:  # a long line: as much of it as there is room for
        line = lines[len(shown)]
        shown.append(_head(line, (budget - used) * width))
        rest -= 1
        parts.append(f"{len(line) - len(shown[-1]):,} more characters of that line")
    if rest:
        parts.append(f"{rest} more line{'s' * (rest != 1)}")
    return shown, " and ".join(parts)


def _screen() -> tuple[int, int]:
    """The terminal's columns and rows (a default when stderr is not a terminal)."""
    width = max(20, err_console.width)
    return width, err_console.height if err_console.is_terminal else FOLD_AT + RESERVED_ROWS


def _cells(text: str) -> int:
    """Columns `text` takes on a terminal (a tab counted at its widest)."""
    from rich.cells import cell_len

    return cell_len(text.replace("\t", " " * 8))


def _rows(line: str, width: int) -> int:
    return max(1, -(-_cells(line) // width))


def _head(text: str, cells: int) -> str:
    """The longest start of `text` that takes at most `cells` columns."""
    from rich.cells import get_character_cell_size

    used = 0
    for index, char in enumerate(text):
        used += 8 if char == "\t" else get_character_cell_size(char)
        if used > cells:
            return text[:index]
    return text


def _summary(tool: str, count: int, lines: list[str], runs: tuple[str, ...]) -> str:
    """`run_shell_command: 3 lines; runs: echo hello · touch x` (or, for a call that runs no
    command, `…; first: ` and its first line): inert, at most SUMMARY_ROWS rows."""
    head = f"{tool}: {count} line{'s' * (count != 1)}; "
    budget = SUMMARY_ROWS * _screen()[0] - 1
    if not runs:
        first = next((line for line in lines if line.strip()), "")
        return head + "first: " + _cut(first, min(100, budget - _cells(head) - 7))
    return head + "runs: " + _listed(runs, budget - _cells(head) - 6)


def _listed(runs: tuple[str, ...], budget: int) -> str:
    """`echo a · touch x (2 times) · and 12 more (v shows all)` in `budget` columns: each
    distinct command, shortened, for as many as fit."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run] = counts.get(run, 0) + 1
    cells = min(RUN_CELLS, budget // 2)  # on a narrow terminal too, some fit
    items = [_cut(inert_line(visible_blanks(run)), cells) + (f" ({n} times)" if n > 1 else "")
             for run, n in counts.items()]
    shown: list[str] = []
    for index, item in enumerate(items):
        left = len(items) - index - 1  # after this one
        room = budget - (len(f" · and {left} more (v shows all)") if left else 0)
        if _cells(" · ".join([*shown, item])) > room:
            return " · ".join([*shown, f"and {left + 1} more (v shows all)"])
        shown.append(item)
    return " · ".join(shown)


def _cut(text: str, cells: int) -> str:
    """`text`, or its start and `…` when it is wider than `cells` columns."""
    return text if _cells(text) <= cells else _head(text, max(1, cells - 1)) + "…"


def _ask_under(summary: str, offer: Grant | None) -> None:
    """The summary and the legend, right above the question: no text above can push them out
    of sight."""
    err_console.print(summary, markup=False, highlight=False)
    err_console.print(_legend(offer), highlight=False)


def _discard_typeahead() -> None:
    """Drop what was typed before the question was shown: a `y` typed at a fake prompt that
    the model's own text drew must not answer the real one."""
    import sys

    try:
        import termios

        if sys.stdin is not None and sys.stdin.isatty():
            termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    except (ImportError, OSError, ValueError):
        pass


def _legend(offer: Grant | None) -> str:
    """One dim line naming the answers that are not obvious."""
    granted = _cut(visible_blanks(offer.describe()), RUN_CELLS) if offer else ""
    always = (f"a: always allow [bold]{markup_safe(granted, line=True)}[/] in this "
              "session · " if offer else "")
    return f"[dim]{always}r: no, and tell the model why · v: view all[/]"


def _reason() -> str:
    """The person's reason, told to the model (an empty one is just a no)."""
    try:
        return err_console.input("Why not? (the model is told): ", markup=False).strip()
    except EOFError:
        return ""


def _show(lines: list[str], error: str | None) -> None:
    """Inert preview lines, and why the call would fail when it would."""
    err_console.print("\n".join(lines), markup=False, highlight=False)
    if error:
        error = _cut(visible_blanks(error), 2 * _screen()[0])
        err_console.print(f"[bold red]this call would fail:[/] {markup_safe(error)}")
