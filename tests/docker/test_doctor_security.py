"""`sandbox-agent doctor --security`: the probes pass on every engine, and each one fails when
the guarantee it checks is taken away from a real container on purpose."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from executor.gitsafety.guard import GitGuard
from executor.messages import ToolResult
from executor.network.egress import AllowedHost
from executor.sandbox.blueprint import Blueprint
from executor.sandbox.deployment import Deployment
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.probes import PROBES, run_probes
from executor.sandbox.runtime import Runtime
from executor.state import LEGACY_DIR, project_dir
from tests.conftest import IMAGE, Engine
from tests.docker.cli_support import explain, run_cli

pytestmark = pytest.mark.docker

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
HOSTILE = "\x1b[2J\x1b]0;owned\x07\r\x9b31m"
"""What a hostile container could print: clear screen, set the title, CR, a C1 CSI."""


def leaked_probe_containers(docker_client: Any) -> list[str]:
    """Containers of probe projects that are gone: what a probe run left behind."""
    prefix = os.path.join(tempfile.gettempdir(), "sandbox-agent-probe-")
    listed = docker_client.containers.list(all=True, filters={"label": "sandbox-agent.root"},
                                           sparse=True)  # others' may go meanwhile
    roots = [(c.attrs.get("Labels") or {}).get("sandbox-agent.root", "") for c in listed]
    return [root for root in roots if root.startswith(prefix) and not os.path.exists(root)]


# Under gVisor both runaways take the whole sandbox down (the host's memory limit kills its
# Sentry; measured: dmesg's memcg OOM kill, `docker inspect` OOMKilled), so `limits` says so.
WARNED = {"runsc": {"limits"}}
INTERNAL = ("dropped a toolbox line", "urpc", "note:", "restarting the toolbox", "OCI runtime")
"""What the sandboxes say meanwhile: into the notes log, never among the verdicts."""


@pytest.mark.engines
def test_every_probe_passes_through_the_cli(engine: Engine, docker_client: Any,
                                            tmp_path: Path):
    state = tmp_path / "state"
    done = run_cli("doctor", "--security", timeout=400,
                   env={"SANDBOX_AGENT_STATE_DIR": str(state)})

    assert done.returncode == 0, explain(done)
    verdicts = re.findall(r"^  (PASS|FAIL|WARN)  (\S+(?: socket| budget| dir)?)", done.stdout,
                          re.M)
    warned = WARNED.get(engine.name, set())
    assert verdicts == [("WARN" if probe.name in warned else "PASS", probe.name)
                        for probe in PROBES], explain(done)
    summary = f"{len(PROBES)} probes, {len(PROBES)} passed"
    assert summary + (f" ({len(warned)} with a warning: limits)" if warned else "\n") in (
        done.stdout), explain(done)
    if warned:  # it says what happened, twice: the sandbox went down, a new one started
        down = (r"the host's kernel killed the whole sandbox for memory; sandbox-agent started "
                r"(a new one|it again)")
        assert re.search(rf"306 processes: {down}; 1024 MiB: (the same|{down}); usable "
                         r"afterwards \(files in /tmp were lost\)\n", done.stdout), explain(done)
    assert not [line for line in INTERNAL if line in done.stdout + done.stderr], explain(done)
    log = state / "doctor-security.log"
    if engine.name == "runsc":  # what was kept off the terminal is in the log, inert
        notes = log.read_text()
        assert "dropped a toolbox line without its signature" in notes, notes
        assert "restarting the toolbox" in notes and not CONTROL.search(notes), notes
        assert f"the sandboxes' notes (restarts, dropped lines): {log}" in done.stderr
    assert not CONTROL.search(done.stdout + done.stderr), explain(done)
    assert "Traceback" not in done.stderr
    assert leaked_probe_containers(docker_client) == []


# -- each probe fails when its guarantee is removed -------------------------------------------

Options = dict[str, Any]


def _mounts(options: Options, *, read_only: bool | None = None, git: bool = True,
            extra: list[str] = ()) -> Options:
    """The options with the bind mounts rebuilt: made writable, without those over paths in
    the project (`git=False`: its protected paths; the channel directory stays), plus `extra`."""
    mounts = [m for m in options["mounts"] if git or not m["Target"].startswith("/workspace/")]
    rebuilt = [Mount(m["Target"], m["Source"], type="bind",
                     read_only=m["ReadOnly"] if read_only is None else read_only) for m in mounts]
    return {**options, "mounts": rebuilt + [Mount(p, p, type="bind") for p in extra]}


def _no_seccomp(options: Options) -> Options:
    return {**options, "security_opt": ["no-new-privileges", "seccomp=unconfined"]}


def _without(argv: list[str], *flags: str) -> list[str]:
    """`argv` without each flag and its value (flags in `bare` take none)."""
    bare = {"--git-guard"}
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in flags:
            skip = arg not in bare
        else:
            out.append(arg)
    return out


def _no_legacy_tmpfs(options: Options) -> Options:
    return {**options, "tmpfs": {k: v for k, v in options["tmpfs"].items()
                                 if not k.endswith(LEGACY_DIR)}}


# The lab's paths follow from the project root: the secret is next to it, and the state dir is
# the per-user one of that root.
Change = Callable[[Options, Path], Options]
WEAKENED: dict[str, tuple[Change, Callable[[list[str]], list[str]]]] = {
    "paths": (lambda o, root: _mounts(o, extra=[str(root.parent)]), list),
    "read-only": (lambda o, root: _mounts(o, read_only=False), list),
    "network": (lambda o, root: {**o, "network_mode": "host", "network_disabled": False}, list),
    "capabilities": (lambda o, root: {**o, "cap_drop": [], "cap_add": ["CHOWN"]}, list),
    "set-id": (lambda o, root: _no_seccomp(o), lambda a: _without(a, "--seccomp-filter")),
    "unix socket": (lambda o, root: _no_seccomp(o), lambda a: _without(a, "--seccomp-filter")),
    "namespaces": (lambda o, root: _no_seccomp(o), lambda a: _without(a, "--seccomp-filter")),
    "disk budget": (lambda o, root: {**o, "ulimits": [u for u in o["ulimits"]
                                                      if u["Name"] != "fsize"]},
                    lambda a: [*_without(a, "--disk-budget"), "--disk-budget", "0"]),
    "state dir": (lambda o, root: _no_legacy_tmpfs(_mounts(o, extra=[str(project_dir(root))])),
                  list),
    ".git": (lambda o, root: _mounts(o, git=False),
             lambda a: _without(a, "--readonly-dir", "--git-guard")),
    "limits": (lambda o, root: {**o, "pids_limit": 4096, "mem_limit": "4g",
                                "memswap_limit": "4g"}, list),
    # Unsigned replies: on runc the toolbox's non-dumpable flag still keeps commands out, so
    # this one is shown under gVisor (test_the_toolbox_probe_fails_unsigned_under_gvisor).
    "toolbox": (lambda o, root: o, lambda a: [x for x in a if x != "--sign"]),
    # The proxy's rules, not the container: a range opens the private address (Weakened).
    "egress": (lambda o, root: o, list),
}
"""Per probe: how the container's options and the toolbox's argv are weakened."""


class WeakenedBlueprint(Blueprint):
    """The container's options and the toolbox's argv, as `WEAKENED` changes them."""

    def __init__(self, deployment: Deployment, runtime: Runtime, git: GitGuard,
                 name: str) -> None:
        super().__init__(deployment, runtime, git)
        self.change, self.argv_change = WEAKENED[name]

    def options(self, config: SandboxConfig | None = None) -> Options:
        return self.change(super().options(config), self.config.root)

    def toolbox_argv(self) -> list[str]:
        return self.argv_change(super().toolbox_argv())


class Weakened(DockerSandbox):
    """A sandbox with one guarantee removed on purpose, whose output is hostile too."""

    def __init__(self, config: SandboxConfig, client: Any, name: str) -> None:
        self.weakened = name
        super().__init__(_private_opened(config) if name == "egress" else config, client=client)

    def _blueprint(self, deployment: Deployment, runtime: Runtime) -> Blueprint:
        return WeakenedBlueprint(deployment, runtime, self.git, self.weakened)

    def call(self, tool: str, args: dict[str, Any], **kwargs: Any) -> ToolResult:
        result = super().call(tool, args, **kwargs)
        return result.model_copy(update={"output": HOSTILE + result.output})


def _private_opened(config: SandboxConfig) -> SandboxConfig:
    """The egress probe's allow-list plus the loopback range on its private name's port."""
    if config.egress is None:
        return config
    ports = [h.text.rpartition(":")[2] for h in config.egress.allow
             if h.text.startswith("private.probe:")]
    opened = [AllowedHost(text=f"127.0.0.0/8:{port}", source="weakened") for port in ports]
    egress = config.egress.model_copy(update={"allow": [*config.egress.allow, *opened]})
    return config.model_copy(update={"egress": egress})


def test_the_weakenings_cover_every_probe():
    assert set(WEAKENED) == {probe.name for probe in PROBES}


@pytest.mark.parametrize("name", [name for name in WEAKENED if name != "toolbox"])
def test_a_probe_fails_when_its_guarantee_is_removed(name: str, docker_client: Any):
    check_weakened(name, docker_client, runtime=None)


@pytest.mark.engines("runsc")
def test_the_toolbox_probe_fails_unsigned_under_gvisor(docker_client: Any):
    check_weakened("toolbox", docker_client, runtime="runsc")


def check_weakened(name: str, docker_client: Any, runtime: str | None) -> None:
    """The probe fails against the weakened sandbox, passes against the real one."""
    template = SandboxConfig(root=Path("/"), session_id="probe", image=IMAGE, tool_timeout=10,
                             runtime=runtime)
    [result] = run_probes(template, lambda c: Weakened(c, docker_client, name), only=[name])

    assert result.name == name and not result.passed, result
    assert not CONTROL.search(result.detail), result.detail  # evidence is shown inert
    [strong] = run_probes(template, lambda c: DockerSandbox(c, client=docker_client),
                          only=[name])
    assert strong.passed, strong
    assert leaked_probe_containers(docker_client) == []
