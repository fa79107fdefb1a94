"""A model reply of any size is read only up to SANDBOX_AGENT_MAX_REPLY_BYTES (red-team F8).

Against the stand-in server over real HTTP: a reply past the cap fails with one error naming
the setting, is not retried, its connection is closed (the server could not write the rest),
and the controller's memory stays bounded (measured in a subprocess); a reply under it works.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import httpx
import pytest

from executor.config import DEFAULT_MAX_REPLY_BYTES, Settings
from executor.errors import ModelResponseError
from executor.messages import Message
from executor.models import OllamaModel, build_model
from executor.models.limits import MAX_CALLS, MAX_VALUES, SETTING
from tests.fakes import ModelServer
from tests.fakes.model_server import FloodField
from tests.fakes.providers import PROVIDERS, ProviderName, make_model

HELLO = [Message.user("hello")]
MIB = 1024 * 1024
CAP = 1 * MIB
FLOOD = 64 * MIB
FIELDS: tuple[FloodField, ...] = ("content", "thinking", "arguments")


def _too_long(caught: pytest.ExceptionInfo[ModelResponseError], what: str, size: str) -> None:
    message = str(caught.value)
    assert f"sent {what} longer than {size}: stopped reading it ({SETTING})" in message
    assert caught.value.exit_code == 23 and "\n" not in message


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_past_the_cap_fails_once_and_is_cut_off(
    provider: ProviderName, stream: bool, field: FloodField, model_server: ModelServer
) -> None:
    model_server.flood(FLOOD, field=field, piece=16 * 1024).reply("never asked for")
    with make_model(provider, model_server, stream=stream, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    _too_long(caught, "a reply", "1 MiB")
    assert "raise SANDBOX_AGENT_MAX_REPLY_BYTES" in str(caught.value)
    assert len(model_server.chat_requests) == 1 and model_server.pending == 1  # not retried
    # The client hung up: the server could write only what the socket buffers took.
    flooded = model_server.wait_flooded()
    assert len(flooded) == 1 and flooded[0] < FLOOD // 4, flooded


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_line_past_a_sixteenth_of_the_cap_fails(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.flood(4 * MIB, piece=128 * 1024)  # lines of 128 KiB; the cap allows 64 KiB
    with make_model(provider, model_server, stream=True, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    _too_long(caught, "a stream line", "64 KiB")


@pytest.mark.parametrize("field", ["content", "thinking"])
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_under_the_cap_is_read_whole(
    provider: ProviderName, stream: bool, field: FloodField, model_server: ModelServer
) -> None:
    size = CAP // 2
    model_server.flood(size, field=field, piece=16 * 1024)
    with make_model(provider, model_server, stream=stream, max_reply_bytes=CAP) as model:
        reply = model.chat(HELLO, [])
    got = reply.message.content if field == "content" else reply.message.thinking
    assert got == "A" * size
    assert model_server.last_chat.headers["accept-encoding"] == "identity"


def test_a_declared_length_past_the_cap_fails_before_reading(model_server: ModelServer) -> None:
    model_server.raw(200, b'{"message": {"content": "' + b"A" * (2 * CAP) + b'"}}')
    with make_model("ollama", model_server, stream=False, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    _too_long(caught, "a reply", "1 MiB")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_huge_error_body_is_read_only_at_its_start(
    provider: ProviderName, model_server: ModelServer
) -> None:
    model_server.raw(400, b'{"error": "' + b"E" * (4 * CAP) + b'"}')
    with make_model(provider, model_server, stream=False, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError) as caught:
        model.chat(HELLO, [])
    assert caught.value.status_code == 400 and "HTTP 400" in str(caught.value)
    assert len(str(caught.value)) < 1000 and SETTING not in str(caught.value)


@pytest.mark.parametrize("stream", [True, False])
def test_more_tool_calls_than_the_cap_in_one_ollama_reply_fail(
    stream: bool, model_server: ModelServer
) -> None:
    if stream:
        model_server.flood(2 * MAX_CALLS, field="arguments", piece=1)  # a call a line
    else:
        calls = [{"function": {"name": "read_file", "arguments": {}}}] * (MAX_CALLS + 1)
        model_server.raw(200, json.dumps({"message": {"role": "assistant", "content": "",
                                                      "tool_calls": calls}}).encode())
    with make_model("ollama", model_server, stream=stream, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError, match=f"more than {MAX_CALLS} tool calls"):
        model.chat(HELLO, [])


def test_openai_fragments_of_more_calls_than_the_cap_fail(model_server: ModelServer) -> None:
    events = b"".join(
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": f"c{i}", "function": {"name": "read_file", "arguments": "{}"}},
        ]}}]}).encode() + b"\n\n" for i in range(MAX_CALLS + 1)) + b"data: [DONE]\n\n"
    model_server.raw(200, events, "text/event-stream")
    with make_model("openai", model_server, stream=True, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError, match=f"more than {MAX_CALLS} tool calls"):
        model.chat(HELLO, [])


def test_a_compressed_reply_is_refused() -> None:
    body = gzip.compress(json.dumps({"message": {"content": "A" * 10_000}}).encode())
    transport = httpx.MockTransport(lambda request: httpx.Response(
        200, headers={"Content-Encoding": "gzip"}, content=body))
    with OllamaModel("m", host="http://ollama.test", stream=False, transport=transport) as model, \
            pytest.raises(ModelResponseError, match="compressed reply"):
        model.chat(HELLO, [])


def test_the_setting_takes_a_size_and_reaches_every_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().max_reply_bytes == DEFAULT_MAX_REPLY_BYTES == 16 * MIB
    monkeypatch.setenv(SETTING, "8m")
    for provider in PROVIDERS:
        model = build_model(Settings(provider=provider))
        assert model._http.limits.max_bytes == 8 * MIB  # type: ignore[attr-defined]
    monkeypatch.setenv(SETTING, "1k")
    with pytest.raises(ValueError, match="greater than or equal"):
        Settings()


_MEASURE = textwrap.dedent("""
    import json, re, sys, tracemalloc
    from pathlib import Path
    from executor.errors import ModelResponseError
    from executor.messages import Message
    from executor.models import OllamaModel, OpenAIModel, RetryPolicy

    def kib(field):  # VmRSS: resident now; VmHWM: the peak so far
        return int(re.search(field + r":\\s+(\\d+)", Path("/proc/self/status").read_text())[1])

    provider, url, stream, cap = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    kind = OllamaModel if provider == "ollama" else OpenAIModel
    key = "host" if provider == "ollama" else "base_url"
    model = kind("fake-model", stream=stream, max_reply_bytes=cap,
                 retry=RetryPolicy(max_attempts=1), **{key: url})
    model.ping()  # the HTTP machinery is loaded and used once before the baseline
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = kib("VmRSS")
    tracemalloc.start()
    try:
        model.chat([Message.user("hello")], [])
        error = None
    except ModelResponseError as exc:
        error = str(exc)
    traced = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"error": error, "rss_growth": (kib("VmHWM") - before) * 1024,
                      "traced_peak": traced}))
