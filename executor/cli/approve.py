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
        lines = inert(preview.text).removesuffix("\n").split("\n")
        folded = preview.fold and len(lines) > FOLD_AT
        _show(lines[:FOLD_SHOW] if folded else lines, preview.error)
        if folded:
            err_console.print(f"[yellow]… {len(lines) - FOLD_SHOW} more lines not shown: "
                              "answer v to see all of it[/]")
        offer = self.grants.offer(tool.name, values)
        err_console.print(_legend(offer), highlight=False)
        return self._answer(lines, preview.error, offer)

    def _answer(self, lines: list[str], error: str | None, offer: Grant | None) -> Approval:
        while True:
            try:
                answer = err_console.input(QUESTION, markup=False).strip().lower()
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
