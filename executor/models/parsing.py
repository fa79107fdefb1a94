"""The tolerant reply parser every tool protocol goes through.

Small local models rarely use a server's structured `tool_calls`; they write calls into
the text. This module finds them: ```json fences, `<tool_call>` tags or bare objects
anywhere in the text (a string-aware balanced-brace scan, not a greedy regex), with
`"parameters"` accepted for `"arguments"`, arguments given as a JSON string, several
calls in one reply, and `{"answer": ...}` as the final answer. A reply that is neither a
valid call nor a usable answer gets a `problem`: a short text telling the model what was
wrong and what to send instead (the agent loop shows it to the model and asks again).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from executor.config import ToolProtocol
from executor.messages import CutReason, Message, ModelReply, ToolCall, Usage, new_call_id

JSON_REMINDER = (
    'Reply with exactly one JSON object: {"name": "<tool>", "arguments": {...}} to use a tool, '
    'or {"answer": "<answer for the user>"} when finished.'
)
_CALL_KEYS = ('"name"', '"arguments"', '"parameters"', '"answer"')
_EMPTY_WRAPPERS = re.compile(r"```[a-zA-Z]*\s*```|<tool_call>\s*</tool_call>")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_MAX_NESTING = 20  # how deep to look for a good object inside broken ones
_ANSWER_START = re.compile(r'\s*(?:```[a-zA-Z]*\s*)?\{\s*"answer"\s*:\s*"')
_LENIENT = json.JSONDecoder(strict=False)
REPEATS = 4
"""Copies of the same text in a row that make a reply a runaway (see `repeated_tail`)."""
REPEAT_SPAN = 400
"""Characters the copies must cover at least: a rule of '=' or a list of zeros is no runaway."""
REPEAT_WINDOW = 4000
"""Characters at the end of a reply searched for copies (so a unit is at most 1,000)."""


@dataclass(frozen=True)
class RawCall:
    """A tool call as a server or the text gave it, before its arguments are checked."""

    name: Any
    arguments: Any
    id: str | None = None


class _Problem(Exception):
    """Internal: the reply cannot be used; the message is what the model is told."""


@dataclass
class _Scan:
    calls: list[RawCall]
    call_spans: list[tuple[int, int]]
    answers: list[Any]
    others: int
    malformed: str | None


def parse_reply(
    text: str,
    protocol: ToolProtocol = "json",
    *,
    native_calls: Sequence[RawCall] = (),
    usage: Usage | None = None,
    context_length: int | None = None,
    thinking: str = "",
) -> ModelReply:
    """Turn a model's text (and any structured calls) into a ModelReply; `thinking` (the
    model's reasoning, sent apart from its text) is kept on the message, apart from the answer."""
    try:
        message = _message(text, protocol, native_calls)
        problem = None
    except _Problem as exc:
        message, problem = Message.assistant(text), str(exc)
    message.thinking = thinking
    return ModelReply(
        message=message, usage=usage or Usage(), problem=problem, raw=text,
        context_length=context_length,
    )


def _message(text: str, protocol: ToolProtocol, native_calls: Sequence[RawCall]) -> Message:
    if native_calls:
        return Message.assistant(text, [tool_call(c) for c in native_calls])
    scan = scan_text(text)
    if scan.calls:
        return Message.assistant(_prose(text, scan.call_spans), [tool_call(c) for c in scan.calls])
    if scan.answers:
        return Message.assistant(_answer_text(scan.answers[0], protocol))
    if not text.strip():
        raise _Problem(_empty_problem(protocol))
    if protocol != "native" and _looks_like_json(text):
        _json_problem(scan)
    if protocol != "native" and scan.malformed:
        raise _Problem(scan.malformed)
    return Message.assistant(text.strip())


def tool_call(raw: RawCall) -> ToolCall:
    """A checked ToolCall; raises _Problem when the name or arguments are unusable."""
    if not isinstance(raw.name, str) or not raw.name.strip():
        raise _Problem(f'The "name" of a tool call must be a tool name (a string). {JSON_REMINDER}')
    args = coerce_arguments(raw.name, raw.arguments)
    return ToolCall(id=raw.id or new_call_id(), name=raw.name.strip(), arguments=args)


