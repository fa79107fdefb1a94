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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor.cli.common import err_console
from executor.grants import Grant, SessionGrants
from executor.runner import Approval
from executor.text import inert, markup_safe

if TYPE_CHECKING:
    from pydantic import BaseModel

    from executor.policy import Decision
    from executor.tools import Preview, Tool
    from executor.ui import ProgressView

FOLD_AT = 80
"""A preview longer than this many lines is shown folded ..."""
FOLD_SHOW = 60
"""... to its first lines; answering v shows all of it before the question is asked again."""
QUESTION = "Allow this call? [y/n/a/r/v] (n): "
QUESTION_NO_GRANT = "Allow this call? [y/n/r/v] (n): "
"""Asked when "always" cannot be offered (the command runs another one, or is not simple)."""
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
        err_console.rule(f"[bold]{markup_safe(tool.name, line=True)}[/] needs approval "
                         f"[dim]({markup_safe(decision.rule, line=True)})[/]")
        lines = _compact(inert(preview.text).removesuffix("\n").split("\n"))
        shown = _fit(lines, preview.fold)
        _show(lines[:shown], preview.error)
        if shown < len(lines):
            err_console.print(f"[yellow]… {len(lines) - shown} more lines not shown: "
                              "answer v to see all of it[/]")
        offer = self.grants.offer(tool.name, values)
        # Right above the question, so no amount of text above can push it out of sight.
        err_console.print(_summary(tool.name, lines), markup=False, highlight=False)
        err_console.print(_legend(offer), highlight=False)
        return self._answer(lines, preview.error, offer)

    def _answer(self, lines: list[str], error: str | None, offer: Grant | None) -> Approval:
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
            else:
                err_console.print("answer y (yes), n (no), "
                                  + ("a (always), " if offer else "")
                                  + "r (no, and say why) or v (view all of it)")


BLANK_RUN = 2
"""Blank lines shown in a row; a longer run is one marker line (it could hide what follows)."""


def _compact(lines: list[str]) -> list[str]:
    """Runs of blank lines folded to one marker: nothing can be scrolled out of sight."""
    out: list[str] = []
    blank = 0
    for line in [*lines, "\0"]:
        if line.strip() == "" and line != "\0":
            blank += 1
            continue
        out += [""] * blank if blank <= BLANK_RUN else [f"[… {blank} blank lines …]"]
        blank = 0
        if line != "\0":
            out.append(line)
    return out


def _fit(lines: list[str], fold: bool) -> int:
    """How many lines to show before asking: all, or a screenful counted in rows (a long line
    wraps over several), so the question and what precedes it stay on one screen."""
    if not fold:
        return len(lines)
    width = max(20, err_console.width)
    height = err_console.height if err_console.is_terminal else FOLD_AT + 8
    rows = [max(1, -(-len(line) // width)) for line in lines]
    if sum(rows) <= min(FOLD_AT, height - 6):
        return len(lines)
    budget, used, shown = max(10, min(FOLD_SHOW, height - 8)), 0, 0
    for row in rows:
        if used + row > budget:
            break
        used, shown = used + row, shown + 1
    return max(shown, 1)


def _summary(tool: str, lines: list[str]) -> str:
    """`run_shell_command: 63 lines; first: echo PWNED > README.md` (inert, one line)."""
    first = next((line for line in lines if line.strip()), "")
    first = first if len(first) <= 100 else first[:99] + "…"
    return f"{tool}: {len(lines)} line{'s' * (len(lines) != 1)}; first: {first}"


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
    always = (f"a: always allow [bold]{markup_safe(offer.describe(), line=True)}[/] in this "
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
        err_console.print(f"[bold red]this call would fail:[/] {markup_safe(error)}")
