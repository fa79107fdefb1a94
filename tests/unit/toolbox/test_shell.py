"""The toolbox: run_shell_command: exit codes, timeouts, caps, runaways."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import toolbox_view as toolbox
from tests.unit.toolbox.boxes import Box, failed, gone


def test_shell_exit_codes_and_sections(box: Box, root: Path):
    good = box.call("run_shell_command", command="echo out; echo err >&2")
    assert good["ok"] and good["output"] == "exit_code: 0\nstdout:\nout\nstderr:\nerr"
    assert good["meta"]["exit_code"] == 0 and good["meta"]["stdout_bytes"] == 4
    bad = box.call("run_shell_command", command="exit 3")
    assert bad["ok"] is False and bad["output"] == "exit_code: 3\n(no output)"
    assert bad["meta"]["exit_code"] == 3 and bad["meta"]["timed_out"] is False
    where = box.call("run_shell_command", command="pwd; cat; echo done")
    assert where["output"] == f"exit_code: 0\nstdout:\n{root.resolve()}\ndone"


def test_shell_killed_by_a_signal(box: Box):
    reply = box.call("run_shell_command", command="kill -KILL $$")
    failed(reply, "exit_code: 137", "killed by SIGKILL")
    assert reply["meta"]["signal"] == "SIGKILL" and reply["meta"]["exit_code"] == 137


def test_shell_timeout_kills_everything(box: Box):
    reply = box.call("run_shell_command", command="sleep 10000 & echo $!; wait",
                     timeout_seconds=1)
    failed(reply, "timed out after 1s")
    assert reply["meta"]["timed_out"] is True and reply["meta"]["exit_code"] is None
    assert reply["meta"]["signal"] == "SIGKILL"
    assert gone(int(reply["output"].split("stdout:\n")[1].split()[0]))
    box.alive()


def test_background_job_holding_the_output_runs_into_the_timeout(box: Box):
    reply = box.call("run_shell_command", command="sleep 10000 & echo started",
                     timeout_seconds=1)
    failed(reply, "timed out after 1s", "shell itself exited with code 0", "started")
    box.alive()


@pytest.mark.parametrize("start", ["sleep 10000", "setsid sleep 10000", "nohup sleep 10000",
                                   "env -i sleep 10000"])
def test_background_jobs_do_not_survive_a_call(box: Box, start: str):
    reply = box.call("run_shell_command", command=f"{start} >/dev/null 2>&1 & echo $!")
    assert reply["ok"] and "1 background process still running were killed" in reply["output"]
    assert reply["meta"]["killed_processes"] == 1
    assert gone(int(reply["output"].split("stdout:\n")[1]))
    box.alive()


def test_endless_output_is_capped_and_killed(box: Box):
    reply = box.call("run_shell_command", command="yes")
    failed(reply, "output limit exceeded", "killed", "bytes omitted")
    assert reply["meta"]["output_limit_exceeded"] and reply["meta"]["truncated"]
    assert 20 * 1024 * 1024 < reply["meta"]["stdout_bytes"] < 21 * 1024 * 1024
    assert len(reply["output"]) < 31_000
    assert box.call("run_shell_command", command="echo again")["output"].endswith("again")


def test_output_keeps_head_and_tail(make_box: Callable[..., Box]):
    box = make_box("--max-output", "3000")
    reply = box.call("run_shell_command", command="seq 1 100000")
    out = reply["output"]
    assert reply["ok"] and out.startswith("exit_code: 0\nstdout:\n1\n2\n3\n")
    assert out.endswith("\n99999\n100000") and "bytes omitted ...]" in out
    assert reply["meta"]["truncated"] and reply["meta"]["stdout_bytes"] == 588_895
    assert len(out) < 3200


@pytest.mark.parametrize(("text", "key", "value"), [
    (b"max 7\n", b"max", 7), (b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", b"oom_kill", 3),
    (b"low 0\nhigh 0\nmax 2\noom 4\noom_kill 4\n", b"oom_kill", 4), (b"", b"max", 0),
])
def test_cgroup_counters_are_parsed(tmp_path: Path, text: bytes, key: bytes, value: int):
    (tmp_path / "events").write_bytes(text)
    assert toolbox._counter(str(tmp_path / "events"), key) == value
    assert toolbox._counter(None, key) == 0


class _Exited:
    returncode = 0


@pytest.mark.parametrize(("hits", "expected"), [
    ((12, 0), "process limit hit: the sandbox refused 12 forks"),
    ((0, 1), "out of memory: the sandbox's memory limit made the kernel kill 1 process"),
])
def test_runaways_are_failures_even_when_the_shell_exits_zero(hits: tuple[int, int], expected: str):
    out, err = toolbox._Capture(100), toolbox._Capture(100)
    err.add(b"sh: Cannot fork\n")
    result = toolbox._shell_result(_Exited(), None, 5, 0, 0, hits, out, err)
    assert result["ok"] is False and result["meta"]["exit_code"] == 0
    assert result["output"].startswith(f"exit_code: 0\n{expected}")
    assert result["output"].endswith("stderr:\nsh: Cannot fork")


@pytest.mark.skip(reason="fork and memory bombs run inside real containers (tests/docker)")
@pytest.mark.parametrize("command", [":(){ :|:& };:", "python3 -c \"a = ' ' * 10**10\""])
def test_bombs(box: Box, command: str):
    failed(box.call("run_shell_command", command=command, timeout_seconds=5))
    box.alive()

