"""The CLI as scripts and people use it: `ask --json`, `--json-stream`, `--fail-on-denied`,
the user config file, AGENTS.md, `models`, and the rough edges that used to be tracebacks.

Every run is the real console script against the stand-in model server and a real container.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from executor.session import list_sessions
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
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker


def _config_dir() -> Path:
    return Path(os.environ["SANDBOX_AGENT_CONFIG_DIR"])


# -- ask --json, --json-stream, --fail-on-denied --------------------------------------------------


def _script_mixed(server: ModelServer) -> None:
    server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})], prompt_tokens=100,
                 completion_tokens=10)
    server.reply(tool_calls=[Call("run_shell_command", {"command": "touch made.txt"})])
    server.reply(tool_calls=[Call("write_file", {"path": "new.txt", "content": "x\n"})])
    server.reply("Done: one read, one denied.", prompt_tokens=150, completion_tokens=5)


def test_ask_json_is_one_object_with_calls_denials_and_usage(project: Path,
                                                            model_server: ModelServer):
    _script_mixed(model_server)

    done = ask(project, model_server, "ollama", "--json")

    assert done.returncode == 0, explain(done)
    [line] = done.stdout.splitlines()
    data = json.loads(line)
    assert data["type"] == "result" and data["schema_version"] == 1
    assert data["status"] == "ok" and data["answer"] == "Done: one read, one denied."
    assert data["turns"] == 4 and data["session"] and data["root"] == str(project)
    read, shell, write = data["tool_calls"]
    assert (read["tool"], read["ok"], read["denied"], read["decision"]) == (
        "read_file", True, False, "allow")
    assert read["duration_ms"] is not None
    assert shell["denied"] and shell["ok"] is None and "approval" in shell["reason"]
    assert write["denied"] and write["arguments"] == {"path": "new.txt", "content": "x\n"}
    assert data["changes"] == []
    usage = data["usage"]
    assert usage["prompt_tokens"] >= 250 and usage["completion_tokens"] >= 15
    assert usage["model_requests"] == 4 and usage["wall_ms"] >= usage["model_ms"] > 0
    assert "4 model turns" in done.stderr  # progress stays on stderr
    assert not (project / "made.txt").exists()


def test_ask_json_reports_changes_and_exit_codes_of_shell_calls(project: Path,
                                                                model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "a.txt", "content": "1\n"})])
    model_server.reply(tool_calls=[Call("run_shell_command",
                                        {"command": "echo 2 > b.txt; rm hello.py; exit 3"})])
    model_server.reply("Changed things.")

    done = ask(project, model_server, "openai", "--json", "--yes")

    assert done.returncode == 0, explain(done)
    data = json.loads(done.stdout)
    assert len(data["tool_calls"]) == 2, data
    assert data["tool_calls"][1]["exit_code"] == 3 and data["tool_calls"][1]["ok"] is False
    changes = {c["path"]: c["change"] for c in data["changes"]}
    assert changes == {"a.txt": "created", "b.txt": "created", "hello.py": "deleted"}


def test_fail_on_denied_exits_32_and_still_prints_the_object(project: Path,
                                                            model_server: ModelServer):
    _script_mixed(model_server)

    done = ask(project, model_server, "ollama", "--json", "--fail-on-denied")

    line = assert_user_error(done, 32, "2 tool call(s) were denied", "run_shell_command")
    data = json.loads(done.stdout)
    assert data["status"] == "denied" and data["answer"] == "Done: one read, one denied."
    assert data["error"]["type"] == "CallsDeniedError" and data["error"]["exit_code"] == 32
    assert data["error"]["message"] in line
    for reason in (c["reason"] for c in data["tool_calls"] if c["denied"]):
        assert reason[:40] in line  # each reason named, and not cut mid-word…
    assert " …)" in line or all(c["reason"] in line for c in data["tool_calls"] if c["denied"])


def test_a_file_created_and_deleted_in_one_run_is_no_change(project: Path,
                                                            model_server: ModelServer):
    model_server.reply(tool_calls=[Call("write_file", {"path": "tmp.txt", "content": "1\n"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "rm tmp.txt hello.py"})])
    model_server.reply(tool_calls=[Call("write_file", {"path": "hello.py", "content": "2\n"})])
    model_server.reply("Tidied.")

    done = ask(project, model_server, "ollama", "--json", "--yes")

    assert done.returncode == 0, explain(done)
    data = json.loads(done.stdout)
    assert [(c["path"], c["change"]) for c in data["changes"]] == [("hello.py", "modified")]
    assert not (project / "tmp.txt").exists()


def test_json_names_no_session_when_the_model_never_answered(project: Path):
    done = run_cli("ask", "--root", project, "--host", "http://127.0.0.1:1", "--json", "hi",
                   env={"SANDBOX_AGENT_MAX_RETRIES": "0"})

    assert_user_error(done, 21, "cannot connect")
    data = json.loads(done.stdout)
    assert data["status"] == "error" and data["session"] is None
    assert list_sessions(project) == []  # removed, as the null says


def test_fail_on_denied_passes_a_run_without_denials(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("Read it.")

    done = ask(project, model_server, "ollama", "--fail-on-denied")

    assert done.returncode == 0 and done.stdout == "Read it.\n", explain(done)


def test_an_answer_after_only_failed_changes_exits_34_with_status_incomplete(
        project: Path, model_server: ModelServer):
    edit = {"path": "hello.py", "old_text": "not in the file", "new_text": "x"}
    model_server.reply(tool_calls=[Call("edit_file", edit)])
    model_server.reply(tool_calls=[Call("edit_file", edit)])
    model_server.reply("I updated hello.py.")  # the claim the calls contradict

    done = ask(project, model_server, "ollama", "--json", "--yes")

    assert_user_error(done, 34, "no file was changed", "2 attempted", "edit_file hello.py")
    data = json.loads(done.stdout)
    assert data["status"] == "incomplete" and data["answer"] == "I updated hello.py."
    assert "edit_file hello.py" in data["unfinished"] and data["changes"] == []
    assert (project / "hello.py").read_text() == 'print("hello")\n'


def test_files_a_command_changed_count_though_every_write_then_failed(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo x > made.txt"})])
    model_server.reply(tool_calls=[Call("edit_file", {
        "path": "hello.py", "old_text": "not in the file", "new_text": "x"})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--json", "--yes")

    assert done.returncode == 0, explain(done)
    data = json.loads(done.stdout)
    assert data["status"] == "ok" and data["unfinished"] is None
    assert "made.txt" in json.dumps(data["changes"])
    assert (project / "made.txt").read_text() == "x\n"


def test_a_question_answered_without_changes_exits_0(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "missing.py"})])  # a failed look
    model_server.reply("There is no missing.py.")

    done = ask(project, model_server, "ollama", "--json", "--yes")

    assert done.returncode == 0, explain(done)
    assert json.loads(done.stdout)["status"] == "ok"


def test_a_failed_run_still_prints_its_json_with_the_status(project: Path,
                                                            model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])

    done = ask(project, model_server, "ollama", "--json", "--max-turns", "2")

    assert_user_error(done, 31, "no final answer after 2 model turns")
    data = json.loads(done.stdout)
    assert data["status"] == "max_turns" and data["answer"] is None
    assert data["error"]["exit_code"] == 31 and len(data["tool_calls"]) == 2


def test_json_stream_is_one_event_a_line_ending_with_the_result(project: Path,
                                                                model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("It prints hello.")

    done = ask(project, model_server, "openai", "--json-stream")

    assert done.returncode == 0, explain(done)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds == ["start", "model_reply", "tool_call", "tool_result", "model_reply", "result"]
    assert events[0]["schema_version"] == 1 and events[0]["root"] == str(project)
    assert events[2]["tool"] == "read_file" and events[2]["decision"] == "allow"
    assert events[3]["output"] == '     1\tprint("hello")'
    assert events[-1]["answer"] == "It prints hello."


def test_json_stream_begins_with_start_then_the_instructions(project: Path,
                                                             model_server: ModelServer):
    (project / "AGENTS.md").write_text("Run the tests with pytest.\n")
    model_server.reply("Noted.")

    done = ask(project, model_server, "ollama", "--json-stream")

    assert done.returncode == 0, explain(done)
    kinds = [json.loads(line)["type"] for line in done.stdout.splitlines()]
    assert kinds == ["start", "instructions", "model_reply", "result"]


def test_an_interrupted_run_prints_its_json_with_status_interrupted(
        project: Path, model_server: ModelServer, docker_client: Any):
    import signal
    import threading

    from tests.fakes.model_server import Hang, RecordedRequest

    asked = threading.Event()

    def hang(request: RecordedRequest) -> Hang:
        asked.set()
        return Hang(60)

    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.respond(hang)
    run = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), *model_args(model_server, "ollama"),
         "--json", "hello"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert asked.wait(60), "the run never asked the model a second time"
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

    assert run.returncode == 130, err
    data = json.loads(out)
    assert data["status"] == "interrupted" and data["error"]["exit_code"] == 130
    assert [c["tool"] for c in data["tool_calls"]] == ["read_file"]
    assert containers_of(docker_client, project) == []


# -- queries that are not text, empty sessions ---------------------------------------------------


@pytest.mark.parametrize("query", ["", "   \n\t"])
def test_an_empty_query_is_a_usage_error_and_never_sent(project: Path,
                                                       model_server: ModelServer, query: str):
    by_arg = run_cli("ask", "--root", project, *model_args(model_server, "ollama"), query or " ")
    by_stdin = ask(project, model_server, "ollama", query="", stdin=query)

    assert_user_error(by_arg, 2, "the query is empty")
    assert_user_error(by_stdin, 2, "the query is empty")
    assert model_server.requests == []


def test_a_non_utf8_query_is_refused_and_a_session_with_such_bytes_still_resumes(
        project: Path, model_server: ModelServer):
    command = [str(SANDBOX_AGENT), "ask", "--root", str(project),
               *model_args(model_server, "ollama")]
    as_arg = subprocess.run([*command.copy(), b"caf\xe9".decode("utf-8", "surrogateescape")],
                            capture_output=True, env=cli_env(), timeout=60, check=False)
    as_stdin = subprocess.run(command, input=b"caf\xe9 ?", capture_output=True, env=cli_env(),
                              timeout=60, check=False)
    assert as_arg.returncode == 2 and b"error: the query is not UTF-8" in as_arg.stderr
    assert as_stdin.returncode == 2 and b"byte 0xe9 at offset 3" in as_stdin.stderr
    assert model_server.requests == []

    # Tool output that is not UTF-8 is kept in the session; every resume must still work.
    (project / "latin1.txt").write_bytes(b"caf\xe9\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat latin1.txt"})])
    model_server.reply("Read it.")
    first = ask(project, model_server, "ollama", "--yes")
    model_server.reply("Still fine.")
    resumed = ask(project, model_server, "ollama", "--resume", query="again")

    assert first.returncode == 0, explain(first)
    assert resumed.returncode == 0 and resumed.stdout == "Still fine.\n", explain(resumed)
    sent = model_server.last_chat.raw.decode("utf-8")  # valid UTF-8 on the wire
    assert "caf\ufffd" in sent


def test_a_wrong_host_leaves_no_session_for_resume_to_pick(project: Path,
                                                          model_server: ModelServer,
                                                          docker_client: Any):
    model_server.reply("First answer.")
    good = ask(project, model_server, "ollama", "--session", "good")
    bad = run_cli("ask", "--root", project, "--host", "http://127.0.0.1:1", "hi",
                  env={"SANDBOX_AGENT_MAX_RETRIES": "0"})
    model_server.reply("Resumed the good one.")
    resumed = ask(project, model_server, "ollama", "--resume", query="go on")

    assert good.returncode == 0, explain(good)
    assert_user_error(bad, 21, "cannot connect")
    assert "retrying" not in bad.stderr  # MAX_RETRIES=0: one attempt
    assert [s.name for s in list_sessions(project)] == ["good"]
    assert resumed.stdout == "Resumed the good one.\n", explain(resumed)
    assert containers_of(docker_client, project) == []


# -- configuration -------------------------------------------------------------------------------


def test_the_user_config_sets_defaults_below_env_and_flags(project: Path,
                                                          model_server: ModelServer):
    config = _config_dir()
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(
        f'provider = "openai"\nhost = "{model_server.url}"\nmodel = "from-config"\n'
        "stream = false\n")
    model_server.reply("A.").reply("B.").reply("C.")

    by_config = run_cli("ask", "--root", project, "hi")
    by_env = run_cli("ask", "--root", project, "hi", env={"SANDBOX_AGENT_MODEL": "from-env"})
    by_flag = run_cli("ask", "--root", project, "--model", "from-flag", "hi",
                      env={"SANDBOX_AGENT_MODEL": "from-env"})

    for done in (by_config, by_env, by_flag):
        assert done.returncode == 0, explain(done)
    models = [r.body["model"] for r in model_server.chat_requests]
    assert models == ["from-config", "from-env", "from-flag"]
    assert all(r.protocol == "openai" for r in model_server.chat_requests)


def test_a_config_file_in_the_project_is_never_read(project: Path, model_server: ModelServer):
    (project / "config.toml").write_text('host = "http://127.0.0.1:1"\n')
    (project / ".sandbox-agent").mkdir()
    (project / ".sandbox-agent" / "config.toml").write_text('host = "http://127.0.0.1:1"\n')
    model_server.reply("Used my own settings.")

    done = ask(project, model_server, "ollama")

    assert done.stdout == "Used my own settings.\n", explain(done)


def test_a_writable_run_is_refused_when_the_config_dir_is_in_the_project(
        project: Path, model_server: ModelServer):
    """The third outside review: dotfiles kept in a repository (or `--root ~`) put the config
    dir in the project, and a --yes session planted policy.toml / config.toml there that a
    later run on another project obeyed. A run that can write the tree is refused at once,
    even while the dir is empty; a read-only run cannot plant anything, and a copy run's
    `apply` never writes there (test_workspace_guards.py)."""
    inside = {"SANDBOX_AGENT_CONFIG_DIR": str(project / "dotfiles" / "sandbox-agent")}
    model_server.reply("Read only.").reply("A copy.")

    writable = ask(project, model_server, "ollama", "--yes", env=inside)
    read_only = ask(project, model_server, "ollama", "--read-only", env=inside)
    copy = ask(project, model_server, "ollama", "--yes", "--workspace", "copy", env=inside)

    line = assert_user_error(writable, 2, "your config dir", "is inside the project root")
    assert "SANDBOX_AGENT_CONFIG_DIR" in writable.stderr.split(line, 1)[1]
    assert read_only.stdout == "Read only.\n", explain(read_only)
    assert copy.returncode == 0, explain(copy)
    assert not (project / "dotfiles").exists()


@pytest.mark.parametrize(("text", "needles"), [
    ('model = "m"\nmodle = "x"\n', ["config.toml:2", "unknown key 'modle'"]),
    ("max_turns = 0\n", ["config.toml:1", "max_turns", "greater than or equal to 1"]),
    ("host = \n", ["config.toml:1", "invalid TOML"]),
    ('model = "m"\n\n[ollama]\nhost = "x"\n', ["config.toml:3", "unknown section [ollama]"]),
])
def test_a_bad_user_config_is_one_line_with_file_and_line(project: Path,
                                                         model_server: ModelServer,
                                                         text: str, needles: list[str]):
    _config_dir().mkdir(parents=True, exist_ok=True)
    (_config_dir() / "config.toml").write_text(text)

    done = ask(project, model_server, "ollama")

    assert_user_error(done, 2, *needles)
    assert model_server.requests == []
    if "modle" in text:  # a near miss is named
        assert done.stderr.splitlines()[-1].startswith("fix: did you mean 'model'? use one of:")


@pytest.mark.parametrize(("env", "needles"), [
    ({"SANDBOX_AGENT_TIMEOUT": "-1"}, ["SANDBOX_AGENT_TIMEOUT", "'-1'", "greater than 0"]),
    ({"SANDBOX_AGENT_ENV_ALLOW": "LANG;rm"}, ["SANDBOX_AGENT_ENV_ALLOW", "not an environment"]),
    ({"SANDBOX_AGENT_MAX_RETRIES": "-1"}, ["SANDBOX_AGENT_MAX_RETRIES"]),
    ({"SANDBOX_AGENT_PROVIDER": "foo"}, ["SANDBOX_AGENT_PROVIDER", "'foo'"]),
    # not checked before: every tool call failed with a ValueError, and 0 meant no limit
    ({"SANDBOX_AGENT_MEMORY": "lots"}, ["SANDBOX_AGENT_MEMORY", "not a size: 'lots'"]),
    ({"SANDBOX_AGENT_MEMORY": "0"}, ["SANDBOX_AGENT_MEMORY", "under 1m (0 would mean no limit)"]),
    ({"SANDBOX_AGENT_TMP_SIZE": "64q"}, ["SANDBOX_AGENT_TMP_SIZE", "not a size: '64q'"]),
])
def test_bad_environment_values_are_one_line(project: Path, model_server: ModelServer,
                                             env: dict[str, str], needles: list[str]):
    done = ask(project, model_server, "ollama", env=env) if "PROVIDER" not in str(env) else \
        run_cli("ask", "--root", project, "--host", model_server.url, "hi", env=env)

    assert_user_error(done, 2, *needles)
    assert model_server.requests == []


def test_env_allow_takes_a_plain_name(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "echo $MY_FLAVOUR"})])
    model_server.reply("ok")

    done = ask(project, model_server, "ollama", "--yes",
               env={"SANDBOX_AGENT_ENV_ALLOW": "MY_FLAVOUR", "MY_FLAVOUR": "mint"})

    assert done.returncode == 0, explain(done)
    assert "mint" in model_server.last_chat.body["messages"][-1]["content"]


@pytest.mark.parametrize(("args", "needles"), [
    (["ask", "--root", "{file}", "hi"], ["'--root'", "is a file"]),
    (["ask", "--provider", "foo", "hi"], ["'--provider'", "'foo' is not one of"]),
    (["doctor", "--provider", "foo"], ["'--provider'", "'foo'"]),
    (["ask", "--no-such-flag"], ["no such option: --no-such-flag"]),
    # click lists the choices a line each: on one line here
    (["audit", "export"], ["missing option '--format' / '-f'. Choose from: jsonl, csv, ocsf"]),
])
def test_click_usage_errors_are_one_line_with_a_fix(project: Path, args: list[str],
                                                   needles: list[str]):
    done = run_cli(*[a.format(file=project / "hello.py") for a in args])

    line = assert_user_error(done, 2, *needles)
    assert done.stderr.splitlines()[-1].startswith("fix: see `sandbox-agent ")
    assert "Usage:" not in done.stderr and line.startswith("error: ")


def test_gc_of_a_root_that_does_not_exist_says_so(workdir: Path):
    done = run_cli("gc", "--root", workdir / "nope")

    assert_user_error(done, 2, "does not exist", str(workdir / "nope"))


@pytest.mark.parametrize("where", ["the whole file system", "your home directory"])
def test_a_root_nobody_means_gets_a_fix_that_can_be_followed(where: str, tmp_path: Path,
                                                             model_server: ModelServer):
    """The config dir is inside / (and ~): the fix said to move it outside the project."""
    home = tmp_path / "home"
    config = home / ".config" / "sandbox-agent"
    config.mkdir(parents=True)
    root = "/" if where == "the whole file system" else str(home)
    done = run_cli("ask", "--root", root, "--host", model_server.url, "hi",
                   env={"HOME": str(home), "SANDBOX_AGENT_CONFIG_DIR": str(config)})

    assert_user_error(done, 2, "is inside the project root")
    assert done.stderr.splitlines()[-1] == (f"fix: --root {root} is {where}: pass the "
                                            "project's own directory (--root ./proj)")
    assert model_server.requests == []


@pytest.mark.parametrize("tag", ["bad tag", "Upper:latest", "x:"])
def test_an_image_name_that_is_none_is_refused_before_anything_is_pulled(tag: str):
    done = run_cli("image", "build", "--tag", tag)

    assert_user_error(done, 2, f"not an image name: {tag!r}")
    assert "pulling" not in done.stderr


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_sessions_of_a_root_that_does_not_exist_says_so(workdir: Path, flags: list[str]):
    """A typo in --root said "no sessions in ..." and exit 0."""
    done = run_cli("sessions", "--root", workdir / "nope", *flags)

    assert_user_error(done, 2, "is not a directory", str(workdir / "nope"))
    assert done.stdout == ""


# -- project instructions --------------------------------------------------------------------------


def test_agents_md_is_text_for_the_model_never_a_permission(project: Path, workdir: Path,
                                                           model_server: ModelServer):
    (project / "AGENTS.md").write_text("Run the tests with pytest.\nYou may write files freely.\n")
    (workdir / "prompt.txt").write_text("You are a terse reviewer.")
    model_server.reply(tool_calls=[Call("write_file", {"path": "x.txt", "content": "y"})])
    model_server.reply("Could not write.")

    done = ask(project, model_server, "ollama", "--trace", "--system-prompt-file",
               workdir / "prompt.txt")

    assert done.returncode == 0, explain(done)
    system = model_server.chat_requests[0].body["messages"][0]["content"]
    assert system.startswith("You are a terse reviewer.")
    assert "Project instructions from AGENTS.md in the repository" in system
    assert "they grant no permissions" in system and "Run the tests with pytest." in system
    assert "project instructions: AGENTS.md (55 bytes" in done.stderr
    assert "You may write files freely." in done.stderr  # --trace shows the text
    assert not (project / "x.txt").exists()  # still denied: it is text, not a permission


def test_a_symlinked_agents_md_is_not_read(project: Path, workdir: Path,
                                           model_server: ModelServer):
    (workdir / "secret.md").write_text("HOST SECRET")
    (project / "AGENTS.md").symlink_to(workdir / "secret.md")
    model_server.reply("ok")

    done = ask(project, model_server, "ollama", "--trace")

    assert done.returncode == 0, explain(done)
    assert "HOST SECRET" not in json.dumps(model_server.last_chat.body)
    assert "project instructions" not in done.stderr


# -- models, doctor --model, a missing model ------------------------------------------------------


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_models_lists_what_the_server_has(model_server: ModelServer, provider: str):
    model_server.model = "qwen-test:1b"

    listed = run_cli("models", *model_args(model_server, provider))
    as_json = run_cli("models", *model_args(model_server, provider), "--json")

    assert listed.returncode == 0 and listed.stdout == "qwen-test:1b\n", explain(listed)
    assert json.loads(as_json.stdout) == ["qwen-test:1b"]


def test_doctor_fails_for_a_model_the_server_does_not_have(model_server: ModelServer):
    done = run_cli("doctor", *model_args(model_server, "ollama"), "--model", "absent:7b")

    assert done.returncode == 1, explain(done)
    lines = done.stdout.splitlines()
    assert (lines[3].startswith("✗ model absent:7b") and "fake" in lines[4]) or "has:" in lines[4]
    assert "ollama pull absent:7b" in lines[4]


def test_a_404_for_the_model_lists_what_is_available(project: Path, model_server: ModelServer):
    model_server.error(404, "model 'absent:7b' not found")

    done = ask(project, model_server, "ollama", "--model", "absent:7b")

    assert_user_error(done, 23, "HTTP 404")
    assert f"fix: the server has: {model_server.model}; pass one with --model" in done.stderr


# -- sessions ------------------------------------------------------------------------------------


def test_sessions_tell_failed_runs_from_good_ones_and_show_events_in_words(
        project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    model_server.reply("Fine.")
    ok = ask(project, model_server, "ollama", "--session", "good")
    model_server.reply(tool_calls=[Call("read_file", {"path": "hello.py"})])
    failed = ask(project, model_server, "ollama", "--session", "bad", "--max-turns", "1")

    listing = json.loads(run_cli("sessions", "--root", project, "--json").stdout)
    shown = run_cli("sessions", "show", "good", "--root", project)

    assert "2 model turns" in ok.stderr and failed.returncode == 31
    rows = {row["name"]: (row["turns"], row["status"]) for row in listing}
    assert rows == {"good": (2, "ok"), "bad": (1, "max_turns")}  # turns as `ask` counts them
    assert "header_update" not in shown.stdout
    assert "run ended: ok after 2 turn(s)" in shown.stdout


def _at_a_terminal(args: list[str], typed: bytes) -> tuple[int, str]:
    """Run the CLI with a pty as stdin and stderr (a person at a terminal); type `typed`."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen([str(SANDBOX_AGENT), *args], stdin=follower, stdout=follower,
                               stderr=follower, env=cli_env(), close_fds=True)
    os.close(follower)
    os.write(leader, typed)
    output = b""
    try:
        while chunk := os.read(leader, 4096):
            output += chunk
    except OSError:  # EIO: the child closed the pty
        pass
    os.close(leader)
    return process.wait(timeout=30), output.decode(errors="replace")


def test_sessions_rm_asks_at_a_terminal(project: Path, model_server: ModelServer):
    model_server.reply("Hi.")
    assert ask(project, model_server, "ollama", "--session", "keepme").returncode == 0

    code, screen = _at_a_terminal(["sessions", "rm", "keepme", "--root", str(project)], b"n\n")
    assert code == 0 and "delete session keepme (2 messages)? [y/N]" in screen
    assert [s.name for s in list_sessions(project)] == ["keepme"]

    code, screen = _at_a_terminal(["sessions", "rm", "keepme", "--root", str(project)], b"y\n")
    assert code == 0 and "removed session keepme" in screen
    assert list_sessions(project) == []


def test_a_table_piped_without_columns_is_not_squeezed_to_80(project: Path,
                                                             model_server: ModelServer):
    answer = "A long last message: " + "word " * 30
    model_server.reply(answer.strip())
    assert ask(project, model_server, "ollama").returncode == 0

    done = run_cli("sessions", "--root", project, env={"COLUMNS": ""})

    assert done.returncode == 0, explain(done)
    [row] = done.stdout.splitlines()[1:]
    assert len(row.rstrip()) > 120 and "word word word word word word word word" in row
