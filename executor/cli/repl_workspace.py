"""The REPL's /diff and /undo: the `diff` and `undo` commands for the session being run.

/diff in a copy session collects the copy's changes so far (nothing is kept: the session goes
on) and shows them as `sandbox-agent diff` would; in a bind session it shows what the session
wrote, from its journal, each file's content now read through the sandbox (never by opening
the project's paths on the host). /undo is `sandbox-agent undo --session THIS` (executor/cli/
workspace.py): in a bind session it takes back what the session wrote; a copy session's
changes are not in the project, so there is nothing of it to undo there.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import sys
from typing import TYPE_CHECKING

import typer

from executor import toolmeta
from executor.cli.common import err_console
from executor.cli.repl import Repl, slash_command
from executor.errors import SandboxAgentError
from executor.text import markup_safe

if TYPE_CHECKING:
    from executor.protocols import Sandbox
    from executor.workspace.changes import Change
    from executor.workspace.render import Content

_READ_MAX = 16 * 1024 * 1024
"""Bytes of a file read back through the sandbox for /diff (bigger: its content not shown)."""


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False)


@slash_command("diff", "show what this session changed so far")
def _diff(repl: Repl, argument: str) -> None:
    runner = repl.runner
    if not runner.sandbox_started or runner.sandbox is None:
        _say("nothing changed yet: no tool has run in this session")
        return
    try:
        changes, content = (_copy_changes(repl) if runner.workspace_mode == "copy"
                            else _bind_changes(repl, runner.sandbox))
    except SandboxAgentError as exc:
        err_console.print(f"[bold red]error:[/] {markup_safe(str(exc))}")
        return
    if not changes:
        _say("no changes in this session so far")
        return
    _print_diff(changes, content)


def _copy_changes(repl: Repl) -> tuple[list[Change], Content]:
    from executor.cli.workspace import reviewed
    from executor.workspace.render import reader
    from executor.workspace.sessions import CopyWorkspace
    from executor.workspace.store import BlobStore

    root, sandbox = repl.runner.options.root, repl.runner.sandbox
    assert isinstance(sandbox, CopyWorkspace)
    content = reader(BlobStore.for_root(root))
    return reviewed(root, sandbox.current().changes, content), content


def _bind_changes(repl: Repl, sandbox: Sandbox) -> tuple[list[Change], Content]:
    """What the session wrote (the undo plan turned round), and a reader of the contents: the
    kept earlier ones, and the ones now read back through the sandbox."""
    from executor.workspace.apply import plan_undo
    from executor.workspace.changes import Change
    from executor.workspace.render import reader
    from executor.workspace.store import BlobStore

    root, session = repl.runner.options.root, repl.runner.session_name
    plan = plan_undo(root, session) if session else None
    if plan is None or plan.undoes != "session":
        return [], reader(BlobStore.for_root(root))
    changes = [Change(c.path, c.after, c.before) for c in plan.changes]
    kept = reader(BlobStore.for_root(root))
    now = {c.after.sha256: c.path for c in changes if c.after and c.after.sha256}

    def content(digest: str) -> bytes | None:
        found = kept(digest)
        if found is None and digest in now:
            found = _read_back(sandbox, now[digest], digest)
        return found

    for path, reason in plan.cannot + plan.conflicts:
        _say(f"not shown: {path}: {reason}")
    return changes, content


def _read_back(sandbox: Sandbox, path: str, digest: str) -> bytes | None:
    """`path`'s content as the sandbox sees it, when it still has the hash the journal says."""
    result = sandbox.call("snapshot", {"path": path, "max_bytes": _READ_MAX})
    data = toolmeta.snapshot_data(result.meta) if result.ok else None
    if data is None:
        return None
    try:
        content = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return content if hashlib.sha256(content).hexdigest() == digest else None


def _print_diff(changes: list[Change], content: Content) -> None:
    """The diff as `sandbox-agent diff` shows it: coloured and through $PAGER at a terminal."""
    from executor.cli.pager import page
    from executor.workspace.render import diff, for_terminal, totals

    page(for_terminal(diff(changes, content, safe=sys.stdout.isatty())))
    if all(c.added is not None for c in changes):  # a bind session's journal has no counts
        _say(totals(changes))


@slash_command("undo", "take back what this session wrote (bind workspace)")
def _undo(repl: Repl, argument: str) -> None:
    from executor.cli.workspace import undo_command

    runner = repl.runner
    if runner.workspace_mode == "copy":
        _say("a copy session's changes are not in the project: nothing of it to undo "
             "(/diff shows them; they stay pending when you leave, `sandbox-agent apply` "
             "lands them)")
        return
    if runner.session_name is None:
        _say("nothing to undo: no session yet")
        return
    with contextlib.suppress(typer.Exit):  # its one line is printed; the session goes on
        undo_command(root=runner.options.root, session=runner.session_name)
