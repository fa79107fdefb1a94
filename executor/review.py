"""Code review as a library: the diff to review, the prompt, structured findings, the report.

    with Runner.build(root, read_only=True, tools=[tool := SubmitReview()], ...) as runner:
        report = run_review(runner, ReviewRequest(root=root, diff_base="origin/main"), tool)

or simply `review(root, diff_base=..., **runner_options)`. The CLI (`sandbox-agent review`) only
renders the `ReviewReport` (executor/review_formats.py: markdown, JSON, SARIF, GitHub).

Findings come, in order of preference, from
1. the `submit_review` tool: its arguments are a `Finding` list, so the json and constrained
   tool protocols force schema-valid findings and native tool calling validates them;
2. a JSON object with `findings` in the final answer;
3. lines like `- src/app.py:12 high: title` in the final answer.
Everything in a finding was written by the model: print it inert (executor/text.py).

The diff is taken with git on the host, hardened against a repository's own configuration
(no fsmonitor, no external diff or textconv programs, no hooks), and capped: what was cut is
reported (`DiffScope`). Untracked files are reviewed as new files unless asked otherwise.

A diff longer than half the room the model's window leaves beside the system prompt and the
tools is reviewed in parts (`split_diff`: whole files packed together, a bigger file by hunks,
a bigger hunk by lines), one request each in the same conversation, the findings of all parts
merged: nothing of the diff is dropped to fit, and no request is longer than the window.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor.agent import RunResult
from executor.context import TARGET_RATIO, ContextWindow, TokenCounter
from executor.errors import AgentError, ConfigError, SandboxAgentError
from executor.hooks import WarningEvent
from executor.messages import Message, ToolResult
from executor.models.parsing import json_objects
from executor.runner import Runner
from executor.runreport import ErrorReport, error_report
from executor.state import open_private
from executor.text import UNSAFE_RE
from executor.tools.base import RiskLevel, Tool, ToolContext

SCHEMA_VERSION = 2
"""Version of the review report (docs/REVIEW.md)."""
Severity = Literal["low", "medium", "high"]
SEVERITIES: tuple[Severity, ...] = ("low", "medium", "high")
MAX_DIFF_CHARS = 60_000
"""Diff characters put in the prompt; the rest is named, and the model may read it with tools."""
MAX_UNTRACKED_BYTES = 200_000
"""An untracked file larger than this is listed, not inlined."""

REVIEW_PROMPT = (
    "Review the code of this project{scope}. Inspect the relevant files with the tools first. "
    "Only report problems you have seen in the code. Then call the submit_review tool once "
    "with a one-paragraph summary and your findings, each with the file (relative path), the "
    "line, the severity (high, medium or low), a short title and a concrete suggestion in the "
    "body. After that, reply with a one-sentence final answer."
)
SUBMITTED_RESULT = "Review recorded ({count} findings). Now reply with a one-sentence final answer."
SUBMIT_AGAIN = (
    "You answered without calling submit_review, so your review was not recorded. Call "
    "submit_review now: a one-paragraph summary and every problem you found in the code, each "
    "with its file, line, severity, title and suggested fix (an empty list only if there is "
    "no problem at all)."
)
"""Sent once when the model answers in prose with no findings a report can read: small models
(the embedded 1.5B) did so every time and their reviews came out empty."""


MAX_TITLE, MAX_TEXT, MAX_FINDINGS = 200, 1200, 50
"""Bounds in the schema the server is given: a small model at temperature 0 repeated one
sentence in its summary until its reply was cut off, invalid, every time it was asked."""


class Finding(BaseModel):
    """One problem the review found."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1)
    """Path relative to the project root."""
    line: int | None = Field(default=None, ge=1)
    """1-based line, when the finding is about one."""
    severity: Severity
    title: str = Field(min_length=1, max_length=MAX_TITLE)
    """One line."""
    body: str = Field(default="", max_length=MAX_TEXT)
    """What is wrong and what to do about it."""


NO_LOCATION = "the model named no file inside the project for it"
"""A located finding's `location_note` when the path it gave was refused."""


