"""User mistakes and missing dependencies are one clear line and a distinct exit code, never a
traceback; `doctor`, `gc` and `image build` work from the real console script."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from executor.models import DEFAULT_OLLAMA_MODEL
from tests.docker.cli_support import (
    SANDBOX_AGENT,
    ask,
    assert_user_error,
    cli_env,
    containers_of,
    explain,
    model_args,
    run_cli,
)
from tests.fakes.model_server import Call, Hang, ModelServer, RecordedRequest

pytestmark = pytest.mark.docker


def _closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- one line, one exit code ------------------------------------------------------------------


def test_a_missing_root_is_a_usage_error(workdir: Path, model_server: ModelServer):
    done = ask(workdir / "nope", model_server, "ollama")

    assert_user_error(done, 2, str(workdir / "nope"), "not a directory")
    assert model_server.requests == []


def test_a_missing_image_names_the_command_that_builds_it(project: Path,
                                                          model_server: ModelServer,
                                                          docker_client: Any):
    done = ask(project, model_server, "ollama", "--image", "nope:1")

    assert_user_error(done, 12, "nope:1")
    # `image build` alone builds sandbox-agent:latest, not the image asked for
    assert "`sandbox-agent image build --tag nope:1`" in done.stderr
    assert model_server.chat_requests == []
    assert containers_of(docker_client, project) == []


def test_an_unreachable_engine_is_exit_11(project: Path, model_server: ModelServer):
    done = ask(project, model_server, "ollama",
               env={"DOCKER_HOST": "unix:///nonexistent.sock"})

    assert_user_error(done, 11, "Docker")
    fix = done.stderr.splitlines()[-1]
    assert fix.startswith("fix: DOCKER_HOST is unix:///nonexistent.sock, and /nonexistent.sock "
                          "does not exist")
    assert "install Docker" not in fix  # it is installed: the variable points nowhere
    assert model_server.chat_requests == []


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_an_unreachable_model_server_is_exit_21(project: Path, provider: str,
                                                docker_client: Any):
    port = _closed_port()
    host = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")

    done = run_cli("ask", "--root", project, "--provider", provider, "--host", host, "hi")

    assert_user_error(done, 21, f"127.0.0.1:{port}", "cannot connect")
    assert "fix:" in done.stderr
    assert done.stderr.count("retrying model request") == 2  # refused: retried twice, no more
    assert containers_of(docker_client, project) == []


def test_no_query_and_nothing_on_stdin_is_a_usage_error(project: Path,
                                                        model_server: ModelServer):
    done = ask(project, model_server, "ollama", query="")

    assert_user_error(done, 2, "query")
    assert model_server.requests == []


def test_the_query_is_read_from_stdin(project: Path, model_server: ModelServer):
    model_server.reply("Answered from stdin.")

    done = ask(project, model_server, "ollama", query="", stdin="  what is here?\n")

    assert done.returncode == 0, explain(done)
    assert done.stdout == "Answered from stdin.\n"
    assert model_server.last_chat.body["messages"][-1] == {"role": "user",
                                                           "content": "what is here?"}


def test_a_request_too_long_for_the_context_window_says_it_was_cut(project: Path,
                                                                  model_server: ModelServer):
    model_server.reply("Read what I was sent.")
    query = "HEAD " + "word " * 600_000 + "TAIL"  # 3 MB

    done = ask(project, model_server, "ollama", query="", stdin=query)

    assert done.returncode == 0, explain(done)
    [warning] = [line for line in done.stderr.splitlines() if "does not fit" in line]
    assert warning.startswith("warning: the request (3,000,009 characters)")
    sent = model_server.last_chat.body["messages"][-1]["content"]
    assert sent.startswith("HEAD") and sent.endswith("TAIL") and len(sent) < len(query)
    assert "truncated" in sent


@pytest.mark.parametrize("where", ["--policy", "root"])
def test_a_bad_policy_file_is_exit_3_with_its_line(project: Path, workdir: Path,
                                                   model_server: ModelServer, where: str):
    text = '[[rules]]\ntool = "write_file"\ndecision = "maybe"\n'
    if where == "root":
        (project / ".sandbox-agent").mkdir()
        (project / ".sandbox-agent" / "policy.toml").write_text(text)
        flags: list[str] = []
    else:
        (workdir / "policy.toml").write_text(text)
        flags = ["--policy", str(workdir / "policy.toml")]

    done = ask(project, model_server, "ollama", *flags)

    assert_user_error(done, 3, "policy.toml:3", "maybe")
    assert model_server.requests == []


def test_settings_come_from_the_environment_and_flags_win(project: Path,
                                                         model_server: ModelServer):
    env = {"SANDBOX_AGENT_PROVIDER": "openai", "SANDBOX_AGENT_HOST": model_server.url,
           "SANDBOX_AGENT_MODEL": "from-env", "SANDBOX_AGENT_STREAM": "false"}
    model_server.reply("From the environment.")
    by_env = run_cli("ask", "--root", project, "hi", env=env)
    model_server.reply("From the flags.")
    by_flags = run_cli("ask", "--root", project, "--provider", "ollama", "--host",
                       model_server.url, "--model", "from-flag", "--stream", "hi",
                       env={**env, "SANDBOX_AGENT_HOST": f"http://127.0.0.1:{_closed_port()}"})

    assert by_env.stdout == "From the environment.\n", explain(by_env)
    assert by_flags.stdout == "From the flags.\n", explain(by_flags)
    first, second = model_server.chat_requests
    assert (first.protocol, first.body["model"], first.body["stream"]) == (
        "openai", "from-env", False)
    assert (second.protocol, second.body["model"], second.body["stream"]) == (
        "ollama", "from-flag", True)


def test_ollama_host_without_a_scheme_is_used(project: Path, model_server: ModelServer):
    model_server.reply("Found via OLLAMA_HOST.")

    done = run_cli("ask", "--root", project, "hi",
                   env={"OLLAMA_HOST": f"127.0.0.1:{model_server.port}"})

    assert done.stdout == "Found via OLLAMA_HOST.\n", explain(done)
    assert model_server.last_chat.protocol == "ollama"


# -- doctor, gc, image build ------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_doctor_passes_against_a_live_server(model_server: ModelServer, provider: str):
    model_server.model = DEFAULT_OLLAMA_MODEL  # what a plain `ask` would use
    done = run_cli("doctor", *model_args(model_server, provider))

    assert done.returncode == 0, explain(done)
    lines = done.stdout.splitlines()
    assert all(line.startswith("✓ ") for line in lines), explain(done)
    assert "Docker engine" in lines[0] and "sandbox image" in lines[1]
    assert f"model provider {provider}" in lines[2] and model_server.url in lines[2]
    assert any(r.path in ("/api/version", "/v1/models") for r in model_server.requests)
    if provider == "ollama":  # the model ask would use is checked too
        assert lines[3:] == [f"✓ model {DEFAULT_OLLAMA_MODEL}: present"], explain(done)
    else:  # without --model, an OpenAI-compatible server answers with what it serves
        assert len(lines) == 3, explain(done)


def test_plain_doctor_fails_when_the_server_lacks_the_model_ask_would_use(
        model_server: ModelServer):
    done = run_cli("doctor", *model_args(model_server, "ollama"))

    assert done.returncode == 1, explain(done)
    lines = done.stdout.splitlines()
    assert lines[3] == (f"✗ model {DEFAULT_OLLAMA_MODEL}: the server does not have "
                        f"'{DEFAULT_OLLAMA_MODEL}'"), explain(done)
    assert f"ollama pull {DEFAULT_OLLAMA_MODEL}" in lines[4]


def test_doctor_takes_a_model_name_without_ollamas_implicit_tag(model_server: ModelServer):
    model_server.model = "llama3:latest"
    done = run_cli("doctor", *model_args(model_server, "ollama"), "--model", "llama3")

    assert done.returncode == 0, explain(done)
    assert done.stdout.splitlines()[3] == "✓ model llama3: present (as llama3:latest)"


@pytest.fixture
def html_server() -> Any:
    """A web server that answers every request with a page: a --host that is not an API."""
    import http.server

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._page()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self._page()

        def _page(self) -> None:
            body = b"<!doctype html><html><body>Welcome to nginx!</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_an_openai_host_answering_html_is_a_host_error_not_the_models(
        project: Path, html_server: str, stream: str):
    done = run_cli("ask", "--root", project, "--provider", "openai", "--host", html_server,
                   "--model", "m", stream, "hi")

    line = assert_user_error(done, 23, "Welcome to nginx!")
    assert "not JSON" in line or "not an event stream of JSON" in line
    assert done.stderr.splitlines()[-1].startswith("fix: check")
    assert "--host" in done.stderr.splitlines()[-1]
    assert "capable model" not in done.stderr




def test_doctor_fails_and_prints_the_fix_for_a_dead_server():
    port = _closed_port()

    done = run_cli("doctor", "--host", f"http://127.0.0.1:{port}")

    assert done.returncode == 1, explain(done)
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("✓ Docker engine") and lines[1].startswith("✓ sandbox image")
    assert lines[2].startswith("✗ model provider ollama") and f":{port}" in lines[2]
    assert lines[3].strip().startswith("fix:") and "ollama serve" in lines[3]


def test_doctor_reports_an_unreachable_engine():
    done = run_cli("doctor", "--host", "http://127.0.0.1:1",
                   env={"DOCKER_HOST": "unix:///nonexistent.sock"})

    assert done.returncode == 1, explain(done)
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.startswith("✗ Docker engine")
    assert "fix:" in done.stdout


def test_image_build_help():
    done = run_cli("image", "build", "--help")

    assert done.returncode == 0, explain(done)
    assert "Usage: sandbox-agent image build" in done.stdout
    assert "--base" in done.stdout and "--tag" in done.stdout


def test_image_build_from_a_base_that_cannot_be_pulled_names_the_offline_way(docker_client: Any):
    base = f"sandbox-agent-no-such-base-{uuid.uuid4().hex[:8]}:1"
    done = run_cli("image", "build", "--base", base, "--tag", "sandbox-agent-never-built:1")

    assert_user_error(done, 12, f"cannot pull base image '{base}'")
    assert "make base-image" in done.stderr
    assert not docker_client.images.list(name="sandbox-agent-never-built")


def test_help_lists_the_exit_codes():
    done = run_cli("ask", "--help")

    assert done.returncode == 0, explain(done)
    said = " ".join(done.stdout.split())  # wrapped to the terminal's width
    assert "Exit codes:" in said and "31 max turns" in said and "16 no such runtime" in said


def _as_host(hostname: str, argv: list[str]) -> list[str]:
    """`argv` run in its own UTS namespace named `hostname`.

    `gc` only touches containers labelled with its own host name, so a fresh name keeps this
    test away from the containers of every other test running on the same engine.
    """
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", "--uts", *user, "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv]


def test_gc_removes_the_container_of_a_killed_run_and_only_that(
        project: Path, model_server: ModelServer, docker_client: Any):
    hostname = f"gc-test-{uuid.uuid4().hex[:8]}"
    asked = threading.Event()

    def hang(request: RecordedRequest) -> Hang:
        asked.set()
        return Hang(60)

    model_server.respond(hang)
    run = subprocess.Popen(
        _as_host(hostname, [str(SANDBOX_AGENT), "ask", "--root", str(project),
                            *model_args(model_server, "ollama"), "hello"]),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        assert asked.wait(60), "the run never asked the model"
        deadline = time.monotonic() + 30  # it warms up while the model thinks
        while not containers_of(docker_client, project) and time.monotonic() < deadline:
            time.sleep(0.1)
        [container] = containers_of(docker_client, project)
        assert container.labels["sandbox-agent.host"] == hostname

        in_use = subprocess.run(_as_host(hostname, [str(SANDBOX_AGENT), "gc"]),
                                capture_output=True, text=True, env=cli_env(), timeout=60)
        assert in_use.returncode == 0 and in_use.stdout == "", in_use
        assert "0 removed, 1 in use" in in_use.stderr
        assert containers_of(docker_client, project) != []

        run.kill()  # SIGKILL: no cleanup, the container is orphaned
        run.wait(timeout=30)
        assert containers_of(docker_client, project) != []

        done = subprocess.run(_as_host(hostname, [str(SANDBOX_AGENT), "gc"]),
                              capture_output=True, text=True, env=cli_env(), timeout=60)
        assert done.returncode == 0, done
        assert done.stdout == f"removed {container.name}\n"
        assert "1 removed, 0 in use" in done.stderr
        assert containers_of(docker_client, project) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


# -- text from outside is printed as it is, never read as console markup ----------------------


def test_a_server_error_with_brackets_is_shown_literally(project: Path,
                                                         model_server: ModelServer):
    model_server.error(400, "invalid value [/] for [bold]tools[/bold]")

    done = ask(project, model_server, "ollama", "--model", "[/odd]name")

    line = assert_user_error(done, 23, "HTTP 400")
    assert line.endswith("invalid value [/] for [bold]tools[/bold]")
    assert "model [/odd]name" in done.stderr  # the session line


def test_doctor_shows_what_the_server_says_literally(model_server: ModelServer):
    model_server.model = "[/weird]model"

    done = run_cli("doctor", *model_args(model_server, "openai"))

    assert done.returncode == 0, explain(done)
    assert "serves [/weird]model" in done.stdout


def test_policy_rule_labels_are_shown_literally(project: Path, workdir: Path,
                                                model_server: ModelServer):
    (workdir / "p.toml").write_text(
        '[[rules]]\ntool = "write_file"\ndecision = "deny"\nreason = "no [/writes] here"\n')
    model_server.reply(tool_calls=[Call("write_file", {"path": "x.txt", "content": "y"})])
    model_server.reply("Denied, fine.")

    done = ask(project, model_server, "ollama", "--policy", workdir / "p.toml", "--yes")

    assert done.returncode == 0, explain(done)
    assert "refused: no [/writes] here (p.toml:1 [[rules]] #1)" in done.stderr
    assert not (project / "x.txt").exists()
