"""Session and context-window figures for a long session (each figure: median of N runs).

    python benchmarks/bench_context.py [--messages 10000] [--repeat 5]

1. writing: `append` (one write + fsync per message) and `extend` (one fsync for all);
2. loading the session file back (`NdjsonSessionStore.open(...).load()`);
3. trimming it to an 8k and a 128k budget, with a cold counter (first model call after a
   resume: every kept message is tokenized) and a warm one (every later call), and counting the
   whole session cold — the worst case, when everything fits.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from executor.context import TokenCounter, summarize_trim, trim
from executor.messages import Message, ToolCall
from executor.session import NdjsonSessionStore

WORDS = [
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "path",
    "file",
    "error",
    "test",
    "assert",
    "the",
    "of",
    "and",
    "to",
    "in",
]


def text(rng: random.Random, words: int) -> str:
    """Code-like filler of `words` words."""
    return " ".join(rng.choices(WORDS, k=words))


def session(count: int) -> list[Message]:
    """A realistic mix: user asks, the model calls a tool, the result comes back, it answers."""
    rng = random.Random(0)
    messages = [Message.system("You are a coding agent. " + text(rng, 300))]
    while len(messages) < count:
        call = ToolCall(name="read_file", arguments={"path": f"src/m{len(messages)}.py"})
        messages += [
            Message.user(text(rng, 40)),
            Message.assistant("", [call]),
            Message.tool(call, text(rng, 200)),
            Message.assistant(text(rng, 60)),
        ]
    return messages[:count]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall-clock milliseconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def report(label: str, value: float, unit: str = "ms") -> None:
    """One aligned figure."""
    print(f"  {label:<52} {value:10.1f} {unit}")


def bench_store(root: Path, messages: list[Message], repeat: int) -> None:
    """Write and load figures."""
    size = len(messages)
    appended = NdjsonSessionStore.create(root, name="appended")
    start = time.perf_counter()
    for message in messages[:500]:
        appended.append(message)
    report("append one message (write + fsync), mean of 500", _since(start) / 500)
    store = NdjsonSessionStore.create(root, name="bench")
    start = time.perf_counter()
    store.extend(messages)
    report(f"extend by {size} messages (one fsync)", _since(start))
    report(f"file size of {size} messages", store.path.stat().st_size / 1e6, "MB")
    load = median_ms(lambda: NdjsonSessionStore.open(root, "bench").load(), repeat)
    report(f"load {size} messages", load)


def _since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def bench_trim(messages: list[Message], repeat: int) -> None:
    """Trim and count figures, cold and warm counter."""
    size = len(messages)
    warm = TokenCounter()
    warm.count_messages(messages)
    report(f"tokens in the session ({warm.backend})", warm.count_messages(messages) / 1000, "k")
    figures: list[tuple[str, Callable[[], object]]] = []
    for budget in (8192, 131072):
        figures += [
            (f"trim {size} to {budget} tokens, cold counter", _trim(messages, budget, None)),
            (f"trim {size} to {budget} tokens, warm counter", _trim(messages, budget, warm)),
        ]
    figures += [
        (
            f"summarize_trim {size} to 8192 tokens, warm counter",
            lambda: summarize_trim(messages, 8192, warm, lambda segment: "summary"),
        ),
        (f"count all {size}, cold (tiktoken)", lambda: TokenCounter().count_messages(messages)),
        (f"count all {size}, cold (chars/4)", lambda: TokenCounter(None).count_messages(messages)),
    ]
    for label, fn in figures:
        report(label, median_ms(fn, repeat))


def _trim(
    messages: list[Message], budget: int, counter: TokenCounter | None
) -> Callable[[], object]:
    """Trim with `counter`, or with a fresh (cold) counter each time when None."""
    return lambda: trim(messages, budget, counter or TokenCounter())


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    messages = session(args.messages)
    TokenCounter().count_text("warm up")  # loading the encoding (~0.1 s) once per process
    print(f"session of {len(messages)} messages, median of {args.repeat} runs")
    with tempfile.TemporaryDirectory() as root:
        bench_store(Path(root), messages, args.repeat)
    bench_trim(messages, args.repeat)


if __name__ == "__main__":
    main()