class ReviewFinding(Finding):
    """A finding as the report holds it: `file` a normalised path inside the root, or None
    (the model gave none there: a URL, an absolute path, `../`…), `title` one line."""

    file: str | None = None  # type: ignore[assignment]
    """Path relative to the project root; None when the model's was not one (`location_note`)."""
    location_note: str | None = None
    """Why the finding has no file, when it has none."""

    @property
    def where(self) -> str:
        """`file:line` for one-line displays, or that there is no location."""
        return f"{self.file}:{self.line or '-'}" if self.file else "(no location)"


class SubmitReviewArgs(BaseModel):
    """The arguments of `submit_review`."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(max_length=MAX_TEXT,
                         description="One paragraph: what the code or change does, how it is.")
    findings: list[Finding] = Field(max_length=MAX_FINDINGS,
                                    description="Problems seen in the code; [] for none.")


class SubmitReview(Tool):
    """Where the model hands in its review: host-side, it only records the arguments."""

    name = "submit_review"
    description = ("Hand in the review: a summary and the findings (file, line, severity "
                   "high/medium/low, title, body). Call it once, when you are done looking.")
    Args = SubmitReviewArgs
    risk = RiskLevel.LOW
    read_only_safe = True
    approval = False

    def __init__(self) -> None:
        self.submitted: SubmitReviewArgs | None = None

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        """Keep the latest submission (a corrected one replaces the first)."""
        self.submitted = args
        return ToolResult(ok=True, output=SUBMITTED_RESULT.format(count=len(args.findings)))


class DiffScope(BaseModel):
    """What part of the changes the review saw in its prompt."""

    base: str
    files: list[str] = Field(default_factory=list)
    """Every changed file (untracked ones included when asked for)."""
    untracked: list[str] = Field(default_factory=list)
    """Files git does not track yet, reviewed as new files."""
    included: list[str] = Field(default_factory=list)
    """Files whose whole diff is in the prompt."""
    partial: list[str] = Field(default_factory=list)
    """Files whose diff was cut."""
    omitted: list[str] = Field(default_factory=list)
    """Files whose diff did not fit at all (named in the prompt, readable with the tools)."""
    total_chars: int = 0
    included_chars: int = 0
    parts: int = 1
    """Requests the diff was reviewed in (more than one when it did not fit the window)."""
    failed_parts: list[str] = Field(default_factory=list)
    """Parts whose review ended without findings, and why (`part 2 of 3: ...`)."""

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return bool(self.partial or self.omitted)


class ReviewRequest(BaseModel):
    """What to review."""

    root: Path
    diff_base: str | None = None
    """Review only the changes since this git ref (None: the whole project)."""
    untracked: bool = True
    """With a diff base: also review files git does not track yet."""
    max_diff_chars: int = MAX_DIFF_CHARS


class ToolCallSummary(BaseModel):
    """A tool call the review made."""

    tool: str
    arguments: dict[str, Any]
    ok: bool


class ReviewReport(BaseModel):
    """The review report (schema version 2, docs/REVIEW.md)."""

    schema_version: int = SCHEMA_VERSION
    status: Literal["ok", "no_changes", "error"]
    root: str
    diff_base: str | None = None
    provider: str = ""
    model: str = ""
    session: str | None = None
    turns: int = 0
    summary: str = ""
    findings: list[ReviewFinding] = Field(default_factory=list)
    findings_source: Literal["tool", "json", "text", "none"] = "none"
    """Where the findings were read from (see the module docstring)."""
    diff: DiffScope | None = None
    tool_calls: list[ToolCallSummary] = Field(default_factory=list)
    error: ErrorReport | None = None

    def at_or_above(self, severity: Severity) -> list[ReviewFinding]:
        """The findings of `severity` or worse."""
        floor = SEVERITIES.index(severity)
        return [f for f in self.findings if SEVERITIES.index(f.severity) >= floor]


# -- the diff ------------------------------------------------------------------------------------

_SAFE_GIT = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
             "-c", "diff.external=", "-c", "core.pager=cat", "-c", "protocol.allow=never")
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_LAZY_FETCH": "1"}
_MAX_GIT_FILE = 256 << 20
"""The index and packed-refs are copied up to this size (bigger: the diff is refused)."""


class _Shadow:
    """A git directory of our own for the repository around `root`: its refs, HEAD and index
    copied (read without following links), its objects reached through `alternates`, and a
    config that says nothing but the object format. git then reads no config the repository
    wrote: no filter, diff driver, fsmonitor, hook, lazy fetch of a partial clone or
    transport command of it can run on the host, however it is spelled or included."""

    def __init__(self, root: Path) -> None:
        import tempfile

        self.root = root
        self.top, git_dir, common = _find_repository(root)
        self._tmp = tempfile.TemporaryDirectory(prefix="sandbox-agent-review-")
        self.dir = Path(self._tmp.name)
        fmt = dict(config_values_of(common / "config")).get("extensions.objectformat", "")
        version = "1" if fmt else "0"
        (self.dir / "config").write_text(
            f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
            + (f"[extensions]\n\tobjectformat = {fmt}\n" if re.fullmatch(r"sha1|sha256", fmt)
               else ""))
        (self.dir / "objects" / "info").mkdir(parents=True)
        (self.dir / "objects" / "info" / "alternates").write_text(
            os.path.realpath(common / "objects") + "\n")
        for name, source in (("HEAD", git_dir / "HEAD"), ("packed-refs", common / "packed-refs"),
                             ("index", git_dir / "index")):
            _copy_regular(source, self.dir / name)
        _copy_tree(common / "refs", self.dir / "refs")
        (self.dir / "info").mkdir()
        _copy_regular(common / "info" / "exclude", self.dir / "info" / "exclude")
        for shared in _regular_names(git_dir, "sharedindex."):  # a split index's other half
            _copy_regular(git_dir / shared, self.dir / shared)

    def run(self, *args: str) -> str:
        env = {**os.environ, **_GIT_ENV, "GIT_DIR": str(self.dir),
               "GIT_WORK_TREE": str(self.top), "GIT_INDEX_FILE": str(self.dir / "index")}
        for name in ("GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                     "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_SSH", "GIT_SSH_COMMAND",
                     "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_OBJECT_DIRECTORY",
                     "GIT_COMMON_DIR"):
            env.pop(name, None)
        return _run_git(["git", *_SAFE_GIT, *args], args[0], cwd=self.root, env=env)

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> _Shadow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def config_values_of(path: Path) -> list[tuple[str, str]]:
    from executor.sandbox.protect import config_values

    return config_values(path)


def _find_repository(root: Path) -> tuple[Path, Path, Path]:
    """(work tree top, git dir, common dir) of the repository `root` is in: the nearest `.git`
    at or above it (a directory, or a `gitdir:` file and its `commondir`)."""
    from executor.sandbox.protect import common_dir, gitdir_target

    for top in (root, *root.parents):
        entry = top / ".git"
        if entry.is_symlink() or not os.path.lexists(entry):
            continue
        git_dir = entry if entry.is_dir() else gitdir_target(entry)
        if git_dir is None:
            break
        common = common_dir(git_dir) or git_dir
        if not (common / "objects").is_dir():
            break
        _refuse_borrowed(top, git_dir, common)
        return top, git_dir, common
    raise ConfigError(f"{root} is not in a git repository",
                      fix="--diff-base needs a git repository and an existing ref")


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _refuse_borrowed(top: Path, git_dir: Path, common: Path) -> None:
    """The project tree must not lend itself another repository's history: a `.git` file, a
    `commondir` or an `alternates` naming a git dir outside the project would put that
    repository's files (another checkout, a private clone) into the diff the model is sent.
    A git dir outside is taken only when it names this work tree back, as `git worktree add`
    (`gitdir`) and a submodule (`core.worktree`) leave it: files the project cannot write."""
    top = top.resolve()
    fix = ("review the repository's own checkout, or make this one stand alone "
           "(`git repack -a -d`, then remove .git/objects/info/alternates)")
    if not _inside(git_dir, top) and not _names_back(git_dir, top):
        raise ConfigError(f"{top}/.git points at a git dir outside the project ({git_dir}) "
                          "that does not name this work tree back", fix=fix)
    if _inside(git_dir, top) and not _inside(common, top):
        raise ConfigError(f"{git_dir} borrows the history of a git dir outside the project "
                          f"({common})", fix=fix)
    if not _inside(common, top):
        return  # the host's own linked worktree or submodule: the project wrote none of it
    # The object store, and every alternate git would follow from it (git goes 5 deep), must
    # stay in the project: a linked `objects` or a chain of alternates reaches any clone.
    todo, seen = [(common / "objects", 0)], set()
    while todo:
        objects, depth = todo.pop()
        real = objects.resolve()
        if not _inside(real, top):
            raise ConfigError(f"{objects} leads to objects outside the project ({real})",
                              fix=fix)
        if real in seen or depth > _MAX_ALTERNATES_DEPTH:
            continue
        seen.add(real)
        for line in _read_optional(real / "info" / "alternates").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                todo.append((real / line, depth + 1))


_MAX_ALTERNATES_DEPTH = 5
"""How deep git follows alternates of alternates."""


def _names_back(git_dir: Path, top: Path) -> bool:
    back = _read_optional(git_dir / "gitdir").strip()
    if back and (git_dir / back).resolve() == top / ".git":
        return True
    worktree = dict(config_values_of(git_dir / "config")).get("core.worktree", "")
    return bool(worktree) and (git_dir / worktree).resolve() == top


def _read_optional(path: Path) -> str:
    """A small regular file's text, read without following a link or blocking; else ""."""
    from executor.sandbox.protect import small_text

    return small_text(path) or ""


