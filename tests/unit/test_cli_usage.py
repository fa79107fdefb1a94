"""Mistakes a new user makes, through the real console script (no engine, no model needed):
each is one `error:` line, a fix that points the right way, and the documented exit code."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from executor import DISTRIBUTION, LOCAL_EXTRA_FIX
from executor.cli.fixes import _clone_extra_fix, source_clone

SANDBOX_AGENT = Path(sys.executable).parent / "sandbox-agent"
REPO = Path(__file__).resolve().parents[2]


HOME: list[Path] = []


@pytest.fixture(autouse=True)
def _home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Each test's runs get a home of their own (config, state and caches land there),
    outside the tmp_path the tests pass as --root."""
    HOME.append(tmp_path_factory.mktemp("home"))
    yield
    HOME.pop()


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    """`sandbox-agent ARGS`, stdin /dev/null, no model server anywhere near."""
    base = {"PATH": "/usr/bin:/bin", "HOME": str(HOME[-1]), "NO_COLOR": "1",
            "COLUMNS": "200", "OLLAMA_HOST": "http://127.0.0.1:9"}
    return subprocess.run([str(SANDBOX_AGENT), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**base, **(env or {})}, cwd=cwd,
                          timeout=60, check=False)


def error_and_fix(done: subprocess.CompletedProcess[str], code: int) -> tuple[str, str]:
    """The `error:` line and the `fix:` line after it, once the exit code is checked."""
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: "), done.stderr
    assert lines[1].startswith("fix: "), done.stderr
    return lines[0], lines[1]


@pytest.mark.parametrize("command", ["ask", "orchestrate"])
def test_no_query_names_the_command_that_was_run(command: str, tmp_path: Path) -> None:
    _, fix = error_and_fix(run(command, "--root", str(tmp_path)), 2)
    assert fix == f'fix: say what to do: sandbox-agent {command} "..."'


@pytest.mark.parametrize(("typed", "offered"), [("--bogus", None), ("--mdoel", "--model")])
def test_an_unknown_option_is_offered_only_a_close_name(typed: str, offered: str | None,
                                                        tmp_path: Path) -> None:
    error, fix = error_and_fix(run("ask", typed, "hi", "--root", str(tmp_path)), 2)
    expected = f"error: no such option: {typed}"
    assert error == (expected if offered is None else f"{expected} (did you mean {offered}?)")
    assert fix == "fix: see `sandbox-agent ask --help`"


@pytest.mark.parametrize("command", [["ask", "hi"], ["review"], ["apply"], ["undo"],
                                     ["policy", "show"], ["policy", "trust"]])
def test_a_root_that_is_not_there_is_a_usage_error_with_a_fix(command: list[str],
                                                              tmp_path: Path) -> None:
    error, fix = error_and_fix(run(*command, "--root", str(tmp_path / "nosuch")), 2)
    assert error == f"error: project root {tmp_path / 'nosuch'} is not a directory"
    assert "--root" in fix


@pytest.mark.parametrize(("typed", "offered"), [
    ("--no-such-flag", []), ("--sesion", ["--session"]), ("--read-olny", ["--read-only"]),
    ("--jsn", ["--json"]), ("--verbose", []), ("--hots", ["--host"]),
])
def test_only_names_close_to_the_typed_one_are_offered(typed: str, offered: list[str]) -> None:
    from typer._click.exceptions import NoSuchOption

    from executor.cli import _message

    # click's own candidates: every option 60% alike with its dashes
    candidates = ["--host", "--session", "--read-only", "--json", "--json-stream", "--version"]
    said = _message(NoSuchOption(typed, possibilities=candidates))
    assert said == f"No such option: {typed}" + (
        f" (did you mean {' or '.join(offered)}?)" if offered else "")


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_host_that_is_no_url_is_a_usage_error_at_once(provider: str, tmp_path: Path) -> None:
    done = run("ask", "--provider", provider, "--host", "not-a-url", "--root", str(tmp_path),
               "hi")
    error, fix = error_and_fix(done, 2)  # no session line, no "retrying": nothing was tried
    assert error == "error: --host 'not-a-url' is not a URL"
    assert "--host http://HOST:" in fix