def coerce_arguments(name: str, value: Any) -> dict[str, Any]:
    """Arguments as a dict: None/'' -> {}, a JSON string is decoded; anything else is a problem."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        decoded = _loads(value)
        value = decoded if decoded is not None else value
    if isinstance(value, dict):
        return value
    raise _Problem(
        f'The "arguments" of your {name} call must be a JSON object, like '
        f'{{"name": "{name}", "arguments": {{"<argument>": "<value>"}}}}; got {value!r:.80}.'
    )


def scan_text(text: str) -> _Scan:
    """Every top-level JSON object in `text`, classified as call, answer or other."""
    scan = _Scan(calls=[], call_spans=[], answers=[], others=0, malformed=None)
    for start, end in _object_spans(text):
        _classify(text, start, end, scan, 0)
    return scan


def _classify(text: str, start: int, end: int, scan: _Scan, nesting: int) -> None:
    span = text[start:end]
    obj = _loads(span)
    if obj is None:
        _retry_inside(text, start, end, scan, nesting)
        return
    calls = _calls_in(obj)
    if calls:
        scan.calls.extend(calls)
        scan.call_spans.append((start, end))
    elif isinstance(obj, dict) and "answer" in obj:
        scan.answers.append(obj["answer"])
    else:
        scan.others += 1


def _retry_inside(text: str, start: int, end: int, scan: _Scan, nesting: int) -> None:
    """A span that does not parse may hide a good object behind a stray '{'."""
    found = len(scan.calls) + len(scan.answers)
    if nesting < _MAX_NESTING:
        for inner_start, inner_end in _object_spans(text, start + 1, end):
            _classify(text, inner_start, inner_end, scan, nesting + 1)
    span = text[start:end]
    nothing_inside = len(scan.calls) + len(scan.answers) == found
    if nothing_inside and scan.malformed is None and any(k in span for k in _CALL_KEYS):
        scan.malformed = _malformed_problem(span)


def _calls_in(obj: Any) -> list[RawCall]:
    """Calls in one decoded object: {name, arguments|parameters}, {function: ...}, {tool_calls}."""
    if not isinstance(obj, dict):
        return []
    if isinstance(obj.get("tool_calls"), list):
        return [c for item in obj["tool_calls"] for c in _calls_in(item)]
    if isinstance(obj.get("function"), dict):
        return _calls_in({**obj["function"], "id": obj.get("id")})
    if "name" in obj and ("arguments" in obj or "parameters" in obj):
        args = obj["arguments"] if "arguments" in obj else obj["parameters"]
        call_id = obj.get("id") if isinstance(obj.get("id"), str) else None
        return [RawCall(obj["name"], args, call_id)]
    return []


def _object_spans(text: str, begin: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
    """Top-level balanced {...} spans, ignoring braces inside JSON strings.

    An object that never closes runs to the end (it is reported as malformed).
    """
    spans: list[tuple[int, int]] = []
    depth, start, in_string, escaped = 0, 0, False, False
    stop = len(text) if stop is None else stop
    for i in range(begin, stop):
        ch = text[i]
        if depth == 0:
            if ch == "{":
                depth, start = 1, i
        elif in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{}":
            depth += 1 if ch == "{" else -1
            if depth == 0:
                spans.append((start, i + 1))
    if depth:
        spans.append((start, stop))
    return spans


def _loads(text: str) -> Any:
    """JSON, leniently: raw newlines in strings, trailing commas, Python-style literals."""
    for candidate in (text, _TRAILING_COMMA.sub(r"\1", text)):
        try:
            return json.loads(candidate, strict=False)
        except json.JSONDecodeError:
            pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _malformed_problem(span: str) -> str:
    try:
        json.loads(span, strict=False)
        reason = "it is not a JSON object"
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        if exc.pos >= len(span.rstrip()):
            reason = "it ends before the object is closed; a '}' is missing"
    return f"Your reply is not valid JSON ({reason}). {JSON_REMINDER}"


def _json_problem(scan: _Scan) -> None:
    """In the JSON protocols, a reply that is only JSON must be a call or an answer."""
    if scan.malformed:
        raise _Problem(scan.malformed)
    if scan.others:
        raise _Problem(f'Your JSON object has neither "name" nor "answer". {JSON_REMINDER}')


def _looks_like_json(text: str) -> bool:
    stripped = text.strip().removeprefix("```json").removeprefix("```").lstrip()
    return stripped.startswith("{")


def _answer_text(answer: Any, protocol: ToolProtocol) -> str:
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    if not text.strip():
        raise _Problem(
            f'Your "answer" is empty. Write the answer for the user in it, or use a tool. '
            f"{JSON_REMINDER if protocol != 'native' else ''}".strip()
        )
    return text


def _empty_problem(protocol: ToolProtocol) -> str:
    if protocol == "native":
        return "Your reply was empty. Call one of the tools, or write your answer for the user."
    return f"Your reply was empty. {JSON_REMINDER}"


def _prose(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` without the call objects and the fences or tags that held them."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    return _EMPTY_WRAPPERS.sub("", "".join(kept)).strip()


def json_objects(text: str) -> list[tuple[int, int, Any]]:
    """(start, end, value) of each top-level JSON object in `text` that decodes (leniently)."""
    found = []
    for start, end in _object_spans(text):
        value = _loads(text[start:end])
        if value is not None:
            found.append((start, end, value))
    return found


def repeated_tail(text: str, repeats: int = REPEATS, span: int = REPEAT_SPAN,
                  window: int = REPEAT_WINDOW) -> int | None:
    """Where the copies start when `text` ends in the same text `repeats` times in a row
    (covering at least `span` characters), else None; `text[:index]` keeps the first copy.

    A weak model at temperature 0 can fall into a loop ("The test is case-sensitive, so ...
    The test is case-sensitive, so ...") that only the token cap ends. Periodicity does not
    depend on where in the unit the text stops, so the check works on a stream at any point.
    """
    tail = text[-window:]
    for unit in range(1, len(tail) // repeats + 1):
        length = max(repeats * unit, span)
        if length > len(tail):
            return None
        periodic = tail[-length:]
        if periodic[unit:] == periodic[:-unit]:
            return _first_copy_end(text, unit)
    return None


def _first_copy_end(text: str, unit: int) -> int:
    """The end of the first copy of the `unit`-periodic run `text` ends with.

    The run may begin a little before the copies do (when what came before them ends as a
    copy ends: "... 'hi'. " before "The test ... 'hi'. "), so the first copy is taken from
    the first sentence or line start in the run, and kept whole."""
    start = len(text) - unit
    while start > 0 and text[start - 1] == text[start - 1 + unit]:
        start -= 1
    for begin in range(start, start + unit):
        if text[begin - 1:begin] == "\n" or (text[begin - 1:begin] == " "
                                             and text[begin - 2:begin - 1] in (".", "!", "?")):
            return begin + unit
    return start + unit


def partial_answer(text: str) -> str | None:
    """The answer a cut reply was writing (`{"answer": "...` with no end), or None."""
    opening = _ANSWER_START.match(text)
    if opening is None:
        return None
    try:
        return str(_LENIENT.raw_decode(text, opening.end() - 1)[0])  # from its opening quote
    except json.JSONDecodeError:
        pass  # unterminated: the cut came inside the string
    body = text[opening.end():]
    for drop in range(7):  # the cut may split an escape (`\`, `\u00e`)
        try:
            return str(json.loads(f'"{body[:len(body) - drop]}"', strict=False))
        except json.JSONDecodeError:
            continue
    return None


def cut_note(why: CutReason) -> str:
    """What a salvaged answer says about its cut."""
    reason = ("kept repeating itself and was stopped" if why == "repetition"
              else "reached its length limit")
    return f"(This answer is incomplete: the model {reason}.)"


def cut_reply(
    text: str,
    protocol: ToolProtocol,
    why: CutReason,
    *,
    native_calls: Sequence[RawCall] = (),
    usage: Usage | None = None,
    context_length: int | None = None,
    thinking: str = "",
) -> ModelReply:
    """A reply that stopped before the model ended it, made as usable as it honestly can be.

    The repeated tail is dropped first. What still parses (the json protocol lets a model
    write a call and then ramble) is used as it is; an answer cut while being written is kept
    with a note that says so; anything else is a problem that asks for a shorter reply.
    """
    end = repeated_tail(text)
    kept = text if end is None else text[:end]
    reply = parse_reply(kept, protocol, native_calls=native_calls, usage=usage,
                        context_length=context_length, thinking=thinking)
    update: dict[str, Any] = {"cut": why, "raw": text}
    message = reply.message
    if reply.problem:
        answer = partial_answer(kept)
        if answer is None or not answer.strip():
            what = ("it repeated the same text over and over" if why == "repetition"
                    else "it was longer than a reply may be")
            reminder = JSON_REMINDER if protocol != "native" else ""
            update["problem"] = (f"Your reply was cut before it was complete: {what}. Send a "
                                 f"short reply. {reminder}").strip()
            return reply.model_copy(update=update)
        message, update["problem"] = Message.assistant(answer), None
    if not message.tool_calls:  # an answer: it says that it was cut
        message = Message.assistant(f"{message.content.rstrip()} … {cut_note(why)}")
        message.thinking = thinking
    update["message"] = message
    return reply.model_copy(update=update)