def _copy_regular(source: Path, target: Path) -> None:
    """Copy `source` when it is a regular file (no link followed); nothing when it is absent."""
    try:
        fd = open_private(source, os.O_RDONLY, owner=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(_MAX_GIT_FILE + 1)
        times = os.fstat(stream.fileno())
    if len(data) > _MAX_GIT_FILE:
        raise ConfigError(f"{source} is too big to review from ({len(data)} bytes or more)")
    target.write_bytes(data)
    # The index's own mtime tells git which entries are "racily clean" (changed within the
    # same clock tick as the index was written): a copy must keep it, or such a change is
    # taken for no change.
    os.utime(target, ns=(times.st_atime_ns, times.st_mtime_ns))


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a refs tree: directories and regular files only, never through a link."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        entries = list(os.scandir(source))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _copy_tree(Path(entry.path), target / entry.name)
        elif entry.is_file(follow_symlinks=False):
            _copy_regular(Path(entry.path), target / entry.name)


def _regular_names(folder: Path, prefix: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder)
                if e.name.startswith(prefix) and e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _run_git(command: list[str], what: str, *, cwd: Path, env: dict[str, str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, timeout=60, check=False, env=env,
                              cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run git: {exc}", fix="install git") from exc
    if done.returncode != 0:
        reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no reason"])[0]
        raise ConfigError(f"git {what} failed: {reason[:300]}",
                          fix="--diff-base needs a git repository and an existing ref")
    return done.stdout.decode("utf-8", "replace")


def git_diff(root: Path, base: str, shadow: _Shadow | None = None) -> str:
    """`git diff BASE` of the working tree, through a git dir of our own (`_Shadow`)."""
    if shadow is None:
        with _Shadow(root) as own:
            return git_diff(root, base, own)
    try:
        return shadow.run("diff", "--no-color", "--no-ext-diff", "--no-textconv",
                          "--end-of-options", base, "--")
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("git diff failed", f"git diff {base} failed"),
                          fix=exc.fix) from None


def _names(output: str) -> list[str]:
    return [name for name in output.split("\0") if name]


def _untracked(shadow: _Shadow) -> list[str]:
    return _names(shadow.run("ls-files", "--others", "--exclude-standard", "-z"))


def _new_file_diff(root: Path, name: str) -> str:
    """A unified diff creating `name` (read without following links; binaries not inlined)."""
    header = f"diff --git a/{name} b/{name}\nnew file (untracked)\n--- /dev/null\n+++ b/{name}\n"
    try:
        fd = open_private(root / name, os.O_RDONLY, owner=False)
    except OSError as exc:
        return header + f"(not read: {exc.strerror or exc})\n"
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(MAX_UNTRACKED_BYTES + 1)
    if len(data) > MAX_UNTRACKED_BYTES or b"\0" in data:
        return header + "(binary or large file: not shown)\n"
    lines = data.decode("utf-8", "replace").splitlines()
    return header + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)


def _per_file(diff: str) -> Iterator[tuple[str, str]]:
    """(file, its part of the diff) for each `diff --git` section."""
    for part in re.split(r"(?m)^(?=diff --git )", diff):
        if part.strip():
            match = re.match(r"diff --git a/(.*?) b/(.*)", part)
            yield (match.group(2) if match else "?"), part


def collect_diff(request: ReviewRequest) -> tuple[str, DiffScope]:
    """The diff text for the prompt (capped) and what it covers."""
    assert request.diff_base is not None
    root, base = request.root, request.diff_base
    with _Shadow(root) as shadow:
        diff = git_diff(root, base, shadow)
        untracked = _untracked(shadow) if request.untracked else []
    diff += "".join(_new_file_diff(root, name) for name in untracked)
    scope = DiffScope(base=base, untracked=untracked, total_chars=len(diff))
    kept: list[str] = []
    for name, part in _per_file(diff):
        scope.files.append(name)
        room = request.max_diff_chars - scope.included_chars
        if len(part) <= room:
            kept.append(part)
            scope.included.append(name)
        elif room > 200 and not scope.partial:
            kept.append(part[:room] + f"\n[... the rest of {name}'s diff was cut ...]\n")
            scope.partial.append(name)
        else:
            scope.omitted.append(name)
            continue
        scope.included_chars += min(len(part), room)
    return "".join(kept), scope


PART_NOTE = ("This is part {part} of {parts} of the diff: review only what it shows (the "
             "other parts are reviewed apart) and call submit_review with this part's findings.")
MIN_PART_TOKENS = 256
"""A window so small that a part would be smaller still is not split further."""


def split_diff(diff: str, limit: int, counter: TokenCounter) -> list[str]:
    """`diff` in parts of at most `limit` tokens: whole files packed in order, a file too big
    by its hunks (each piece repeating the file's header), a hunk too big by lines."""
    pieces = [piece for _, part in _per_file(diff) for piece in _file_pieces(part, limit,
                                                                             counter)]
    parts: list[str] = []
    size = 0
    for piece in pieces:
        cost = counter.count_text(piece)
        if parts and size + cost <= limit:
            parts[-1] += piece
            size += cost
        else:
            parts.append(piece)
            size = cost
    return parts or [diff]


def _file_pieces(part: str, limit: int, counter: TokenCounter) -> list[str]:
    """One file's diff cut at hunks (then lines) into pieces within `limit`, header on each."""
    if counter.count_text(part) <= limit:
        return [part]
    head, *hunks = re.split(r"(?m)^(?=@@ )", part)
    room = max(MIN_PART_TOKENS, limit - counter.count_text(head))
    pieces: list[str] = []
    for hunk in hunks or [head]:
        for chunk in _lines_within(hunk, room, counter):
            pieces.append(chunk if not hunks else head + chunk)
    return pieces


def _lines_within(text: str, limit: int, counter: TokenCounter) -> list[str]:
    """`text` cut at line ends into chunks within `limit` (a single longer line stays whole)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        cost = counter.count_text(line)
        if current and size + cost > limit:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += cost
    return [*chunks, "".join(current)] if current else chunks


def part_limit(runner: Runner) -> tuple[int, TokenCounter] | None:
    """Tokens one part of a diff may take in `runner`'s window, and the counter it counts
    with: a third of what the window's target leaves beside the system prompt and the tools
    (the rest is for the files the model reads and its replies: with half, the embedded model's
    read of a 260-line file was cut, and it read the file again until the coach stopped it).
    None: no window."""
    agent = runner.agent
    window = agent.fitter if agent is not None else None
    if agent is None or not isinstance(window, ContextWindow):
        return None
    system = window.counter.count(Message.system(agent.system_prompt))
    free = int(window.room() * TARGET_RATIO) - system - window.counter.count_text(REVIEW_PROMPT)
    return max(MIN_PART_TOKENS, free // 3), window.counter


def review_prompt(diff: str | None, scope: DiffScope | None,
                  part: tuple[int, int] = (1, 1)) -> str:
    """The request sent to the model (for part `part[0]` of `part[1]` of the diff)."""
    if scope is None or diff is None:
        return REVIEW_PROMPT.format(scope="")
    prompt = REVIEW_PROMPT.format(scope=f", focusing on these changes since {scope.base}")
    if part[1] > 1:
        prompt += " " + PART_NOTE.format(part=part[0], parts=part[1])
    prompt += f"\n\n```diff\n{diff}```"
    if scope.truncated:
        cut = scope.partial + scope.omitted
        prompt += ("\n\nThe diff was too long to show whole. Not shown (read them with the "
                   f"tools if they matter): {', '.join(cut)}")
    return prompt


# -- findings from the answer --------------------------------------------------------------------

_LOOSE_SEVERITY = {"critical": "high", "error": "high", "major": "high", "warning": "medium",
                   "minor": "low", "info": "low", "nit": "low", "note": "low"}
_LINE_FINDING = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])\s+(?:\*\*|`)?(?P<file>[\w./@+-]+?\.[\w]+)(?::(?P<line>\d+))?"
    r"(?:\*\*|`)?\s*[:,\-\u2013\u2014]?\s*\(?\*{0,2}(?P<sev>high|medium|low)\*{0,2}\)?\s*[:\-\u2013\u2014]\s*"
    r"(?P<rest>.+)$", re.IGNORECASE)
_SEVERITY_FIRST = re.compile(
    r"^\s*(?:[-*+]|\d+[.)])\s+\*{0,2}\[?(?P<sev>high|medium|low)\]?\*{0,2}\s*[:\-\u2013\u2014]?\s*`?"
    r"(?P<file>[\w./@+-]+?\.[\w]+)(?::(?P<line>\d+))?`?\s*[:\-\u2013\u2014]\s*(?P<rest>.+)$",
    re.IGNORECASE)


def clean_path(path: str) -> str:
    """A finding's path as the model meant it (it may write `/workspace/...` or `./...`)."""
    return path.strip().strip("`").removeprefix("/workspace/").removeprefix("./")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def place(path: str, root: str) -> str | None:
    """`path` as a normalised path relative to `root` and inside it, or None: a URL, an
    absolute path elsewhere, a `../` out, a backslash or a control character is no place a
    report may point a code-scanning UI or a reader to."""
    path = clean_path(path)
    top = root.rstrip("/") + "/"
    if path.startswith(top):
        path = path[len(top):]
    if (not path or path.startswith("/") or "\\" in path or _SCHEME.match(path)
            or UNSAFE_RE.search(path) or any(c in path for c in "\t\n")):
        return None
    normal = posixpath.normpath(path)
    return None if normal in (".", "..") or normal.startswith("../") else normal


def one_line(text: str) -> str:
    """`text` with every run of white space (line breaks of any kind too) one space."""
    return " ".join(text.split())


def placed(finding: Finding, root: str) -> ReviewFinding:
    """The report's form of a finding the model wrote (see `ReviewFinding`)."""
    file = place(finding.file, root)
    return ReviewFinding(file=file, line=finding.line if file else None,
                         severity=finding.severity,
                         title=one_line(finding.title)[:MAX_TITLE] or "(no title)",
                         body=finding.body.strip(),
                         location_note=None if file else NO_LOCATION)


def _finding(raw: Any) -> Finding | None:
    """A Finding from a loosely shaped object, or None when it has no file or title."""
    if not isinstance(raw, dict):
        return None
    severity = str(raw.get("severity", "medium")).lower()
    severity = _LOOSE_SEVERITY.get(severity, severity)
    file, line = str(raw.get("file") or raw.get("path") or ""), raw.get("line")
    head, _, number = file.rpartition(":")
    if head and number.isdigit() and line is None:  # `a.py:12`, not `https://…`
        file, line = head, int(number)
    title = str(raw.get("title") or raw.get("message") or raw.get("body") or "").strip()
    try:
        return Finding(file=clean_path(file), line=line if isinstance(line, int) else None,
                       severity=severity if severity in SEVERITIES else "medium",
                       title=title.splitlines()[0][:MAX_TITLE] if title else "",
                       body=str(raw.get("body") or raw.get("suggestion") or "")[:MAX_TEXT])
    except ValidationError:
        return None


def _from_json(text: str) -> tuple[str, list[Finding]] | None:
    for start, end, value in json_objects(text):
        if isinstance(value, dict) and isinstance(value.get("findings"), list):
            findings = [f for f in map(_finding, value["findings"]) if f is not None]
            summary = str(value.get("summary") or "").strip()
            rest = (text[:start] + text[end:]).replace("```json", "").replace("```", "").strip()
            return summary or rest, findings
    return None


def _from_lines(text: str) -> tuple[str, list[Finding]]:
    """(the text without its finding lines, the findings those lines hold)."""
    findings, kept = [], []
    for line in text.splitlines():
        match = _LINE_FINDING.match(line) or _SEVERITY_FIRST.match(line)
        if not match:
            kept.append(line)
            continue
        rest = match["rest"].strip()
        title = re.split(r"(?<=[.!?])\s", rest, maxsplit=1)[0]
        findings.append(Finding(file=clean_path(match["file"]), severity=match["sev"].lower(),
                                line=int(match["line"]) if match["line"] else None,
                                title=title[:MAX_TITLE],
                                body=rest[len(title):].strip()[:MAX_TEXT]))
    return "\n".join(kept).strip(), findings


def parse_answer(text: str) -> tuple[str, list[Finding], Literal["json", "text", "none"]]:
    """(summary, findings, source) read from a final answer written as text."""
    found = _from_json(text)
    if found is not None:
        return found[0], found[1], "json"
    summary, findings = _from_lines(text)
    return (summary, findings, "text") if findings else (text.strip(), [], "none")


# -- running a review ----------------------------------------------------------------------------


def _base_report(runner: Runner, request: ReviewRequest) -> ReviewReport:
    return ReviewReport(status="ok", root=str(request.root), diff_base=request.diff_base,
                        provider=runner.settings.provider, model=runner.model.name)


def no_changes(runner: Runner, request: ReviewRequest, scope: DiffScope) -> ReviewReport:
    """The report when there is nothing to review: no model, no container."""
    report = _base_report(runner, request)
    report.status, report.diff = "no_changes", scope
    report.summary = f"No changes since {request.diff_base}: nothing to review."
    return report


def run_review(runner: Runner, request: ReviewRequest, tool: SubmitReview) -> ReviewReport:
    """Review with `runner` (built read-only, with `tool` among its tools); never raises for
    a failed run: the report then has status error (and the error)."""
    diff, scope = collect_diff(request) if request.diff_base else (None, None)
    if scope is not None and not scope.files:
        return no_changes(runner, request, scope)
    report = _base_report(runner, request)
    report.diff = scope
    try:
        with runner:
            parts = _parts(runner, diff)
            if scope is not None:
                scope.parts = len(parts)
            if len(parts) > 1:
                result = _review_in_parts(runner, parts, scope, tool)
            else:
                result = runner.run(review_prompt(diff, scope))
                if tool.submitted is None and parse_answer(result.answer)[2] == "none":
                    result = _ask_to_submit(runner, result)
    except SandboxAgentError as exc:
        report.status, report.error = "error", error_report(exc)
        report.session = runner.session_name
        return report
    report.session, report.turns = runner.session_name, result.turns
    report.tool_calls = [ToolCallSummary(tool=r.call.name, arguments=r.call.arguments,
                                         ok=r.result.ok) for r in result.tool_calls]
    _read_findings(report, result.answer, tool)
    return report


def _parts(runner: Runner, diff: str | None) -> list[str | None]:
    """The diff in parts that fit the window (one part: the diff as it is)."""
    fit = part_limit(runner) if diff else None
    if diff is None or fit is None:
        return [diff]
    limit, counter = fit
    return list(split_diff(diff, limit, counter)) if counter.count_text(diff) > limit else [diff]


def _review_in_parts(runner: Runner, parts: list[str | None], scope: DiffScope | None,
                     tool: SubmitReview) -> RunResult:
    """One request per part; `tool.submitted` ends up holding every part's findings."""
    summaries: list[str] = []
    findings: list[Finding] = []
    sources: set[str] = set()
    done = RunResult("", 0, [])
    for number, part in enumerate(parts, 1):
        tool.submitted = None
        try:
            result = runner.run(review_prompt(part, scope, (number, len(parts))))
        except AgentError as exc:  # one part going nowhere must not lose the others
            _part_failed(runner, scope, f"part {number} of {len(parts)}: {exc.message}")
            result = _ask_to_submit(runner, RunResult("", 0, []))
        if tool.submitted is None and parse_answer(result.answer)[2] == "none":
            result = _ask_to_submit(runner, result)
        summary, found, source = _part_findings(result.answer, tool)
        summaries += [summary] if summary else []
        findings += [f for f in found if f not in findings]
        sources.add(source)
        done = RunResult(result.answer, done.turns + result.turns,
                         [*done.tool_calls, *result.tool_calls])
    tool.submitted = SubmitReviewArgs.model_construct(
        summary="\n\n".join(summaries), findings=findings)
    return done


def _part_failed(runner: Runner, scope: DiffScope | None, why: str) -> None:
    """Say (on stderr and in the report) that a part's review ended early."""
    runner.hooks.emit(WarningEvent(message=f"the review of {why}"))
    if scope is not None:
        scope.failed_parts.append(why)


def _part_findings(answer: str, tool: SubmitReview) -> tuple[str, list[Finding], str]:
    """(summary, findings, source) of one part's review."""
    if tool.submitted is not None:
        return tool.submitted.summary.strip(), list(tool.submitted.findings), "tool"
    return parse_answer(answer)


def _ask_to_submit(runner: Runner, first: RunResult) -> RunResult:
    """Ask once more for the findings (SUBMIT_AGAIN); the first answer stands if that fails."""
    try:
        again = runner.run(SUBMIT_AGAIN)
    except SandboxAgentError as exc:
        runner.hooks.emit(WarningEvent(
            message=f"asking the model again for its findings failed: {exc.message}"))
        return first
    return RunResult(again.answer or first.answer, first.turns + again.turns,
                     [*first.tool_calls, *again.tool_calls])


def _read_findings(report: ReviewReport, answer: str, tool: SubmitReview) -> None:
    if tool.submitted is not None:
        findings = tool.submitted.findings
        report.summary = tool.submitted.summary.strip() or answer.strip()
        report.findings_source = "tool"
    else:
        report.summary, findings, report.findings_source = parse_answer(answer)
    report.findings = [placed(f, report.root) for f in findings]


def review(root: str | Path, *, diff_base: str | None = None, untracked: bool = True,
           **options: Any) -> ReviewReport:
    """Review `root` read-only; `options` are those of `Runner.build`."""
    tool = SubmitReview()
    extra = list(options.pop("tools", []))
    options.setdefault("skills_for", "review")
    runner = Runner.build(root, read_only=True, tools=[*extra, tool], **options)
    request = ReviewRequest(root=runner.options.root, diff_base=diff_base, untracked=untracked)
    return run_review(runner, request, tool)
