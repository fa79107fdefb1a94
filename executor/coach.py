"""Guards that keep a weak model on track in the agent loop. Nothing here knows about any task.

Small local models fail in a few typical ways (measured with `benchmarks/bench_agent.py`):
they overwrite a whole file they never read with only the part they meant to add, repeat a
failing call until the turns run out, and answer as if a change was made when the call that
would have made it failed or never happened. The `Coach` watches one conversation's calls and
answers and steps in where that happens:

- `refuse(call)`: a `write_file` over an existing file the model has not read (or written) in
  this conversation, or one that would delete most of a file it has read, or the first change
  in answer to a question ("which port does the app use?"), is refused once, with what to do
  instead; a call that failed, or a read, list, search or command that succeeded, is not
  run again unchanged while no file has changed since, and three such refusals in a row end
  the run (`stuck`);
- `review(answer)`: an answer right after a failed change (or a command that is not
  installed, or a search that found nothing, or an edit that left a name it replaced on other
  lines), or one that claims a change when nothing changed, or that names a file as changed
  which the tools showed and no call changed, or that comes before a new file the request
  asks for ("make a script count_lines.py ...") was written, is sent back with what to do
  (a *nudge*), each at most once and `max_nudges` times a run in all (a check after each
  change is available, `check_changes`, and off).

Capable models rarely trigger any of these; each costs a weak model a turn and saves the task.
The runner gives agents on the json protocols, which weak models use, a coach.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from executor import toolmeta
from executor.messages import Message, ToolCall, ToolResult
from executor.protocols import Sandbox

READERS = frozenset({"read_file"})
"""Tools whose success means the model has seen the file at `path`."""
LOOKERS = READERS | {"list_files", "search_files"}
"""Tools that only look: the same call gives the same answer while no file changes."""
WRITERS = frozenset({"write_file", "edit_file"})
"""Tools whose success means the file at `path` is what the model made it."""
CHECKERS = READERS | {"run_shell_command"}
"""Tools with which the model can check a change."""
_WORKSPACE = "/workspace/"
_CLAIM = re.compile(r"\b(added|updated|changed|modified|created|renamed|fixed|replaced|removed|"
                    r"deleted|wrote|written|bumped|edited|inserted)\b", re.IGNORECASE)
"""Words with which an answer says that something was changed."""
_NOT_FOUND = 127
_SHRINK_LINES = 5
"""A write_file over a read file that deletes this many lines, and more than twice as many as
it adds, is refused once: weak models write only the part they meant to add."""
"""The shell's exit code for a command that does not exist."""
_MISSING = re.compile(r"(?:^|\s)([\w.+-]+): (?:command )?not found", re.MULTILINE)
_PATH = re.compile(r"(?<![\w/.-])(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z]\w{0,5}\b")
"""A file name in text (`shop/cart.py`, `README.md`): what an answer may claim it changed."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_MAKE = re.compile(r"\b(make|create|write|add|generate|save|put|build)\b", re.IGNORECASE)
"""Words with which a request asks for a file to be made."""
_CHANGE = re.compile(r"\b(make|create|write|add|generate|save|put|build|change|fix|rename|"
                     r"update|remove|delete|replace|edit|modify|set|implement|refactor|move|"
                     r"bump|insert|convert|correct|improve|format|clean|install|append)\w*",
                     re.IGNORECASE)
"""Words with which a request asks for a change: a request ending in '?' without one of them
is a question, and its answer changes no file."""


def norm_path(path: str) -> str:
    """`./a/../b.py`, `/workspace/b.py` and `b.py` are one file to the coach."""
    path = path.strip()
    if path.startswith(_WORKSPACE):
        path = path[len(_WORKSPACE):]
    return posixpath.normpath(path or ".").lstrip("/")


@dataclass
class Coach:
    """Watches one conversation's tool calls and answers (see the module docstring)."""

    max_nudges: int = 2
    """Answers sent back per run at most; the next answer is accepted as it is."""
    known: set[str] = field(default_factory=set)
    """Paths the model has read or written in this conversation."""
    refused: set[str] = field(default_factory=set)
    """Paths whose blind overwrite was refused once (a second attempt goes through)."""
    changed: bool = False
    """Whether a call changed a file in this run."""
    failure: str | None = None
    """What went wrong in the run's last call, when that is worth another try."""
    claimed: bool = False
    """Whether an answer claiming an unmade change was sent back in this run."""
    nudges: int = 0
    """Answers sent back in this run."""
    failed: dict[str, str] = field(default_factory=dict)
    """Calls that failed since the last change, with the first line of their error."""
    vetoed: set[str] = field(default_factory=set)
    """Calls `refuse` stopped: their refusal is not a failure of the call."""
    check_changes: bool = False
    """Ask once for a check when the model answers right after changing a file. Off: with the
    embedded 1.5B model the check turned correct changes back (asked to raise a limit from 10
    to 25, it re-read the file and set it to 10 again, the same way every run)."""
    unchecked: bool = False
    """Whether a file changed after the model last read a file or ran a command."""
    asked_check: bool = False
    """Whether this run's check was asked for."""
    looked: set[str] = field(default_factory=set)
    """Looking calls and commands that succeeded since the last change: the same one again
    shows nothing new (a weak model re-reads one file, or re-runs one script, until its turns
    run out)."""
    seen: set[str] = field(default_factory=set)
    """File names the tools' output or arguments showed in this conversation."""
    written: set[str] = field(default_factory=set)
    """Files a call changed in this run; "" in it: a command changed files it did not name."""
    asked: list[str] = field(default_factory=list)
    """Files the request asks to be made ("make a script count_lines.py that ...")."""
    specs: dict[str, str] = field(default_factory=dict)
    """The request's sentence that asks for each of them."""
    stuck_after: int = 3
    """Refusals of repeated calls in a row after which the run is given up: a weak model sent
    one failing edit ten more times, four minutes of turns for nothing."""
    repeats: int = 0
    """Refusals of a repeated call (failed, or a look or command whose result it had) since
    the last call that ran."""
    answer_now: str | None = None
    """The call refused because the request is a question: an answer after it is no failure."""
    question: bool = False
    """Whether the request is a question that asks for no change (its first change is refused
    once: a weak model asked which port the app uses "fixed" the port)."""

    def begin(self, request: str = "") -> None:
        """A new request: forget the last run's changes and nudges (not what was read)."""
        self.changed, self.failure, self.claimed, self.nudges = False, None, False, 0
        self.answer_now, self.repeats = None, 0
        self.asked, self.specs = [], {}
        self.question = request.rstrip().endswith("?") and not _CHANGE.search(request)
        for sentence in _SENTENCE.split(request):
            verb = _MAKE.search(sentence)
            thing = _PATH.search(sentence, verb.end()) if verb else None
            if thing:  # what is made is the first file named after the verb
                self.asked.append(thing[0])
                self.specs[thing[0]] = sentence.strip()[:500]
        self.failed.clear()
        self.looked.clear()
        self.written.clear()
        self.unchecked = self.asked_check = False

    def learn(self, history: Iterable[Message]) -> None:
        """Take in a resumed conversation: what it read and wrote counts as known."""
        results = {m.tool_call_id: m for m in history if m.role == "tool"}
        for message in history:
            for call in message.tool_calls:
                result = results.get(call.id)
                if result is not None and not result.content.startswith(("Denied", "Invalid")):
                    self._note(call)

    def refuse(self, call: ToolCall, sandbox: Sandbox) -> tuple[str, str] | None:
        """The audit's rule and the model's reason when `call` should not run (None: run it)."""
        failed = self.failed.get(_call_key(call))
        if failed is not None:  # nothing changed since: it would fail the same way
            self.repeats += 1
            return "coach:repeated-failure", (
                f"You made this exact call before and it failed: {failed} Nothing has changed "
                "since, so it would fail again. Change the arguments (copy text exactly as the "
                "file has it), try another way, or answer.")
        if _call_key(call) in self.looked:
            self.vetoed.add(_call_key(call))
            self.repeats += 1
            return "coach:repeated-look", (
                f"You already made this exact {call.name} call and nothing has changed since: "
                "its result is above. Use it now: answer with what it says (give the value "
                "asked for), or take the next step with another call.")
        if self.question and call.name in WRITERS:
            self.question = False
            self.vetoed.add(_call_key(call))
            self.answer_now = _call_key(call)
            return "coach:question", (
                "Not changed: the task is a question, so answer it with what you found; "
                "change files only when the task asks for a change. If this change is what "
                "was asked for, send the same call again.")
        path = call.arguments.get("path")
        if call.name != "write_file" or not isinstance(path, str):
            return None
        key = norm_path(path)
        if key in self.refused:
            return None
        preview = sandbox.preview("write_file", dict(call.arguments))
        if not toolmeta.preview_facts(preview.meta)["exists"]:
            return None
        if key not in self.known:
            rule, why = "coach:read-before-write", (
                f"Not written: {path} already exists and you have not read it, so this would "
                "replace all of it. Read it first with read_file; then change only the part the "
                "task is about with edit_file and keep the rest.")
        else:
            removed, added = _diff_counts(preview.output)
            if removed < _SHRINK_LINES or removed <= 2 * added:
                return None
            rule, why = "coach:keep-the-rest", (
                f"Not written: this would delete {removed} lines of {path} and add {added}. "
                "To add or change part of a file, use edit_file and keep the rest. If you do "
                "mean to replace the whole file, send the same write_file again.")
        self.refused.add(key)  # once: the same write again goes through
        self.vetoed.add(_call_key(call))
        return rule, why

    @property
    def stuck(self) -> str | None:
        """Why the run should be given up (the model only repeats calls), or None."""
        if self.repeats < self.stuck_after:
            return None
        return (f"the model repeated calls that had failed or whose result it already had, "
                f"{self.repeats} times in a row, with nothing changed in between")

    def observe(self, call: ToolCall, result: ToolResult) -> None:
        """Note what a finished call showed or changed."""
        key = _call_key(call)
        if key not in self.failed and key not in self.vetoed:  # it ran
            self.repeats = 0
        self.failure = _retryable(call, result)
        if key == self.answer_now:  # an answer is what the refusal asked for
            self.failure = self.answer_now = None
        if key in self.vetoed or key in self.failed:  # refused here: not a result of the tool
            self.vetoed.discard(key)
            return
        if result.ok or toolmeta.file_shown(result.meta):  # a failed edit may show the file
            self._note(call)
        self.seen.update(norm_path(p) for p in _PATH.findall(result.output[:200_000]))
        self.seen.update(norm_path(p) for value in call.arguments.values()
                         if isinstance(value, str) for p in _PATH.findall(value[:10_000]))
        changed = (result.ok and call.name in WRITERS) or toolmeta.any_changes(result.meta)
        self.changed = self.changed or changed
        if changed:
            self._wrote(call, result)
            self.failed.clear()
            self.looked.clear()
        elif result.ok and call.name in LOOKERS | {"run_shell_command"}:
            self.looked.add(key)
        elif not result.ok:
            self.failed[key] = _first_line(result.output)
            if call.name in WRITERS:  # reading the file again is the way to fix the edit
                self.looked.clear()
        self.unchecked = changed or (self.unchecked and call.name not in CHECKERS)

    def review(self, answer: str) -> str | None:
        """Why `answer` should go back to the model (a nudge), or None to accept it."""
        if self.nudges >= self.max_nudges:
            return None
        nudge, self.failure = self.failure, None
        if nudge is None and not self.changed and not self.claimed and _CLAIM.search(answer):
            self.claimed = True
            nudge = ("You answered that something was changed, but no file has been changed in "
                     "this task: no write_file or edit_file call succeeded. Make the change now "
                     "with a tool call, or answer that it is not done.")
        missing = self._missing() if nudge is None else None
        if missing is not None:
            self.asked.remove(missing)
            nudge = (f"The task asks for {missing}, but no call has written it. Write it now "
                     f"with write_file, doing what the task says: {self.specs[missing]!r}. "
                     "Then answer.")
        unmade = self._unmade(answer) if nudge is None and not self.claimed else None
        if unmade is not None:
            self.claimed = True
            made = ", ".join(sorted(p for p in self.written if p)) or "none"
            nudge = (f"You answered that {unmade} was changed, but no call changed it in this "
                     f"task (files changed: {made}). Change it now with a tool call (read it "
                     "first), or correct your answer.")
        if nudge is None and self.check_changes and self.unchecked and not self.asked_check:
            self.asked_check = True
            nudge = ("Before you finish, check your change: read the changed file or run it, "
                     "and fix what is wrong. If it is right, give your answer again.")
        self.nudges += nudge is not None
        return nudge

    def _note(self, call: ToolCall) -> None:
        path = call.arguments.get("path")
        if call.name in READERS | WRITERS and isinstance(path, str):
            self.known.add(norm_path(path))
            self.seen.add(norm_path(path))

    def _wrote(self, call: ToolCall, result: ToolResult) -> None:
        """Note the files a changing call changed (all of them, or that it is not known)."""
        path = call.arguments.get("path")
        if call.name in WRITERS and isinstance(path, str):
            self.written.add(norm_path(path))
        if toolmeta.changes_complete(result.meta):
            self.written.update(norm_path(str(c["path"])) for c in toolmeta.changes(result.meta))
        elif toolmeta.any_changes(result.meta):
            self.written.add("")  # some files changed, which is not known

    def _missing(self) -> str | None:
        """A file the request asks to be made that no call wrote and no tool showed."""
        if "" in self.written:
            return None
        done = self.written | {posixpath.basename(p) for p in self.written}
        shown = self.seen | {posixpath.basename(p) for p in self.seen}
        for name in self.asked:
            if norm_path(name) not in done and norm_path(name) not in shown:
                return name
        return None

    def _unmade(self, answer: str) -> str | None:
        """A file the answer says was changed that the tools showed and no call changed (in a
        sentence that names no file a call changed)."""
        if "" in self.written:
            return None
        done = self.written | {posixpath.basename(p) for p in self.written}
        shown = self.seen | {posixpath.basename(p) for p in self.seen}
        for sentence in _SENTENCE.split(answer):
            if not _CLAIM.search(sentence):
                continue
            names = [str(name) for name in _PATH.findall(sentence)]
            if any(norm_path(name) in done for name in names):
                continue  # "made count_lines.py, which counts the lines of data.txt"
            for name in names:
                if norm_path(name) in shown:
                    return name
        return None


