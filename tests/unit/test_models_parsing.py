"""The tolerant reply parser, on the texts small models actually write."""

from __future__ import annotations

import pytest

from executor.models.parsing import (
    JSON_REMINDER,
    RawCall,
    cut_note,
    cut_reply,
    parse_reply,
    partial_answer,
    repeated_tail,
)


def calls(text: str, protocol: str = "json") -> list[tuple[str, dict]]:
    reply = parse_reply(text, protocol)  # type: ignore[arg-type]
    assert reply.problem is None, reply.problem
    return [(c.name, c.arguments) for c in reply.message.tool_calls]


def test_fenced_json_block() -> None:
    text = 'Sure.\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```\n'
    assert calls(text) == [("read_file", {"path": "a.py"})]
    assert parse_reply(text).message.content == "Sure."


def test_bare_object_among_prose_keeps_the_prose() -> None:
    text = 'First I list.\n{"name": "list_files", "arguments": {}}\nThen I read.'
    reply = parse_reply(text)
    assert [c.name for c in reply.message.tool_calls] == ["list_files"]
    assert reply.message.content == "First I list.\n\nThen I read."


def test_braces_inside_strings_do_not_confuse_the_scan() -> None:
    text = '{"name": "write_file", "arguments": {"path": "x.py", "content": "d = {}\\nif x: {"}}'
    assert calls(text) == [("write_file", {"path": "x.py", "content": "d = {}\nif x: {"})]


def test_escaped_quotes_inside_strings() -> None:
    text = '{"name": "run_shell_command", "arguments": {"command": "echo \\"}\\""}}'
    assert calls(text) == [("run_shell_command", {"command": 'echo "}"'})]


def test_a_stray_brace_before_the_call_does_not_hide_it() -> None:
    text = 'A set looks like {1, 2 and then {"name": "list_files", "arguments": {"path": "."}}'
    assert calls(text) == [("list_files", {"path": "."})]


def test_greedy_regex_trap_two_objects_are_two_calls() -> None:
    text = ('{"name": "read_file", "arguments": {"path": "a"}} and '
            '{"name": "read_file", "arguments": {"path": "b"}}')
    assert calls(text) == [("read_file", {"path": "a"}), ("read_file", {"path": "b"})]


def test_parameters_is_an_alias_of_arguments() -> None:
    assert calls('{"name": "read_file", "parameters": {"path": "a"}}') == [
        ("read_file", {"path": "a"})]


@pytest.mark.parametrize(("arguments", "expected"), [
    ('"{\\"path\\": \\"a\\"}"', {"path": "a"}),
    ('""', {}),
    ("null", {}),
    ("{}", {}),
])
def test_arguments_as_a_json_string_or_empty(arguments: str, expected: dict) -> None:
    assert calls(f'{{"name": "read_file", "arguments": {arguments}}}') == [("read_file", expected)]


def test_openai_shaped_and_listed_calls_in_text() -> None:
    text = ('{"tool_calls": [{"id": "x1", "type": "function", "function": '
            '{"name": "read_file", "arguments": "{\\"path\\": \\"a\\"}"}}]}')
    reply = parse_reply(text)
    assert [(c.id, c.name, c.arguments) for c in reply.message.tool_calls] == [
        ("x1", "read_file", {"path": "a"})]


def test_lenient_json_raw_newlines_trailing_commas_python_literals() -> None:
    assert calls('{"name": "write_file", "arguments": {"content": "a\nb",},}') == [
        ("write_file", {"content": "a\nb"})]
    assert calls("{'name': 'read_file', 'arguments': {'path': 'a'}}") == [
        ("read_file", {"path": "a"})]


def test_answer_object_becomes_the_content() -> None:
    reply = parse_reply('```json\n{"answer": "All tests pass."}\n```')
    assert reply.message.content == "All tests pass."
    assert reply.message.tool_calls == [] and reply.problem is None


def test_non_string_answer_is_rendered_as_json() -> None:
    assert parse_reply('{"answer": ["a.py", "b.py"]}').message.content == '["a.py", "b.py"]'


def test_calls_win_over_an_answer_in_the_same_reply() -> None:
    text = '{"name": "write_file", "arguments": {"path": "a"}}\n{"answer": "done"}'
    assert [c.name for c in parse_reply(text).message.tool_calls] == ["write_file"]


@pytest.mark.parametrize("protocol", ["json", "constrained", "native"])
def test_plain_prose_is_an_answer(protocol: str) -> None:
    reply = parse_reply("  The bug is on line 3.  ", protocol)  # type: ignore[arg-type]
    assert reply.message.content == "The bug is on line 3."
    assert reply.problem is None


def test_prose_with_an_unrelated_json_example_is_an_answer() -> None:
    text = 'Use a config like {"debug": true} to enable it.'
    assert parse_reply(text).message.content == text


