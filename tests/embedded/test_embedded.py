"""The real embedded model: Qwen2.5-Coder-1.5B served by llama.cpp in this process.

Slow (the model loads in seconds, each answer takes seconds on 2 cores) and memory-hungry
(about 2 GB), so one model runs at a time: the class below shares one, the lifecycle test
starts its own after the class's is closed. Run with `pytest -m embedded` (or `-s` to see
the measured figures). Missing packages fail these tests; they never skip.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from executor.errors import EmbeddedModelError
from executor.messages import Message, ToolSpec
from executor.models.embedded import (
    QWEN_1_5B,
    EmbeddedModel,
    LoadProgress,
    ensure_model,
    model_path,
    sidecar_trusted,
    verify,
)
from executor.tools.builtin import EditFile, ListFiles, ReadFile, RunShellCommand, WriteFile

pytestmark = pytest.mark.embedded

TOOLS: list[ToolSpec] = [
    t.spec() for t in (ReadFile, ListFiles, WriteFile, EditFile, RunShellCommand)
]


def rss_mib() -> int:
    """Resident memory of this process in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture(scope="class")
def model() -> Iterator[EmbeddedModel]:
    """A started model, stopped when the class using it is done."""
    with EmbeddedModel() as started:
        yield started


class TestServedModel:
    """One started model shared by the tests of this class."""

    def test_it_answers_a_real_prompt(self, model: EmbeddedModel) -> None:
        reply = model.chat(
            [Message.system("Answer in one word."), Message.user("What is the capital of France?")],
            [],
        )
        assert reply.problem is None and reply.message.tool_calls == []
        assert "paris" in reply.message.content.lower()
        assert reply.usage.completion_tokens and reply.usage.prompt_tokens

    def test_constrained_replies_are_a_valid_tool_call(self, model: EmbeddedModel) -> None:
        reply = model.chat([Message.user("Create hello.py that prints hello.")], TOOLS)
        assert reply.problem is None, reply.raw
        (call,) = reply.message.tool_calls
        assert call.name in ("write_file", "edit_file"), reply.raw
        assert call.arguments["path"] == "hello.py"
        body = call.arguments.get("content", call.arguments.get("new_text", ""))
        assert "print" in body and "hello" in body.lower()

    def test_tokens_stream_as_they_are_generated(self, model: EmbeddedModel) -> None:
        pieces: list[str] = []
        reply = model.chat([Message.user("Say hi.")], [], on_token=pieces.append)
        assert len(pieces) > 1 and "".join(pieces) == reply.raw

    def test_the_served_context_is_the_configured_one(self, model: EmbeddedModel) -> None:
        assert model.context_length() == model.options.n_ctx == 8192
        assert model.base_url is not None and model.base_url.startswith("http://127.0.0.1:")

    def test_the_server_refuses_requests_without_its_key(self, model: EmbeddedModel) -> None:
        assert httpx.get(f"{model.base_url}/v1/models").status_code == 401


def test_construction_is_free_chat_starts_it_and_close_frees_it(
    record_property: pytest.RecordProperty,
) -> None:
    seen: list[LoadProgress] = []
    model = EmbeddedModel(progress=seen.append)
    assert model.base_url is None  # nothing loaded yet
    before, started = rss_mib(), time.monotonic()
    try:
        reply = model.chat([Message.user("Reply with the word ready.")], [])
        first_answer = time.monotonic() - started
        loaded, url = rss_mib(), model.base_url
    finally:
        model.close()
    assert "ready" in reply.message.content.lower()
    assert [p.phase for p in seen][-1] == "ready" and "load" in {p.phase for p in seen}
    assert model.base_url is None and url is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")
    assert loaded - rss_mib() > 1000  # the model's memory was given back
    record_property("seconds_to_first_answer", round(first_answer, 1))
    record_property("rss_mib_loaded", loaded - before)
    print(f"\nfirst answer after {first_answer:.1f} s; {loaded - before} MiB resident while loaded")


def test_the_assembled_model_is_cached() -> None:
    path = ensure_model()
    stamp = path.stat().st_mtime_ns
    seen: list[LoadProgress] = []
    assert ensure_model(progress=seen.append) == path
    assert seen == [] and path.stat().st_mtime_ns == stamp and sidecar_trusted(path, QWEN_1_5B)


def test_a_corrupted_copy_is_rejected_and_rebuilt_from_the_parts(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    copy = model_path(QWEN_1_5B, tmp_path)
    shutil.copyfile(ensure_model(), copy)  # never touch the shared cache itself
    with open(copy, "r+b") as handle:
        handle.seek(QWEN_1_5B.size // 2)
        handle.write(b"\x00\xff")
    try:
        with pytest.raises(EmbeddedModelError, match=f"expected {QWEN_1_5B.size} bytes"):
            verify(copy, QWEN_1_5B)
        started = time.monotonic()
        assert ensure_model(directory=tmp_path) == copy  # no sidecar here: hashed, rebuilt
        rebuilt = time.monotonic() - started
        verify(copy, QWEN_1_5B)
        assert sidecar_trusted(copy, QWEN_1_5B)
    finally:
        copy.unlink(missing_ok=True)
    record_property("seconds_to_verify_and_reassemble", round(rebuilt, 1))
    print(f"\nverify (bad) + assemble + verify: {rebuilt:.1f} s")
