"""A custom tool: `count_lines`, registered before `Runner.build` and offered to the model.

    python examples/custom_tool.py --root examples/sample-project \\
        --host http://localhost:11434 "How many lines does calc.py have?"

Custom tools run on the host. They reach the project only through the sandbox handle in
their context, so the container's path checks and limits apply to them as to the built-ins.
The run is read-only: `count_lines` is offered because it is marked read-only safe.
"""

from __future__ import annotations

import argparse

from pydantic import BaseModel, ConfigDict, Field

from executor.hooks import Event, ToolCallEvent
from executor.messages import ToolResult
from executor.runner import Runner
from executor.tools import RiskLevel, Tool, ToolContext, register


class CountLinesArgs(BaseModel):
    # The JSON schema the model is offered is generated from this model. No docstring:
    # it would become the schema's description, which the model reads too.
    model_config = ConfigDict(extra="forbid")  # a misspelt argument is an error, not ignored

    path: str = Field(description="Text file, relative to the project root.")


class CountLines(Tool):
    """Counts the lines of a text file in the sandbox."""

    name = "count_lines"
    description = "Count the lines of a text file."
    Args = CountLinesArgs
    risk = RiskLevel.LOW
    read_only_safe = True

    def call(self, args: CountLinesArgs, ctx: ToolContext) -> ToolResult:
        """Read the file in the container (the toolbox checks the path) and count its lines."""
        read = ctx.sandbox.call("read_file", {"path": args.path})
        if not read.ok:
            return read  # the toolbox's error text tells the model what went wrong
        lines = read.meta.get("total_lines")
        if lines is None:
            return ToolResult.error(f"{args.path} is too big to count")
        return ToolResult(ok=True, output=f"{args.path}: {lines} lines", meta={"lines": lines})


def show(event: Event) -> None:
    """Print one line per tool call and its policy decision."""
    if isinstance(event, ToolCallEvent):
        print(f"-> {event.tool} {event.arguments} ({event.decision})")


def main() -> None:
    """Register the tool, run the query read-only, print the answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--root", default=".")
    parser.add_argument("--provider", default="ollama", choices=["ollama", "openai", "embedded"])
    parser.add_argument("--host", default=None)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    register(CountLines)  # before Runner.build: every runner built afterwards offers it
    options = {k: v for k, v in {"host": args.host, "model": args.model}.items() if v}
    with Runner.build(args.root, provider=args.provider, read_only=True, **options) as runner:
        runner.hooks.subscribe(show, "tool_call")
        result = runner.run(args.query)
    print(result.answer)


if __name__ == "__main__":
    main()
