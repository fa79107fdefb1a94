"""The stand-in model server itself: what other tests (and the CLI's end-to-end tests) rely on."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.fakes import Call, ModelServer, Reply


def test_records_method_path_headers_and_json_body(model_server: ModelServer) -> None:
    model_server.reply("hi")
    httpx.post(f"{model_server.url}/api/chat", json={"model": "m", "stream": False},
               headers={"X-Probe": "1"})
    (request,) = model_server.requests
    assert (request.method, request.path, request.protocol) == ("POST", "/api/chat", "ollama")
    assert request.headers["x-probe"] == "1"
    assert request.body == {"model": "m", "stream": False}
    assert request.streaming is False


def test_ollama_streams_by_default_openai_does_not(model_server: ModelServer) -> None:
    model_server.reply("a b").reply("a b")
    ollama = httpx.post(f"{model_server.url}/api/chat", json={})
    openai = httpx.post(f"{model_server.openai_url}/chat/completions", json={})
    assert ollama.headers["content-type"] == "application/x-ndjson"
    assert len(ollama.text.splitlines()) == 3
    assert openai.json()["choices"][0]["message"]["content"] == "a b"


def test_structured_calls_in_each_protocols_shape(model_server: ModelServer) -> None:
    model_server.reply(tool_calls=[Call("read_file", {"path": "a"})]).reply(
        tool_calls=[Call("read_file", {"path": "a"})])
    ollama = httpx.post(f"{model_server.url}/api/chat", json={"stream": False}).json()
    openai = httpx.post(f"{model_server.openai_url}/chat/completions", json={}).json()
    assert ollama["message"]["tool_calls"] == [
        {"function": {"name": "read_file", "arguments": {"path": "a"}}}]
    call = openai["choices"][0]["message"]["tool_calls"][0]
    assert call["function"] == {"name": "read_file", "arguments": '{"path": "a"}'}
    assert openai["choices"][0]["finish_reason"] == "tool_calls"


def test_an_empty_script_answers_409_unless_a_default_is_set(model_server: ModelServer) -> None:
    response = httpx.post(f"{model_server.url}/api/chat", json={"stream": False})
    assert response.status_code == 409
    assert "no scripted step left" in response.json()["error"]
    model_server.default = Reply("fallback")
    again = httpx.post(f"{model_server.url}/api/chat", json={"stream": False})
    assert again.json()["message"]["content"] == "fallback"


def test_responders_see_the_request(model_server: ModelServer) -> None:
    model_server.respond(lambda r: Reply(f"{len(r.body['messages'])} messages"))
    response = httpx.post(f"{model_server.url}/api/chat",
                          json={"stream": False, "messages": [{}, {}]})
    assert response.json()["message"]["content"] == "2 messages"


def test_metadata_endpoints(model_server: ModelServer) -> None:
    get = httpx.get
    assert get(f"{model_server.url}/api/version").json()["version"]
    assert get(f"{model_server.url}/api/tags").json()["models"][0]["name"] == "fake-model"
    assert get(f"{model_server.openai_url}/models").json()["data"][0]["id"] == "fake-model"
    assert get(f"{model_server.url}/props").json()["default_generation_settings"]["n_ctx"] == 8192
    assert get(f"{model_server.url}/nope").status_code == 404


def test_stop_wakes_a_hanging_request_and_joins_quickly() -> None:
    server = ModelServer().start()
    server.hang(60)
    errors: list[Exception] = []

    def call() -> None:
        try:
            httpx.post(f"{server.url}/api/chat", json={}, timeout=30)
        except httpx.HTTPError as exc:
            errors.append(exc)

    client = threading.Thread(target=call)
    client.start()
    while not server.requests:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    client.join(timeout=5)
    assert time.monotonic() - started < 2
    assert [type(e) for e in errors] == [httpx.RemoteProtocolError]


def test_concurrent_requests_each_take_one_step(model_server: ModelServer) -> None:
    for i in range(20):
        model_server.reply(str(i))
    results: list[str] = []

    def call() -> None:
        r = httpx.post(f"{model_server.url}/api/chat", json={"stream": False})
        results.append(r.json()["message"]["content"])

    threads = [threading.Thread(target=call) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=int) == [str(i) for i in range(20)]
    assert model_server.pending == 0


def test_port_is_only_known_once_started() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = ModelServer().url
