"""The six built-in tools. Their semantics (path checks, caps, timeouts) live in the toolbox;
here are only the argument models the model is offered and validated against, built from the
toolbox's one declaration of them (executor/toolbox/contract.py)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import PydanticUndefined

from executor import toolmeta
from executor.errors import SandboxAgentError
from executor.messages import ToolResult
from executor.toolbox.contract import BOOL, INT, NUMBER, STR, TOOL_ARGS, Arg
from executor.tools.base import Preview, RiskLevel, Tool, ToolContext

if TYPE_CHECKING:
    from executor.toolmeta import PreviewFacts

ABSENT = "absent"
"""`expect_sha256` of a file that did not exist when the write was approved (toolbox.ABSENT)."""
FAILS = "fails"
"""`expect_sha256_after` of a call whose preview said it would fail (toolbox.FAILS)."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


_TYPES: dict[str, type] = {STR: str, INT: int, BOOL: bool, NUMBER: int}
"""The Python type offered for each toolbox kind (a NUMBER is offered as whole seconds)."""


def _field(arg: Arg) -> tuple[Any, Any]:
    """A pydantic field for one toolbox argument: optional ones default to None unless the
    contract names another default, and then they are not nullable."""
    kind = _TYPES[arg.kind]
    info = Field(PydanticUndefined if arg.required else arg.default, description=arg.doc,
                 ge=arg.low, le=arg.high)
    return (kind if arg.required or arg.default is not None else kind | None), info


def args_model(tool: str) -> type[BaseModel]:
    """The model of what the model may pass `tool`: contract.TOOL_ARGS less host-only ones."""
    fields: dict[str, Any] = {
        name: _field(arg) for name, arg in TOOL_ARGS[tool].items() if not arg.host_only}
    title = "".join(part.title() for part in tool.split("_")) + "Args"
    return create_model(title, __base__=_Args, __module__=__name__, **fields)


ReadFileArgs = args_model("read_file")
WriteFileArgs = args_model("write_file")
EditFileArgs = args_model("edit_file")
SearchFilesArgs = args_model("search_files")
ListFilesArgs = args_model("list_files")
RunShellCommandArgs = args_model("run_shell_command")


class SandboxTool(Tool):
    """A tool whose work is done by the toolbox inside the container."""

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        return ctx.sandbox.call(self.name, {**args.model_dump(exclude_none=True), **ctx.host_args})


def _lines(text: str) -> list[str]:
    """Lines split at newlines only (a stray CR stays visible inside its line)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


class FileWriteTool(SandboxTool):
    """write_file and edit_file: approved on the toolbox's diff against the file on disk."""

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        result = super().call(args, ctx)
        if result.ok or not toolmeta.toolbox_restarted(result.meta):
            return result
        return self._after_restart(args, ctx, result)

    def _after_restart(self, args: Any, ctx: ToolContext, result: ToolResult) -> ToolResult:
        """The toolbox was restarted before it answered, so the write may have landed: look.

        When the file now holds exactly the bytes this call was to write (the approved
        sha256_after, or a write_file's content), the result says it was written and carries
        the hashes, so the audit keeps its `write` record; otherwise the model is told to look.
        """
        expected = ctx.host_args.get("expect_sha256_after")
        try:
            now = ctx.sandbox.preview(self.name, args.model_dump(exclude_none=True))
        except SandboxAgentError:
            now = ToolResult.error("no preview")
        facts = toolmeta.preview_facts(now.meta)
        if expected is None and self.name == "write_file":
            expected = facts["sha256_after"]  # the hash of the content, whatever was there
        current = facts["sha256_before"] if now.ok else None
        if not expected or expected == FAILS or current != expected:
            return ToolResult.error(f"{result.output} The change may or may not have been made: "
                                    f"read '{args.path}' before changing it again.", **result.meta)
        before = ctx.host_args.get("expect_sha256")
        return ToolResult(ok=True, output=(
            f"wrote '{args.path}'; the toolbox was restarted before it answered, and the file "
            f"holds the content this call was to write."), meta=toolmeta.after_restart(
            result.meta, path=facts["resolved"] or args.path,
            before=None if before in (None, ABSENT) else before, after=expected,
            before_unknown=before is None))

    def preview(self, args: Any, ctx: ToolContext) -> Preview:
        """The real diff, the real path behind a symlink, and a guard against later changes."""
        result = ctx.sandbox.preview(self.name, args.model_dump(exclude_none=True))
        if not result.ok:  # the toolbox could not say: show the request, promise nothing
            return Preview(self.describe(args), error=f"no preview: {result.output}")
        facts = toolmeta.preview_facts(result.meta)
        # The write goes ahead only if the file is still what the person was shown.
        guard = {"expect_sha256": facts["sha256_before"] or ABSENT} if facts["resolved"] else {}
        if facts["error"]:  # shown as failing: it must not write anything then
            return Preview(self.describe(args), error=facts["error"],
                           host_args={**guard, "expect_sha256_after": FAILS} if guard else {})
        if guard and facts["sha256_after"]:  # and it writes exactly what the diff showed
            guard["expect_sha256_after"] = facts["sha256_after"]
        body = result.output or "(no change: the file already has this content)"
        return Preview(f"{self._title(args, facts)}\n{body}", host_args=guard)

    def _title(self, args: Any, facts: PreviewFacts) -> str:
        """`write_file link.py → src/app.py (symlink, existing file, …)`."""
        shown = f"{args.path} → {facts['resolved']}" if facts["symlink"] else args.path
        said = ["symlink"] * facts["symlink"]
        said += ["existing file" if facts["exists"] else "new file", *self._facts(args)]
        return f"{self.name} {shown} ({', '.join(said)})"

    def _facts(self, args: Any) -> list[str]:
        return []