def test_a_tcp_docker_host_that_refuses_is_named_not_install_docker(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on: bound, never listening
        closed.bind(("127.0.0.1", 0))
        host = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
        error, fix = error_and_fix(run("gc", env={"DOCKER_HOST": host}, cwd=tmp_path), 11)
    assert "cannot reach the Docker engine" in error
    assert fix.startswith(f"fix: DOCKER_HOST is {host}, and that host refused the connection")
    assert "install Docker" not in fix


def test_the_embedded_extra_from_a_clone_is_make_install_local(tmp_path: Path) -> None:
    clone = source_clone(REPO)
    assert clone == REPO  # the tests run from a clone: its Makefile, its pyproject
    assert _clone_extra_fix(LOCAL_EXTRA_FIX, clone, clone / ".venv") == (
        f"in this clone of sandbox-agent: `make install-local` (in {clone})")
    other_venv = _clone_extra_fix(LOCAL_EXTRA_FIX, clone, tmp_path / "venv")
    assert other_venv == f"`pip install -e '{clone}[local]'` (this sandbox-agent runs from the " \
                         f"clone {clone})"
    # Installed from the index (no clone above the package): the error's own fix stands.
    assert source_clone(tmp_path) is None
    assert _clone_extra_fix(LOCAL_EXTRA_FIX, None, tmp_path) is None
    assert f"pip install '{DISTRIBUTION}[local]'" == LOCAL_EXTRA_FIX  # the index's name, ours


@pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is not None,
                    reason="the embedded extra is installed in this venv")
def test_the_embedded_models_fix_installs_this_distribution(tmp_path: Path) -> None:
    _, fix = error_and_fix(run("ask", "--provider", "embedded", "--root", str(tmp_path), "hi"),
                           24)
    assert "embedded model" in _
    if Path(sys.prefix).resolve() == (REPO / ".venv").resolve():  # `make install`'s venv
        assert fix == f"fix: in this clone of sandbox-agent: `make install-local` (in {REPO})"
    else:  # another venv, the package installed from this clone in editable mode
        assert fix == f"fix: `pip install -e '{REPO}[local]'` (this sandbox-agent runs from " \
                      f"the clone {REPO})"
    assert DISTRIBUTION != "sandbox-agent"  # on the public index, that is another project


_LOGS = """
import sys
from executor.cli import _route_logs_once_imported
_route_logs_once_imported()
assert "logging" not in sys.modules  # installed on first import, not paid for up front
import logging, warnings
logging.getLogger("urllib3.connectionpool").warning("pool full: %s\\nsecond", "\\x1b[2Kgone")
warnings.warn("deprecated \\x1b]0;title\\x07 thing")
logging.getLogger("executor.x").info("not shown: below WARNING")
try:
    raise ValueError("bad\\nworse")
except ValueError:
    logging.getLogger("docker").exception("it failed")
from executor.sandbox.probes import noted
with noted() as notes:
    logging.getLogger("executor.sandbox").warning("kept for the log file")
print(notes.lines[0].endswith("kept for the log file"))
"""


def test_library_log_records_are_one_inert_line_each() -> None:
    done = subprocess.run([sys.executable, "-c", _LOGS], capture_output=True, text=True,
                          env={"NO_COLOR": "1", "COLUMNS": "200"}, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\n"  # doctor --security's notes: kept, not on the terminal
    assert done.stderr.splitlines() == [
        r"warning: pool full: \x1b[2Kgone",
        r"warning: UserWarning: deprecated \x1b]0;title\x07 thing",
        "error: it failed (ValueError: bad)",
    ]


@pytest.mark.parametrize("command", ["diff", "undo"])
def test_a_session_that_is_not_there_is_exit_4_with_the_known_ones(command: str,
                                                                   tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    error, fix = error_and_fix(run(command, "--root", str(project), "--session", "nosuch"), 4)
    assert error == f"error: no session named 'nosuch' in {project}"
    assert fix == f"fix: no sessions yet (`sandbox-agent sessions --root {project}`)"


def test_an_env_variable_that_is_not_set_is_said_before_the_run(tmp_path: Path) -> None:
    done = run("ask", "--root", str(tmp_path), "--env", "SET_HERE", "--env", "NOT_SET_X",
               "--max-retries", "0", "hi", env={"SET_HERE": "1"})
    assert done.returncode == 21, done.stderr  # the model server is not there: after the line
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --env NOT_SET_X is not set in this environment: the sandbox "
                        "does not get it"]


def test_an_engine_address_that_is_no_url_says_so(tmp_path: Path) -> None:
    _, fix = error_and_fix(run("gc", env={"DOCKER_HOST": "garbage"}, cwd=tmp_path), 10)
    assert fix == ("fix: DOCKER_HOST is 'garbage', which is not an engine URL: set it to "
                   "unix:///PATH, tcp://HOST:PORT or ssh://USER@HOST, or unset it for this "
                   "machine's engine")
    error, fix = error_and_fix(run("image", "copy", "--to", "not-a-url"), 2)  # before any engine
    assert error == "error: --to 'not-a-url' is not an engine URL"