""")

@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_controller_memory_stays_bounded_by_the_cap(
    provider: ProviderName, stream: bool, model_server: ModelServer
) -> None:
    cap = 4 * MIB
    model_server.flood(64 * MIB)  # 16x the cap; the red team's 300 MB took it to 1.1 GB
    url = model_server.url if provider == "ollama" else model_server.openai_url
    done = subprocess.run([sys.executable, "-c", _MEASURE, provider, url, str(int(stream)),
                           str(cap)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["error"] and SETTING in result["error"], result
    assert result["traced_peak"] < 3 * cap, result  # what Python allocated at the peak
    assert result["rss_growth"] < 3 * cap, result  # the process's peak RSS over its baseline


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_document_of_too_many_json_values_is_not_decoded(
    provider: ProviderName, model_server: ModelServer
) -> None:
    # 900 KB of `[]`: within the cap, but json.loads would make ~19 MB of lists of it.
    model_server.raw(200, b'{"message": {"content": "", "x": [' + b"[]," * 300_000 + b'[]]}}')
    with make_model(provider, model_server, stream=False, max_reply_bytes=CAP) as model, \
            pytest.raises(ModelResponseError, match=f"more than {MAX_VALUES:,} JSON values"):
        model.chat(HELLO, [])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_brackets_commas_and_quotes_inside_strings_are_not_values(
    provider: ProviderName, model_server: ModelServer
) -> None:
    code = 'x = [{"a": "\\\\", "b": [1, 2]}, {}]\n' * 8_000  # 2 x 340 KB: 256,000 marks
    whole = {"message": {"role": "assistant", "content": code},
             "choices": [{"message": {"role": "assistant", "content": code}}]}
    model_server.raw(200, json.dumps(whole).encode())
    with make_model(provider, model_server, stream=False, max_reply_bytes=CAP) as model:
        assert model.chat(HELLO, []).message.content == code.strip()