class ReadFile(SandboxTool):
    name = "read_file"
    description = (
        "Read a text file from start_line (1: its first line); its lines are shown numbered, "
        "a long file a page at a time."
    )
    Args = ReadFileArgs
    # start_line is offered to weak models too: with a page that fits their window, it is
    # how they read past the first page, or from a line a search found.
    core_args = ("path", "start_line")
    read_only_safe = True

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        page = {"page_lines": ctx.read_page} if ctx.read_page else {}
        return ctx.sandbox.call(self.name, {**args.model_dump(exclude_none=True), **page,
                                            **ctx.host_args})


def read_page(budget: int) -> int:
    """The `read_file` page for a model whose window is `budget` tokens: a quarter of it, at
    about 16 tokens a numbered line (measured with the embedded model on webcolors' tests:
    5,200 tokens for 330 lines). 128 lines in the embedded model's 8,192."""
    return max(40, budget // 4 // 16)


class ListFiles(SandboxTool):
    name = "list_files"
    description = "List all files and directories under a path, recursively (skips .git)."
    Args = ListFilesArgs
    core_args = ("path",)
    read_only_safe = True


class SearchFiles(SandboxTool):
    name = "search_files"
    description = (
        "Search file contents for a regular expression; returns path:line:text. A pattern in "
        "lower case matches any case; one with an upper-case letter matches exactly."
    )
    Args = SearchFilesArgs
    core_args = ("pattern", "path")
    read_only_safe = True


class WriteFile(FileWriteTool):
    name = "write_file"
    description = (
        "Create a file, or replace all of an existing one, with the given content (parent "
        "directories are created)."
    )
    Args = WriteFileArgs
    core_args = ("path", "content")
    risk = RiskLevel.MEDIUM
    approval = True

    def describe(self, args: Any) -> str:
        added = "\n".join(f"+{line}" for line in _lines(args.content))
        return f"write_file {args.path} ({len(args.content)} characters)\n{added}"

    def _facts(self, args: Any) -> list[str]:
        size = len(args.content.encode("utf-8", "surrogatepass"))
        count = len(_lines(args.content))
        return [f"{count} line{'s' * (count != 1)}", f"{size} byte{'s' * (size != 1)}"]


class EditFile(FileWriteTool):
    name = "edit_file"
    description = (
        "Change part of a file: replace old_text, copied exactly from the file and matching "
        "once, with new_text. The rest of the file stays as it is."
    )
    Args = EditFileArgs
    core_args = ("path", "old_text", "new_text")
    risk = RiskLevel.MEDIUM
    approval = True

    def describe(self, args: Any) -> str:
        # Lines without their ends: a last line lacking "\n" would run into the next one.
        old, new = _lines(args.old_text or ""), _lines(args.new_text)
        diff = difflib.unified_diff(old, new, f"a/{args.path}", f"b/{args.path}", n=2, lineterm="")
        return f"edit_file {args.path}" + ("" if not args.replace_all else " (replace all)") + (
            "\n" + "\n".join(diff)
        )

    def _facts(self, args: Any) -> list[str]:
        return ["replace all"] * args.replace_all


class RunShellCommand(SandboxTool):
    name = "run_shell_command"
    description = (
        "Run a shell command in the project root (no network unless the system prompt names "
        "hosts). Returns exit code, stdout, stderr."
    )
    Args = RunShellCommandArgs
    core_args = ("command",)
    risk = RiskLevel.HIGH

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        """Run it in the toolbox; its output goes to `ctx.on_output` while it runs."""
        return ctx.sandbox.call(self.name, {**args.model_dump(exclude_none=True), **ctx.host_args},
                                on_output=ctx.on_output)

    def describe(self, args: Any) -> str:
        return f"$ {args.command}"

    def preview(self, args: Any, ctx: ToolContext) -> Preview:
        """The whole command (folded only when taller than the screen), and every simple
        command in it (executor/shell.py)."""
        from executor.shell import analyze

        # Each program's first command comes first, and of those the ones that may change
        # something before the ones that only look: a summary cut short by a thousand `:`
        # commands, or by seventy different harmless ones, still names the one `curl`.
        seen: set[str] = set()
        novel: list[tuple[str, str]] = []
        rest: list[str] = []
        for command in analyze(args.command).commands:
            program = command.program or command.shown
            if program in seen:
                rest.append(command.shown)
            else:
                novel.append((program, command.shown))
            seen.add(program)
        novel.sort(key=lambda item: _only_looks(*item))  # stable: the order within each kind
        return Preview(self.describe(args), fold=False,
                       runs=(*(shown for _, shown in novel), *rest))


BUILTIN_TOOLS: tuple[type[Tool], ...] = (
    ReadFile, ListFiles, SearchFiles, WriteFile, EditFile, RunShellCommand,
)


_LOOKING_PROGRAMS = frozenset({
    ":", "true", "false", "echo", "printf", "cat", "ls", "pwd", "head", "tail", "wc", "grep",
    "rg", "date", "whoami", "id", "uname", "test", "[", "basename", "dirname", "which", "type",
    "stat", "file", "sort", "uniq", "cut", "tr", "nl", "less", "more", "diff", "cmp", "du", "df",
    "hostname", "sleep", "seq", "yes", "expr",
})
"""Programs that only print (with no redirection): listed after the others in a summary."""


def _only_looks(program: str, shown: str) -> bool:
    return program in _LOOKING_PROGRAMS and ">" not in shown