@pytest.mark.parametrize(("text", "needle"), [
    ("", "Your reply was empty."),
    ("   \n", "Your reply was empty."),
    ('{"name": "read_file", "arguments": {"path": "a"}', "a '}' is missing"),
    ('```json\n{"name": "read_file" "arguments": {}}\n```', "Expecting ',' delimiter"),
    ('I will call {"name": "read_file", "arguments": {path: a}}', "not valid JSON"),
    ('{"path": "a.py"}', 'neither "name" nor "answer"'),
    ('{"answer": ""}', '"answer" is empty'),
    ('{"name": 42, "arguments": {}}', '"name" of a tool call must be'),
    ('{"name": "read_file", "arguments": [1, 2]}', "must be a JSON object"),
    ('{"name": "read_file", "arguments": "a.py"}', "must be a JSON object"),
])
@pytest.mark.parametrize("protocol", ["json", "constrained"])
def test_problems_in_the_json_protocols(text: str, needle: str, protocol: str) -> None:
    reply = parse_reply(text, protocol)  # type: ignore[arg-type]
    assert reply.problem is not None and needle in reply.problem
    assert reply.message.tool_calls == []
    assert reply.message.content == text  # the model's words stay in the history
    assert reply.raw == text


def test_problems_tell_the_model_what_to_send() -> None:
    problem = parse_reply('{"foo": 1}').problem
    assert problem is not None and problem.endswith(JSON_REMINDER)
    assert '{"name": "<tool>", "arguments": {...}}' in JSON_REMINDER
    assert '{"answer": "<answer for the user>"}' in JSON_REMINDER


def test_native_only_flags_empty_replies() -> None:
    assert parse_reply("", "native").problem == (
        "Your reply was empty. Call one of the tools, or write your answer for the user.")
    broken = '{"name": "read_file", "arguments": {"path": "a"}'
    reply = parse_reply(broken, "native")
    assert reply.problem is None and reply.message.content == broken


def test_native_calls_come_first_and_keep_their_ids() -> None:
    reply = parse_reply("Let me look.", "native",
                        native_calls=[RawCall("read_file", '{"path": "a"}', "id9")])
    assert [(c.id, c.name, c.arguments) for c in reply.message.tool_calls] == [
        ("id9", "read_file", {"path": "a"})]
    assert reply.message.content == "Let me look."


def test_native_call_with_broken_arguments_is_a_problem() -> None:
    reply = parse_reply("", "native", native_calls=[RawCall("read_file", '{"path": ')])
    assert reply.problem is not None and "read_file" in reply.problem
    assert reply.message.tool_calls == []


def test_unknown_tools_are_returned_for_the_loop_to_report() -> None:
    assert calls('{"name": "teleport", "arguments": {"to": "mars"}}') == [
        ("teleport", {"to": "mars"})]


def test_pathological_braces_are_handled() -> None:
    reply = parse_reply("{" * 5000 + '"name"')
    assert reply.problem is not None and reply.message.tool_calls == []


# -- replies that were cut: the token cap, or a stop on repetition -------------------------------

RUNAWAY_UNIT = ("The test is looking for a string that starts with 'HI...' but finds 'hi...'. "
                "The test is case-sensitive, so 'HI...' is not the same as 'hi...'. ")
RUNAWAY_START = ('{"answer": "The test test_whisper fails because \'HI...\' is not equal to '
                 "'hi...'. ")


def test_a_reply_ending_in_copies_of_itself_keeps_one_whole_copy() -> None:
    text = RUNAWAY_START + RUNAWAY_UNIT * 5 + RUNAWAY_UNIT[:41]
    end = repeated_tail(text)
    assert end is not None
    assert text[:end] == RUNAWAY_START + RUNAWAY_UNIT


def test_text_that_does_not_repeat_long_enough_is_no_runaway() -> None:
    assert repeated_tail(RUNAWAY_START + RUNAWAY_UNIT * 2) is None  # two copies: a coincidence
    assert repeated_tail("x = 1\n" + "=" * 120 + "\n") is None  # a rule is short of the span
    code = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40))
    assert repeated_tail(code) is None  # alike but not the same


def test_a_cut_answer_is_kept_with_a_note_and_without_its_repeated_tail() -> None:
    text = RUNAWAY_START + RUNAWAY_UNIT * 5 + RUNAWAY_UNIT[:41]
    reply = cut_reply(text, "constrained", "length")
    assert reply.problem is None and reply.cut == "length" and reply.raw == text
    answer = reply.message.content
    assert answer.startswith("The test test_whisper fails because 'HI...' is not equal to")
    assert answer.count("The test is case-sensitive") == 1
    assert answer.endswith(cut_note("length")) and "incomplete" in cut_note("length")


def test_a_cut_inside_an_escape_still_gives_the_answer() -> None:
    assert partial_answer('{"answer": "line one\\nline two \\u00e') == "line one\nline two "
    assert partial_answer('```json\n{ "answer" : "done, see a.py"') == "done, see a.py"
    assert partial_answer('{"answer": "done"}') == "done"
    assert partial_answer('{"name": "write_file", "arguments": {"path": "a') is None


def test_a_cut_call_is_a_problem_that_asks_for_a_short_reply() -> None:
    text = '{"name": "write_file", "arguments": {"path": "a.py", "content": "' + "x = 1\\n" * 99
    reply = cut_reply(text, "constrained", "repetition")
    assert reply.cut == "repetition" and reply.message.tool_calls == []
    assert reply.problem is not None
    assert reply.problem.startswith("Your reply was cut before it was complete: it repeated")
    assert "short reply" in reply.problem and JSON_REMINDER in reply.problem
    assert len(reply.message.content) < len(text) and reply.message.content.count("x = 1") == 1


def test_what_parsed_before_the_cut_is_used() -> None:
    text = '{"name": "list_files", "arguments": {}}\nNow I will ' + "think and " * 80
    reply = cut_reply(text, "json", "repetition")
    assert reply.problem is None
    assert [c.name for c in reply.message.tool_calls] == ["list_files"]
