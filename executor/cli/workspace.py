"""`sandbox-agent diff`, `apply` and `undo`: review a copy session's changes, then land them.

Results go to stdout (the diff, what was applied or restored); questions, notes and errors to
stderr. Text that came from the sandbox is made inert before it reaches a terminal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from executor.cli.common import RootOption, cli_errors, err_console, existing_root
from executor.errors import (
    ApplyDeclinedError,
    ConfigError,
    ConflictError,
    SandboxAgentError,
    SessionNotFoundError,
    UnrestorableError,
)
from executor.signals import interrupt_on_ending_signals

if TYPE_CHECKING:  # imported where used: `--help` loads neither Rich nor pydantic
    from executor.audit import AuditLog
    from executor.config import Settings
    from executor.workspace.apply import Outcome, UndoPlan
    from executor.workspace.changes import Change, Changeset
    from executor.workspace.gitrun import GitRun
    from executor.workspace.render import Content

SessionOpt = Annotated[
    str | None,
    typer.Option("--session", "-s", help="The session (default: the last one with changes).",
                 show_default=False),
]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Apply without asking (needed without a terminal).")
]
CONFLICT_FIX = ("see them with `sandbox-agent diff`; the other files are done. Put a file back "
                "as it was to let it through, or make the change yourself")


# ---------------------------------------------------------------------------- choosing


def _recent_sessions(root: Path, name: str) -> list[str]:
    """Sessions with a workspace file `name`, most recently written first."""
    from executor.workspace.store import workspaces_dir

    found = []
    directory = workspaces_dir(root)
    for entry in sorted(directory.glob(f"*/{name}"), key=lambda p: p.stat().st_mtime_ns,
                        reverse=True) if directory.is_dir() else []:
        if entry.is_file() and not entry.is_symlink():
            found.append(entry.parent.name)
    return found


def check_session(root: Path, session: str) -> None:
    """SessionNotFoundError (exit 4, the known ones named) when `root` has no such session."""
    from executor.session import session_names
    from executor.workspace.store import session_dir

    names = session_names(root)
    if session not in names and not session_dir(root, session).is_dir():  # its changes alone
        known = ("known sessions: " + ", ".join(names[-20:])) if names else "no sessions yet"
        raise SessionNotFoundError(f"no session named {session!r} in {root}",
                                   fix=f"{known} (`sandbox-agent sessions --root {root}`)")


def changeset_for(root: Path, session: str | None) -> Changeset | None:
    """The named session's changes, else the last session's that has some; None: none."""
    from executor.workspace.changes import load_changes

    if session is None:
        recent = _recent_sessions(root, "changes.json")
        return load_changes(root, recent[0]) if recent else None
    changeset = load_changes(root, session)
    if changeset is None:
        check_session(root, session)
    if changeset is None:
        raise ConfigError(f"session {session} has no pending changes: it ran in bind mode (its "
                          "writes are already in the tree) or has not finished",
                          fix=f"`sandbox-agent undo --root {root} --session {session}` takes "
                              "back what a bind session wrote")
    return changeset


def _nothing(root: Path) -> None:
    err_console.print(f"no copy session with changes in {root} (run `sandbox-agent ask "
                      "--workspace copy` first)", markup=False, highlight=False)


# ---------------------------------------------------------------------------- diff


@cli_errors
def diff_command(
    root: RootOption = Path("."),
    session: SessionOpt = None,
    stat: Annotated[bool, typer.Option("--stat", help="One line per path and totals.")] = False,
    as_json_: Annotated[bool, typer.Option("--json", help="Machine-readable changes.")] = False,
    pager: Annotated[
        bool, typer.Option("--pager/--no-pager", help="At a terminal, show it through $PAGER "
                           "(default less, with LESS=FRX unless LESS is set), coloured.")
    ] = True,
) -> None:
    """Show the pending changes of a copy session as a unified diff (flags mark paths people
    later run, or that steer their tools)."""
    from executor.cli.pager import page
    from executor.workspace.apply import applied_paths
    from executor.workspace.render import as_json, diff, for_terminal, reader, stat_lines
    from executor.workspace.store import BlobStore

    root = existing_root(root)
    changeset = changeset_for(root, session)
    if changeset is None:
        _nothing(root)
        return
    applied = set(applied_paths(root, changeset))
    content = reader(BlobStore.for_root(root))
    todo = reviewed(root, [c for c in changeset.changes if c.path not in applied], content)
    if as_json_:
        typer.echo(json.dumps(as_json(changeset, applied, todo), indent=2, ensure_ascii=True))
        return
    safe = sys.stdout.isatty()
    _heading(changeset, todo, applied)
    if stat:
        page((f"{line}\n" for line in stat_lines(todo, safe=safe)), wanted=pager)
        return
    page(for_terminal(diff(todo, content, safe=safe)), wanted=pager)


def reviewed(root: Path, changes: list[Change], content: Content,
             git: GitRun | None = None) -> list[Change]:
    """`changes` as a person should see them before they are applied: flags worked out again
    against the tree as it is (`apply.for_review`), and where git on the host runs or reads
    the path (apply refuses those)."""
    from executor.workspace.apply import for_review

    return git_marked(for_review(root, changes, content), content, git or _git_run(root))


def _git_run(root: Path) -> GitRun | None:
    """Which files git on the host runs; None, with a warning, when that cannot be worked
    out (apply then refuses everything)."""
    from executor.workspace.gitrun import git_run

    try:
        return git_run(root)
    except SandboxAgentError as exc:
        err_console.print(f"warning: cannot tell which files git on the host runs ({exc}); "
                          "apply will refuse to write", markup=False, highlight=False)
        return None


def git_marked(changes: list[Change], content: Content, git: GitRun | None) -> list[Change]:
    """`changes` flagged where `git` says git on the host runs or reads the path."""
    from executor.text import inert_line

    if git is None:
        return changes
    for config, why in git.unsure.items():
        err_console.print(f"warning: git on the host reads {inert_line(config)} as config, but it "
                          f"cannot be read with certainty ({why}); apply will refuse to write "
                          "until it is fixed", markup=False, highlight=False)
    return git.mark(changes, content)


def _heading(changeset: Changeset, todo: list[Change], applied: set[str]) -> None:
    from executor.text import inert_line

    done = f", {len(applied)} already applied" if applied else ""
    err_console.print(f"session {changeset.session}: {len(todo)} pending change"
                      f"{'s' * (len(todo) != 1)}{done}", markup=False, highlight=False)
    for refusal in changeset.refused:
        err_console.print(f"not brought back: {inert_line(refusal['path'])}: "
                          f"{inert_line(refusal['reason'])}", markup=False, highlight=False)


# ---------------------------------------------------------------------------- apply


@cli_errors
def apply_command(
    root: RootOption = Path("."),
    session: SessionOpt = None,
    yes: YesOpt = False,
) -> None:
    """Write a copy session's pending changes into the tree, file by file; a file changed on
    the host since the copy is refused (exit 61), never merged."""
    interrupt_on_ending_signals()  # a hang-up or SIGTERM: exit 130, once the writes are on record
    root = existing_root(root)
    changeset = changeset_for(root, session)
    if changeset is None:
        _nothing(root)
        return
    run_apply(root, changeset, yes=yes, at_terminal=at_terminal())


def at_terminal() -> bool:
    """Whether a person can be asked (stdin and stderr are a terminal)."""
    return bool(sys.stdin and sys.stdin.isatty() and err_console.is_terminal)


def run_apply(root: Path, changeset: Changeset, *, yes: bool, at_terminal: bool,
              audit: bool = True, to_stderr: bool = False,
              settings: Settings | None = None) -> Outcome | None:
    """Show, ask (unless --yes), apply; ConflictError when files were left alone. `settings`:
    those of the run that made the changes (`ask --apply`), not read again."""
    from executor.workspace.apply import apply_changes, for_review, pending
    from executor.workspace.gitrun import git_run
    from executor.workspace.render import reader
    from executor.workspace.store import BlobStore

    content = reader(BlobStore.for_root(root))
    todo = for_review(root, pending(root, changeset), content)
    if not todo:
        err_console.print(f"nothing to apply: the changes of session {changeset.session} are "
                          "already in the tree (`sandbox-agent undo` takes them back)",
                          markup=False, highlight=False)
        return None
    git = git_run(root)
    git.check_certain()  # nothing to ask about when nothing can be applied
    if not yes:
        if not at_terminal:
            raise ConfigError("apply asks before it writes, and there is no terminal to ask",
                              fix="review with `sandbox-agent diff`, then pass --yes")
        _show(git_marked(todo, content, git), content)
        if not _confirm(f"Apply these {len(todo)} changes to {root}?"):
            raise ApplyDeclinedError("nothing applied; the changes stay pending")
    log = _audit(root, changeset.session, settings) if audit else None
    outcome = apply_changes(root, changeset, approved_by="--yes" if yes else "user", audit=log,
                            git=git)
    _report(outcome, "applied", to_stderr=to_stderr)
    _raise_conflicts(outcome, "applied", CONFLICT_FIX)
    return outcome


def _show(todo: list[Change], content: Content) -> None:
    """The diff of what is about to be applied, inert, on stderr."""
    from executor.workspace.render import totals

    _show_diff(todo, content)
    err_console.print(totals(todo), markup=False, highlight=False)


def _show_diff(todo: list[Change], content: Content) -> None:
    from executor.text import visible_blanks
    from executor.workspace.render import diff

    for line in diff(todo, content, safe=True):
        err_console.print(visible_blanks(line.rstrip("\n")), markup=False, highlight=False,
                          soft_wrap=True)


def _confirm(question: str) -> bool:
    from rich.markup import escape
    from rich.prompt import Confirm

    from executor.text import inert_line

    try:  # the question names the root: shown as it is, never as markup
        return Confirm.ask(escape(inert_line(question)), console=err_console, default=False)
    except EOFError:
        return False


def _audit(root: Path, session: str, settings: Settings | None = None) -> AuditLog | None:
    from executor.audit import AuditLog
    from executor.config import Settings
    from executor.text import inert_line

    settings = settings or Settings()
    if not settings.audit:
        return None
    return AuditLog.for_root(root, session=session, audit_dir=settings.audit_dir,
                             on_warning=lambda m: err_console.print(f"warning: {inert_line(m)}",
                                                                    markup=False))


_UNDONE = {"A": "put back", "D": "removed", "M": "restored", "T": "restored"}


def _report(outcome: Outcome, verb: str, *, to_stderr: bool = False) -> None:
    from executor.text import inert_line

    def say(line: str) -> None:
        if to_stderr:  # `ask --apply`: stdout carries the answer alone
            err_console.print(line, markup=False, highlight=False)
        else:
            typer.echo(line)

    for change in outcome.done:
        what = f"applied {change.status}" if verb == "applied" else _UNDONE[change.status]
        say(f"{what} {inert_line(change.path)}")
    for path in outcome.already:
        say(f"already {inert_line(path)}")
    for path, reason in outcome.conflicts:
        err_console.print(f"not {verb}: {inert_line(path)}: {inert_line(reason)}", markup=False,
                          highlight=False)


def _raise_conflicts(outcome: Outcome, verb: str, fix: str) -> None:
    from executor.text import inert_line

    if not outcome.conflicts:
        return
    paths = [p for p, _ in outcome.conflicts]
    shown = ", ".join(inert_line(p) for p in paths[:5]) + (", …" if len(paths) > 5 else "")
    raise ConflictError(f"{len(paths)} file{'s' * (len(paths) != 1)} not {verb} (changed on "
                        f"the host, or unsafe to write): {shown}", paths=paths, fix=fix)


# ---------------------------------------------------------------------------- undo


UndoYesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Undo without asking (needed without a terminal).")
]


@cli_errors
def undo_command(
    root: RootOption = Path("."),
    session: SessionOpt = None,
    yes: UndoYesOpt = False,
) -> None:
    """Take back the last apply of a copy session, or what a bind session wrote. Shows what
    it would remove, overwrite and put back, and asks (--yes without a terminal). What it
    removes or overwrites is kept in the blob store first, and a path whose earlier content
    another file holds now (after `mv a b`) is put back from it. A file changed since is left
    alone (exit 61); a path whose earlier content is nowhere (a shell command changed it in
    bind mode) is named and left as it is (exit 64); the rest is undone. Without --session it
    says which session it takes back (an older one, after the newest was undone)."""
    from executor.workspace.apply import plan_undo

    interrupt_on_ending_signals()
    root = existing_root(root)
    if session:
        check_session(root, session)
    name, newer = (session, []) if session else _latest_undoable(root)
    plan = plan_undo(root, name) if name else None
    if plan is None:
        where = f"session {name}" if name else str(root)
        err_console.print(f"nothing to undo in {where}", markup=False, highlight=False)
        return
    if not session:  # picked for the person: say which, above all when it is not the latest
        _say_which(plan, newer)
    run_undo(root, plan, yes=yes, at_terminal=at_terminal())


def _say_which(plan: UndoPlan, newer: list[str]) -> None:
    """`undoing session NAME's …`, and the newer sessions passed over (already undone)."""
    from executor.text import inert

    what = "what it wrote" if plan.undoes == "session" else f"its apply {plan.undoes}"
    passed = ""
    if newer:
        names = ", ".join(inert(n) for n in newer[:3]) + (", …" if len(newer) > 3 else "")
        passed = (f" (an older session: {names}, newer, ha{'ve' if len(newer) > 1 else 's'} "
                  "nothing left to undo; --session NAME picks one)")
    err_console.print(f"undoing session {inert(plan.session)}: {what}{passed}", markup=False,
                      highlight=False)


def run_undo(root: Path, plan: UndoPlan, *, yes: bool, at_terminal: bool,
             audit: bool = True) -> Outcome:
    """Show, ask (unless --yes), undo, report; UnrestorableError when paths could not be
    restored, ConflictError when files changed since were left alone."""
    from executor.workspace.apply import undo

    def confirm(preview: Outcome) -> bool:
        if yes:
            return True
        _show_undo(root, plan, preview)
        if not at_terminal:
            raise ConfigError("undo asks before it removes or overwrites anything, and there "
                              "is no terminal to ask", fix="read the list above, then pass --yes")
        return _confirm(f"Undo these {len(preview.ready)} changes in {root}?")

    outcome = undo(root, plan, audit=_audit(root, plan.session) if audit else None,
                   confirm=confirm)
    if outcome is None:
        raise ApplyDeclinedError("nothing undone: the tree is as it was")
    _report(outcome, "restored")
    _report_undo(root, outcome)
    _raise_conflicts(outcome, "restored", "those files changed after they were written; "
                                          "restore them by hand if you want to")
    return outcome


def _show_undo(root: Path, plan: UndoPlan, preview: Outcome) -> None:
    """What an undo would do, inert, on stderr: the diff from the tree as it is to what undo
    would leave, what it leaves alone, what it cannot restore."""
    from executor.text import inert_line
    from executor.workspace.apply import undo_content

    _show_diff(preview.ready, undo_content(root, plan, preview))
    for path, reason in preview.conflicts:
        err_console.print(f"left alone: {inert_line(path)}: {inert_line(reason)}", markup=False,
                          highlight=False)
    for path, reason in preview.cannot:
        err_console.print(f"cannot restore {inert_line(path)}: {inert_line(reason)}", markup=False,
                          highlight=False)
    ready = preview.ready
    removed = sum(1 for c in ready if c.before is not None and c.after is None)
    overwritten = sum(1 for c in ready if c.before is not None and c.after is not None)
    err_console.print(f"undo would remove {removed}, overwrite {overwritten} and put back "
                      f"{len(ready) - removed - overwritten} path(s); what it removes or "
                      f"overwrites is kept first in {inert_line(str(_blob_dir(root)))}",
                      markup=False, highlight=False)


def _report_undo(root: Path, outcome: Outcome) -> None:
    """Where what undo removed or overwrote is kept; UnrestorableError for what it could not
    restore (named one per line)."""
    from executor.text import inert_line

    for path, reason in outcome.cannot:
        err_console.print(f"cannot restore {inert_line(path)}: {inert_line(reason)}", markup=False,
                          highlight=False)
    if any(c.before is not None and c.before.kind == "file" for c in outcome.done):
        err_console.print(f"what undo removed or overwrote is kept in "
                          f"{inert_line(str(_blob_dir(root)))} (each under its sha256)",
                          markup=False, highlight=False)
    if not outcome.cannot:
        return
    paths = [p for p, _ in outcome.cannot]
    shown = ", ".join(inert_line(p) for p in paths[:5]) + (", …" if len(paths) > 5 else "")
    also = (f"; {len(outcome.conflicts)} more left alone (changed since)"
            if outcome.conflicts else "")
    raise UnrestorableError(
        f"{len(paths)} path{'s' * (len(paths) != 1)} cannot be restored{also}: {shown}",
        paths=paths,
        fix="what could be undone is; the journal names the hashes of the rest. For sessions "
            "you can always take back, use --workspace copy")


def _blob_dir(root: Path) -> Path:
    from executor.workspace.store import BlobStore

    return BlobStore.for_root(root).directory


def _latest_undoable(root: Path) -> tuple[str | None, list[str]]:
    """The most recent session with something to undo, and the newer ones passed over."""
    from executor.workspace.apply import plan_undo

    passed: list[str] = []
    for name in _recent_sessions(root, "journal.ndjson"):
        if plan_undo(root, name) is not None:
            return name, passed
        passed.append(name)
    return None, passed
