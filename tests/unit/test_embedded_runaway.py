"""A runaway reply of the embedded model: stopped while it streams when it repeats itself,
and marked cut at the per-reply token cap, against a real HTTP stand-in server."""

from __future__ import annotations

from executor.messages import Message
from executor.models.embedded.runaway import RepetitionGuard, Runaway, guarded_chat
from executor.models.openai import OpenAIModel
from executor.models.parsing import cut_note
from tests.fakes.model_server import ModelServer

HELLO = [Message.user("Which test fails?")]
SIZE = 128 << 20
"""More than loopback's socket buffers can hold (tcp_rmem and tcp_wmem at most 32 and 4 MiB
here): what the server wrote before the hang-up is the client's doing, not the kernel's."""


def client(server: ModelServer) -> OpenAIModel:
    return OpenAIModel("fake-model", base_url=server.openai_url, tool_protocol="constrained",
                       stream=True)


def test_a_stream_that_repeats_itself_is_dropped_early(model_server: ModelServer) -> None:
    model_server.flood(SIZE, piece=16)
    shown: list[str] = []
    with client(model_server) as model:
        reply = guarded_chat(model, HELLO, [], cap=2048, on_token=shown.append)

    assert reply.cut == "repetition"
    assert reply.usage.completion_tokens == len(shown) < 100  # relayed, then stopped
    written = model_server.wait_flooded()
    assert written and written[0] < SIZE // 2  # the server saw the client hang up


def test_a_reply_at_the_token_cap_is_cut_and_its_answer_kept(model_server: ModelServer) -> None:
    model_server.reply('{"answer": "test_whisper fails: \'HI...\' is not \'hi', completion_tokens=64)
    with client(model_server) as model:
        reply = guarded_chat(model, HELLO, [], cap=64)

    assert reply.cut == "length" and reply.problem is None
    assert reply.message.content == f"test_whisper fails: 'HI...' is not 'hi … {cut_note('length')}"


def test_a_reply_under_the_cap_is_left_alone(model_server: ModelServer) -> None:
    model_server.reply('{"answer": "test_whisper fails"}', completion_tokens=63)
    with client(model_server) as model:
        reply = guarded_chat(model, HELLO, [], cap=64)

    assert reply.cut is None and reply.message.content == "test_whisper fails"


def test_the_guard_relays_every_piece_and_looks_every_few() -> None:
    shown: list[str] = []
    guard = RepetitionGuard(shown.append, every=4)
    for piece in ["The answer is 42. "] * 3:
        guard(piece)
    assert shown == ["The answer is 42. "] * 3
    try:
        for _ in range(40):
            guard("Again and again. ")
    except Runaway as stop:
        assert stop.pieces % 4 == 0 and stop.text.startswith("The answer is 42. " * 3)
    else:
        raise AssertionError("a reply of copies was not stopped")
