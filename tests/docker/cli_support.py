"""Driving the real `sandbox-agent` console script against the stand-in model server.

Each run is a subprocess with no terminal (stdin is /dev/null or a pipe), so the CLI is
non-interactive and fails closed, exactly as in CI. The environment is scrubbed of
`SANDBOX_AGENT_*`, Ollama and OpenAI variables, so only what a test passes decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.conftest import PRIVATE_ENV
from tests.docker.conftest import IMAGE
from tests.fakes.model_server import ModelServer, RecordedRequest

SANDBOX_AGENT = Path(sys.executable).parent / "sandbox-agent"
"""The console script installed in the venv that runs the tests."""
RUN_TIMEOUT = 120
"""Seconds any one CLI run may take before the test fails."""
ALL_TOOLS = {"read_file", "list_files", "search_files", "write_file", "edit_file",
             "run_shell_command"}
READ_TOOLS = {"read_file", "list_files", "search_files"}
PROVIDERS = ("ollama", "openai")
_SCRUBBED = ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY", "DOCKER_HOST")
_KEPT = (*PRIVATE_ENV, "SANDBOX_AGENT_RUNTIME")  # the last one: set by the `engine` fixture


def cli_env(**extra: str) -> dict[str, str]:
    """The host environment minus anything that configures sandbox-agent, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("SANDBOX_AGENT_") or k in _KEPT) and k not in _SCRUBBED}
    env.update(SANDBOX_AGENT_IMAGE=IMAGE, SANDBOX_AGENT_RETRY_BASE_DELAY="0.01",
               NO_COLOR="1", COLUMNS="250", TERM="dumb", PAGER="cat")  # cat: no pager
    if "DOCKER_HOST" in os.environ:  # the engine the fixtures use, unless a test overrides it
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    env.update(extra)
    return env


def run_cli(*args: Any, env: dict[str, str] | None = None, stdin: str | None = None,
            timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run `sandbox-agent ARGS`; stdin is /dev/null unless text is given (then a pipe)."""
    command = [str(SANDBOX_AGENT), *(str(a) for a in args)]
    io: dict[str, Any] = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
    return subprocess.run(command, capture_output=True, text=True, env=cli_env(**(env or {})),
                          timeout=timeout, check=False, **io)


def model_args(server: ModelServer, provider: str) -> list[str]:
    """`--provider` and `--host` pointing at the stand-in server in that protocol."""
    return ["--provider", provider, "--host", server.url if provider == "ollama" else
            server.openai_url]


def ask(root: Path, server: ModelServer, provider: str, *flags: Any, query: str = "do the task",
        env: dict[str, str] | None = None, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """`sandbox-agent ask --root ROOT --provider P --host URL FLAGS QUERY`."""
    tail = [query] if query else []
    return run_cli("ask", "--root", root, *model_args(server, provider), *flags, *tail,
                   env=env, stdin=stdin)


def explain(done: subprocess.CompletedProcess[str]) -> str:
    """Everything a failed assertion needs to show about a run."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def assert_ok(done: subprocess.CompletedProcess[str], answer: str) -> None:
    """Exit 0, stdout exactly the answer, no traceback."""
    assert done.returncode == 0, explain(done)
    assert done.stdout == answer + "\n", explain(done)
    assert "Traceback" not in done.stderr, explain(done)


def assert_user_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Exit `code`, one `error:` line on stderr naming every needle, no traceback; the line."""
    assert done.returncode == code, explain(done)
    assert "Traceback" not in done.stderr + done.stdout, explain(done)
    lines = done.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(errors) == 1, explain(done)
    tail = lines[errors[0]:]  # the error is the last thing said: its line, then maybe its fix
    assert len(tail) == 1 or (len(tail) == 2 and tail[1].startswith("fix: ")), explain(done)
    for needle in needles:
        assert needle in tail[0], explain(done)
    return tail[0]


def offered_tools(request: RecordedRequest) -> list[str]:
    """Names of the tools in a request's `tools` field (native protocol)."""
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


def tool_exchanges(request: RecordedRequest) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, result) in the order a native request carries them back.

    Each result must directly answer a call of the assistant message before it: by
    `tool_call_id` (OpenAI) or in order with a matching `tool_name` (Ollama).
    """
    pairs: list[tuple[str, dict[str, Any], str]] = []
    pending: list[dict[str, Any]] = []
    for message in request.body["messages"]:
        if message["role"] == "assistant":
            assert not pending, f"calls without results: {pending}"
            pending = list(message.get("tool_calls") or [])
        elif message["role"] == "tool":
            call = pending.pop(0)
            if "tool_call_id" in message:
                assert message["tool_call_id"] == call["id"], (message, call)
            else:
                assert message.get("tool_name") == call["function"]["name"], (message, call)
            pairs.append((call["function"]["name"], _arguments(call), message["content"]))
        else:
            assert not pending, f"calls without results before a {message['role']} message"
    return pairs


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["function"]["arguments"]
    return json.loads(arguments) if isinstance(arguments, str) else dict(arguments)


def text_results(request: RecordedRequest) -> list[str]:
    """The `TOOL_RESULT <tool>:` user messages of a json/constrained request, in order."""
    return [m["content"] for m in request.body["messages"]
            if m["role"] == "user" and m["content"].startswith("TOOL_RESULT ")]


def tree(root: Path, skip: Iterable[str] = (".git", ".sandbox-agent")) -> dict[str, bytes]:
    """Every file under `root` (minus `skip` at the top) by relative path, with its bytes."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in skip or path.is_dir():
            continue
        files[relative.as_posix()] = path.read_bytes()
    return files


def containers_of(docker_client: Any, root: Path) -> list[Any]:
    """Sandbox containers (running or not) whose root label is `root`."""
    return list(docker_client.containers.list(
        all=True, filters={"label": f"sandbox-agent.root={root}"}))