def _retryable(call: ToolCall, result: ToolResult) -> str | None:
    """A nudge for a failure the model should fix rather than report: a failed change, a
    command that does not exist, a search that found nothing (None for anything else)."""
    first = _first_line(result.output)
    if call.name in WRITERS and not result.ok:
        return (f"Your {call.name} call failed, so nothing was changed: {first} Fix the call "
                "and try again (read the file first if you have not), or answer that it cannot "
                "be done.")
    if call.name == "search_files" and result.ok and toolmeta.matches(result.meta) == 0:
        return ("Your search found no matches, which does not answer the question. Look "
                "another way before you answer: list the files, then read the likely ones.")
    left = toolmeta.still_there(result.meta) if call.name == "edit_file" and result.ok else {}
    if left:
        names = ", ".join(f"'{name}' (line {', '.join(map(str, lines))})"
                          for name, lines in left.items())
        return (f"Your edit of {call.arguments.get('path')} left {names} in the file, as its "
                "result notes. If the task means every use, change those too; if they should "
                "stay, give your answer again.")
    if toolmeta.exit_code(result.meta) == _NOT_FOUND and not result.ok:
        missing = _MISSING.search(result.output)
        program = f"'{missing[1]}'" if missing else "a program it uses"
        # python3 is in every sandbox image: the toolbox runs on it.
        return (f"Your command failed: {program} is not installed in the sandbox (exit code "
                "127). Do it another way with what is there (python3 is; tests run with "
                "python3 -m unittest or python3 FILE), or answer that it cannot be done.")
    return None


def _diff_counts(diff: str) -> tuple[int, int]:
    """(lines removed, lines added) by a unified diff (0, 0 when it is not one)."""
    removed = added = 0
    in_hunk = False
    for line in diff.split("\n"):
        in_hunk = in_hunk or line.startswith("@@")
        if in_hunk:
            removed += line.startswith("-")
            added += line.startswith("+")
    return removed, added


def _first_line(output: str) -> str:
    return (output.strip().splitlines() or ["(no output)"])[0]


def _call_key(call: ToolCall) -> str:
    return json.dumps([call.name, call.arguments], sort_keys=True, default=str)
