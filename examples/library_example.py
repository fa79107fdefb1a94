"""Using sandbox-agent as a library: build a Runner, watch its events, run a query.

    python examples/library_example.py --root examples/sample-project \\
        --provider ollama --host http://localhost:11434 "What does calc.py do?"

Every tool call the model makes runs in a container that sees only --root (read-only here).
"""

from __future__ import annotations

import argparse

from executor.hooks import Event, ToolCallEvent, ToolResultEvent
from executor.runner import Runner


def show(event: Event) -> None:
    """Print one line per tool call and its outcome."""
    if isinstance(event, ToolCallEvent):
        print(f"-> {event.tool} {event.arguments} ({event.decision})")
    elif isinstance(event, ToolResultEvent):
        print(f"<- {event.tool} ok={event.ok}")


def main() -> None:
    """Parse the arguments, run the query read-only, print the answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--root", default=".")
    parser.add_argument("--provider", default="ollama", choices=["ollama", "openai", "embedded"])
    parser.add_argument("--host", default=None)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    options = {k: v for k, v in {"host": args.host, "model": args.model}.items() if v}
    with Runner.build(args.root, provider=args.provider, read_only=True, **options) as runner:
        runner.hooks.subscribe(show, "tool_call", "tool_result")
        result = runner.run(args.query)
    print(f"\n{result.answer}\n({result.turns} turns, {len(result.tool_calls)} tool calls)")


if __name__ == "__main__":
    main()
