"""Security probes: the attacks the tests use, run against the engine and runtime configured here.

`sandbox-agent doctor --security` runs them in a throwaway project with real containers, so that
a security team can check docs/SECURITY.md's guarantees on *their* engine, runtime and kernel:

    paths          `..`, absolute paths and symlinks never reach a file next to the root
    read-only      with --read-only a write fails in the kernel and no byte changes
    network        a listener on the host's loopback is never reached; no interface but lo
    egress         with hosts allowed: only those are reached, through the proxy; a denied
                   host and a private address behind an allowed name are refused; no raw TCP
                   and no DNS of the sandbox's own
    capabilities   no capability in any set; no-new-privileges; chown refused
    set-id         chmod/open/mknod with a set-id bit are refused (checked inside and on the host)
    unix socket    a server on a unix socket in the project gets no connection
    namespaces     `unshare -U -r` and unshare(CLONE_NEWUSER) are refused (fork still works)
    state dir      the real state dir and an in-tree legacy one are out of reach
    .git           every .git (nested too) is read-only
    disk budget    a command writing past the disk budget is stopped; the file stays under it
    toolbox        a reply a command writes into the toolbox's stdout is never its answer
    limits         the process and memory limits hold and the sandbox stays usable

Each probe passes only on evidence: what the host sees (files, modes, connections) and what
the command inside reports. A probe that cannot run fails, and so does one whose refusal would
prove nothing: the write probes first check that the sandbox can write the project at all.
A probe whose guarantee held at a cost the person should know of (under gVisor a runaway takes
the whole sandbox down, which is then started again) passes with a warning that says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from executor import toolmeta
from executor.errors import ConfigError, SandboxAgentError
from executor.messages import ToolResult
from executor.network.egress import AllowedHost, EgressConfig
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.state import LEGACY_DIR, ensure_project_dir, private_dir, replacing
from executor.text import inert_line

Factory = Callable[[SandboxConfig], DockerSandbox]
"""Builds the sandbox a probe attacks (tests hand in deliberately weakened ones)."""

DISK_BUDGET = 8 << 20
"""The probes' own disk budget: small, so that going past it is quick."""


class Breach(Exception):
    """A probe saw its guarantee broken; the message is the evidence."""


class Caveat(Exception):
    """A probe saw its guarantee hold, but at a cost; the message is the evidence, cost
    included."""


class ProbeResult(BaseModel):
    """One probe's verdict."""

    name: str
    """Short name (`network`)."""
    guarantee: str
    """What must hold."""
    passed: bool
    """Whether it held."""
    warning: bool = False
    """It held, at a cost `detail` names (the sandbox went down and was started again)."""
    detail: str
    """The evidence, inert (no control characters)."""


@dataclass(frozen=True)
class Probe:
    """One attack and the check of what it achieved."""

    name: str
    guarantee: str
    run: Callable[[Lab], str]
    """Returns the evidence it held; raises Breach with the evidence it did not."""


def inert(text: str, limit: int = 160) -> str:
    """`text` as one inert line (executor.text: control, bidi and invisible characters shown
    as escapes), its lines joined with " | ", cut at `limit`."""
    flat = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    shown = inert_line(flat)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


class Lab:
    """A throwaway project next to a secret, its state dir, and the sandboxes attacking it."""

    def __init__(self, template: SandboxConfig, factory: Factory) -> None:
        self.template, self.factory = template, factory
        self.mark = "probe-secret-" + secrets.token_hex(8)
        self.base = Path(tempfile.mkdtemp(prefix="sandbox-agent-probe-")).resolve()
        self.root = self.base / "proj"
        self.secret = self.base / "secret.txt"
        self.state: Path | None = None
        self._boxes: dict[tuple[bool, bool], DockerSandbox] = {}
        self._engine: Any = None

    def __enter__(self) -> Self:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _build(self) -> None:
        self.root.mkdir()
        self.secret.write_text(self.mark + "\n")
        (self.root / "hello.txt").write_text("hello\n")
        (self.root / "secret-link").symlink_to(self.secret)
        for repo in (self.root, self.root / "vendor" / "lib"):
            (repo / ".git" / "hooks").mkdir(parents=True)
            (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
            (repo / ".git" / "config").write_text("[core]\n\tbare = false\n")
        (self.root / LEGACY_DIR / "audit").mkdir(parents=True)
        (self.root / LEGACY_DIR / "audit" / "old.ndjson").write_text(self.mark + "\n")
        self.state = ensure_project_dir(self.root)
        (self.state / "probe.txt").write_text(self.mark + "\n")

    def close(self) -> None:
        """Remove the containers, the project and its state dir."""
        for box in self._boxes.values():
            with contextlib.suppress(SandboxAgentError):
                box.stop()
        self._boxes.clear()
        if self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def box(self, *, read_only: bool = False, egress: EgressConfig | None = None
            ) -> DockerSandbox:
        """The started sandbox on the project (one read-write, one read-only, one with
        `egress`: the first one asked for)."""
        key = (read_only, egress is not None)
        if key not in self._boxes:
            config = self.template.model_copy(update={
                "root": self.root, "read_only": read_only, "disk_budget": DISK_BUDGET,
                "session_id": "probe-" + secrets.token_hex(5), "egress": egress})
            box = self.factory(config)
            self._boxes[key] = box
            box.start()
        return self._boxes[key]

    def writable(self) -> None:
        """A control: the sandbox can write the project at all (else a refusal proves nothing)."""
        result = self.shell("echo control > control.txt && chmod 0644 control.txt && "
                            "cat control.txt && rm control.txt")
        if not result.ok:
            raise Breach(f"inconclusive: the sandbox cannot write the project at all: "
                         f"{inert(result.output, 90)}")

    def shell(self, command: str, *, read_only: bool = False, timeout: int = 30) -> ToolResult:
        """Run `command` in the sandbox."""
        return self.box(read_only=read_only).call(
            "run_shell_command", {"command": command, "timeout_seconds": timeout})

    def events(self, container_id: str, since: float) -> set[str]:
        """What the engine saw happen to a container since `since` (`die`, `oom`, `start`...;
        empty when it cannot say)."""
        from executor.sandbox.engine import connect

        try:
            self._engine = self._engine or connect(timeout=10)
            return {str(event.get("status") or event.get("Action")) for event in
                    self._engine.events(since=int(since), until=int(time.time()) + 1,
                                        filters={"container": container_id}, decode=True)}
        except Exception:  # evidence of how it went down, not of whether: best effort
            return set()

    def tree(self) -> str:
        """A digest of every path, mode and byte in the project (its state dir left out)."""
        digest = hashlib.sha256()
        for path in sorted(self.root.rglob("*")):
            info = path.lstat()
            digest.update(f"{path.relative_to(self.root)}|{info.st_mode}|".encode())
            if stat.S_ISREG(info.st_mode):
                digest.update(path.read_bytes())
        return digest.hexdigest()

    def setid_files(self) -> list[str]:
        """Files in the project with a set-uid or set-gid bit."""
        return [str(p.relative_to(self.root)) for p in self.root.rglob("*")
                if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]


# -- the probes -----------------------------------------------------------------------------------


def probe_paths(lab: Lab) -> str:
    for path in ("../secret.txt", str(lab.secret), "secret-link"):
        result = lab.box().call("read_file", {"path": path})
        if lab.mark in result.output:
            raise Breach(f"read_file {path!r} returned the secret next to the root")
    result = lab.shell(f"cat ../secret.txt {lab.secret} secret-link")
    if lab.mark in result.output:
        raise Breach("a shell command read the secret next to the root")
    return "read_file and cat of ../, an absolute path and a symlink: the secret never seen"


def probe_read_only(lab: Lab) -> str:
    before = lab.tree()
    result = lab.shell("echo x > hello.txt; touch new.txt; rm -f hello.txt; mkdir d; "
                       "python3 -c \"open('py.txt', 'w')\"; echo done", read_only=True)
    if lab.tree() != before:
        raise Breach(f"the project changed under --read-only: {inert(result.output, 100)}")
    if "Read-only file system" not in result.output:
        raise Breach(f"writes failed, but not with EROFS: {inert(result.output, 100)}")
    return "5 kinds of write failed with EROFS; not a byte changed"


_FORGE = ("printf '{{\"id\": {id}, \"ok\": true, \"output\": \"{mark}\", \"meta\": {{}}}}\\n' "
          "> /proc/{pid}/fd/{fd} 2>/dev/null; echo tried")


def probe_toolbox(lab: Lab) -> str:
    box = lab.box()
    toolbox = box._toolbox  # the process the commands run under: its pid, the next request id
    assert toolbox is not None and toolbox.pid
    forged = "forged-" + lab.mark
    for fd in (1, 3):
        result = lab.shell(_FORGE.format(id=toolbox._next_id + 1, mark=forged, pid=toolbox.pid,
                                         fd=fd))
        if forged in result.output:
            raise Breach(f"a command answered in the toolbox's place (through its fd {fd})")
    if not lab.box().call("read_file", {"path": "hello.txt"}).ok:
        raise Breach("the toolbox did not answer afterwards")
    return "replies written into the toolbox's stdout were not taken for its answers"


_CONNECT = (
    "python3 -c \"import socket\n"
    "for host in ['127.0.0.1', '172.17.0.1', '10.0.2.2', 'host.docker.internal']:\n"
    "    s = socket.socket(); s.settimeout(2)\n"
    "    try: s.connect((host, {port})); print('CONNECTED', host)\n"
    "    except Exception as e: print('blocked', host)\n"
    "print('interfaces', [n for _, n in socket.if_nameindex()])\""
)


def probe_network(lab: Lab) -> str:
    with _listener() as (port, hits):
        result = lab.shell(_CONNECT.format(port=port))
    if hits or "CONNECTED" in result.output:
        raise Breach(f"a connection reached the host ({len(hits)} seen there)")
    if "interfaces ['lo']" not in result.output:
        raise Breach(f"the sandbox has a network: {inert(result.output, 100)}")
    return "4 hosts blocked, the host's listener saw nothing; interfaces: lo"


_EGRESS = (
    "python3 -c \"\n"
    "import socket\n"
    "def tunnel(host, port):\n"
    "    s = socket.create_connection(('127.0.0.1', {proxy}), 5)\n"
    "    s.sendall(('CONNECT %s:%d HTTP/1.1' % (host, port)).encode() + bytes([13, 10, 13, 10]))\n"
    "    print(host, s.recv(300).decode('latin-1').splitlines()[0])\n"
    "tunnel('allowed.probe', {port}); tunnel('denied.probe', {port})\n"
    "tunnel('private.probe', {other})\n"
    "for what, go in (('raw', lambda: socket.create_connection(('127.0.0.1', {port}), 3)),\n"
    "                 ('dns', lambda: socket.getaddrinfo('allowed.probe', 80))):\n"
    "    try: go(); print(what, 'REACHED')\n"
    "    except OSError as e: print(what, 'failed', type(e).__name__)\n"
    "\""
)


def probe_egress(lab: Lab) -> str:
    with _listener() as (port, hits), _listener() as (other, other_hits):
        allowed = [f"allowed.probe:{port}", f"127.0.0.1/32:{port}", f"private.probe:{other}"]
        config = EgressConfig(
            allow=[AllowedHost(text=text, source="probe") for text in allowed],
            resolve={"allowed.probe": "127.0.0.1", "private.probe": "127.0.0.1"})
        try:
            box = lab.box(egress=config)
        except ConfigError as exc:  # gVisor: no hosts can be allowed at all
            return f"hosts cannot be allowed on this engine, so none is reached ({exc.message})"
        result = box.call("run_shell_command", {"command": _EGRESS.format(
            proxy=config.port, port=port, other=other), "timeout_seconds": 30})
    said = result.output
    if other_hits or "private.probe HTTP/1.1 403" not in said:
        raise Breach(f"a private address behind an allowed name was reached: {inert(said, 90)}")
    if "denied.probe HTTP/1.1 403 blocked" not in said:
        raise Breach(f"a host nobody allowed was not refused: {inert(said, 90)}")
    if "raw REACHED" in said or "dns REACHED" in said or len(hits) > 1:
        raise Breach(f"the sandbox reached out without the proxy: {inert(said, 90)}")
    if len(hits) != 1 or "allowed.probe HTTP/1.1 200" not in said:
        raise Breach(f"inconclusive: the allowed host was not reached: {inert(said, 90)}")
    return ("the allowed host reached once, through the proxy; a denied host and a loopback "
            "address behind an allowed name refused; raw TCP and DNS from inside failed")


def probe_capabilities(lab: Lab) -> str:
    result = lab.shell(
        "grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status; chown 1:1 hello.txt && echo CHOWNED; "
        "python3 -c 'import ctypes; print(\"nnp\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'")
    sets = re.findall(r"^(Cap\w+):\s*([0-9a-f]+)$", result.output, re.M)
    held = [f"{name} {value}" for name, value in sets if int(value, 16)]
    if held or len(sets) < 3:
        raise Breach(f"capabilities held: {', '.join(held) or inert(result.output, 80)}")
    if "CHOWNED" in result.output:
        raise Breach("chown to another owner succeeded")
    if "nnp 1" not in result.output:
        raise Breach("no-new-privileges is not set")
    return "CapPrm, CapEff, CapBnd all 0; no-new-privileges; chown refused"


_SETID = ("cp /bin/sh tool; for m in 4755 2755 u+s g+s; do chmod $m tool 2>/dev/null && "
          "echo CHANGED $m; done; python3 -c \"import os\n"
          "for mode in (0o4755, 0o2755):\n"
          "    try: os.close(os.open('made%o' % mode, os.O_CREAT | os.O_WRONLY, mode)); "
          "print('CREATED', oct(os.stat('made%o' % mode).st_mode))\n"
          "    except OSError as e: print('refused', e.errno)\"")


def probe_set_id(lab: Lab) -> str:
    lab.writable()
    result = lab.shell(_SETID)
    made = re.findall(r"CREATED 0o10(\d)", result.output)
    changed = re.findall(r"CHANGED (\S+)", result.output)
    if changed or [m for m in made if m != "0"] or toolmeta.setid_cleared(result.meta):
        raise Breach(f"set-id bits were set inside (chmod {' '.join(changed) or '-'}; "
                     f"open {len(made)}): {inert(result.output, 80)}")
    if lab.setid_files():
        raise Breach(f"set-id files on the host: {', '.join(lab.setid_files())}")
    return "chmod 4755/2755/u+s/g+s and open(O_CREAT, 04755/02755) refused; none on the host"


def probe_unix_socket(lab: Lab) -> str:
    with _unix_server(lab.root / "s.sock") as hits:
        result = lab.shell("python3 -c \"import socket\ns = socket.socket(socket.AF_UNIX)\n"
                           "s.settimeout(2); s.connect('s.sock'); print('CONNECTED')\"")
    if hits or "CONNECTED" in result.output:
        raise Breach(f"the host's unix socket got a connection ({len(hits)} seen there)")
    said = inert(result.output.splitlines()[-1], 60)
    return f"connect to a host server in the project failed: {said}"


# `unshare` (util-linux), then the syscall itself in case the image has no such binary; a fork
# first, so that a refusal is not just "no process can start".
_UNSHARE = ("unshare -U -r true && echo MADE by unshare; python3 -c \"import ctypes, os\n"
            "pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0); print('forked')\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "try:\n    if hasattr(os, 'unshare'): os.unshare(0x10000000)\n"
            "    elif libc.unshare(0x10000000): raise OSError(ctypes.get_errno(), 'unshare')\n"
            "    print('MADE by unshare()')\n"
            "except OSError as e: print('unshare() refused:', os.strerror(e.errno))\"")


def probe_namespaces(lab: Lab) -> str:
    result = lab.shell(_UNSHARE)
    if "MADE" in result.output:
        made = re.findall(r"MADE by (\S+)", result.output)
        raise Breach(f"a command made a user namespace (with {' and '.join(made)})")
    refused = re.search(r"unshare\(\) refused: (.*)", result.output)
    if "forked" not in result.output or not refused:
        raise Breach(f"inconclusive: the probe did not run: {inert(result.output, 90)}")
    binary = re.search(r"unshare: unshare failed: (.*)", result.output)
    said = binary.group(1) if binary else "no unshare binary"
    return (f"unshare -U -r: {inert(said, 40)}; unshare(CLONE_NEWUSER): "
            f"{inert(refused.group(1), 40)}; fork works")


def probe_disk_budget(lab: Lab) -> str:
    lab.writable()
    result = lab.shell(f"head -c {3 * DISK_BUDGET} /dev/zero > big.bin")
    size = (lab.root / "big.bin").stat().st_size if (lab.root / "big.bin").exists() else 0
    if size > DISK_BUDGET:
        raise Breach(f"a {size >> 20} MiB file grew past the {DISK_BUDGET >> 20} MiB budget")
    if result.ok:  # stopped by the fsize limit (EFBIG) or killed by the toolbox: not ok either way
        raise Breach("writing past the budget was not reported as a failure")
    lab.shell("rm -f big.bin")  # in the sandbox, so that its budget sees the room again
    mib = DISK_BUDGET >> 20
    return f"writing {3 * mib} MiB stopped at {size >> 20} MiB (budget {mib} MiB)"


def probe_state_dir(lab: Lab) -> str:
    assert lab.state is not None
    lab.writable()
    result = lab.shell(f"cat {lab.state}/probe.txt; ls -A {LEGACY_DIR}; cat {LEGACY_DIR}/audit/*; "
                       f"echo forged > {LEGACY_DIR}/forged; echo forged > {lab.state}/forged")
    if lab.mark in result.output:
        raise Breach("the container read the state dir or the in-tree legacy one")
    if (lab.root / LEGACY_DIR / "forged").exists() or (lab.state / "forged").exists():
        raise Breach("the container wrote into a state dir")
    return f"{lab.state} and ./{LEGACY_DIR} neither readable nor writable"


def probe_git(lab: Lab) -> str:
    lab.writable()
    before = lab.tree()
    result = lab.shell("echo x > .git/hooks/pre-commit; echo '[core]' >> .git/config; "
                       "echo x > vendor/lib/.git/hooks/post-checkout; rm -rf .git/hooks; echo done")
    if lab.tree() != before:
        raise Breach(f"a .git changed: {inert(result.output, 100)}")
    return "hooks and config of the top and a nested .git: every write refused"


# The children let go of the output pipes, so the call ends when the parent does (the toolbox
# then kills what is left).
_FORKS = ("python3 -c \"import os, time\nn = 0\ntry:\n    while n < {procs}:\n"
          "        if os.fork() == 0:\n"
          "            os.closerange(0, 3); time.sleep(30); os._exit(0)\n"
          "        n += 1\nexcept OSError as e: print('fork refused after', n)\n"
          "print('processes', n)\"")
_ALLOCATE = ("python3 -c \"x = []\nfor i in range({chunks}): x.append(b'1' * (64 << 20))\n"
             "print('ALLOCATED', len(x) * 64, 'MiB')\"")


def probe_limits(lab: Lab) -> str:
    config = lab.box().config
    procs, memory = config.pids_limit + 50, _bytes(config.memory)
    forks, forks_down = _runaway(lab, _FORKS.format(procs=procs))
    if f"processes {procs}" in forks.output:
        raise Breach(f"{procs} processes started under a limit of {config.pids_limit}")
    chunks = 2 * memory // (64 << 20) + 1
    allocated, allocated_down = _runaway(lab, _ALLOCATE.format(chunks=chunks))
    if "ALLOCATED" in allocated.output:
        raise Breach(f"{inert(allocated.output.split('ALLOCATED')[1], 20)} allocated under a "
                     f"limit of {config.memory}")
    if lab.shell("echo usable").output.split()[-1:] != ["usable"]:
        raise Breach("the sandbox was not usable afterwards")
    how_allocated = "the same" if allocated_down and allocated_down == forks_down else (
        allocated_down or _how(allocated))
    said = (f"{procs} processes: {forks_down or _how(forks)}; {2 * memory >> 20} MiB: "
            f"{how_allocated}; usable afterwards")
    if forks_down or allocated_down:
        raise Caveat(said + " (files in /tmp were lost)")
    return said


def _runaway(lab: Lab, command: str) -> tuple[ToolResult, str | None]:
    """Run a runaway `command`; its result, and how it took the sandbox down (None: it did
    not), from the engine's events for the container."""
    before, since = lab.box().info.container_id, time.time()
    result = lab.shell(command, timeout=10)
    if not toolmeta.toolbox_restarted(result.meta):
        return result, None
    seen = lab.events(before, since)
    if "oom" in seen:
        cause = "the host's kernel killed the whole sandbox for memory"
    elif "die" in seen:
        cause = "the whole sandbox stopped"
    else:
        return result, "the toolbox stopped answering and was restarted (no result)"
    again = "a new one" if lab.box().info.container_id != before else "it again"
    return result, f"{cause}; sandbox-agent started {again}"


def _how(result: ToolResult) -> str:
    """How a runaway ended, in a few words."""
    for pattern in (r"fork refused after \d+", r"out of memory", r"MemoryError",
                    r"killed by \w+", r"timed out"):
        found = re.search(pattern, result.output)
        if found:
            return found.group()
    return "refused"


def _bytes(size: str) -> int:
    from executor.config import parse_size

    return parse_size(size)


PROBES = (
    Probe("paths", "nothing outside the project root is reachable (.., absolute, symlinks)",
          probe_paths),
    Probe("read-only", "--read-only: writes fail in the kernel (EROFS), no byte changes",
          probe_read_only),
    Probe("network", "no network: the host's loopback is out of reach", probe_network),
    Probe("egress", "allowed hosts only, through the proxy; private addresses refused",
          probe_egress),
    Probe("capabilities", "no capabilities, no-new-privileges", probe_capabilities),
    Probe("set-id", "no set-id file can be made (so none reaches the host)", probe_set_id),
    Probe("unix socket", "unix sockets in the project are out of reach", probe_unix_socket),
    Probe("namespaces", "no command can make a namespace (no uid 0, no capabilities in one)",
          probe_namespaces),
    Probe("state dir", "sessions and audit are out of the container's reach", probe_state_dir),
    Probe(".git", "every .git under the root is read-only", probe_git),
    Probe("disk budget", "a command cannot grow the project past the disk budget",
          probe_disk_budget),
    Probe("toolbox", "a command cannot answer in the toolbox's place", probe_toolbox),
    Probe("limits", "process and memory limits hold; the sandbox stays usable", probe_limits),
)
"""Every probe, in the order they run."""


def run_probes(template: SandboxConfig, factory: Factory, *, only: list[str] | None = None,
               progress: Callable[[ProbeResult], None] | None = None) -> list[ProbeResult]:
    """Run the probes (or those named in `only`) in one throwaway lab; every one gets a verdict."""
    chosen = [p for p in PROBES if not only or p.name in only]
    results = []
    with Lab(template, factory) as lab:
        lab.box()  # a sandbox that does not start is an error of its own, not ten failed probes
        for probe in chosen:
            result = _verdict(probe, lab)
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def _verdict(probe: Probe, lab: Lab) -> ProbeResult:
    warning = False
    try:
        passed, detail = True, probe.run(lab)
    except Caveat as exc:
        passed, warning, detail = True, True, str(exc)
    except Breach as exc:
        passed, detail = False, str(exc)
    except (SandboxAgentError, OSError) as exc:
        passed, detail = False, f"could not run: {exc}"
    return ProbeResult(name=probe.name, guarantee=probe.guarantee, passed=passed,
                       warning=warning, detail=inert(detail, 320))


class Notes(logging.Handler):
    """What the sandboxes said while the probes ran (restarts, dropped toolbox lines): kept
    for a log file, off the terminal, where they would read as the probes' own verdicts."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        """A sandbox's warning (its `warn` callback)."""
        self.lines.append(f"{time.strftime('%H:%M:%S')} sandbox: {inert_line(message)}")

    def emit(self, record: logging.LogRecord) -> None:
        self.note(f"{record.name}: {record.getMessage()}")

    def save(self, path: Path) -> None:
        """Write the lines to `path` (replaced, never through a link; 0600)."""
        private_dir(path.parent, parents=True)
        with replacing(path) as out:
            out.write("".join(line + "\n" for line in self.lines))


@contextlib.contextmanager
def noted() -> Iterator[Notes]:
    """Notes of what the sandboxes and the library's loggers say meanwhile (not on stderr)."""
    notes, logger = Notes(), logging.getLogger("executor")
    logger.addHandler(notes)
    try:
        yield notes
    finally:
        logger.removeHandler(notes)


@contextlib.contextmanager
def _listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback, noting who connected."""
    server = socket.create_server(("127.0.0.1", 0))
    with _serving(server) as hits:
        yield server.getsockname()[1], hits


@contextlib.contextmanager
def _unix_server(path: Path) -> Iterator[list[str]]:
    """A unix stream server at `path` (world-writable: only the kernel's rules decide)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen()
    try:
        with _serving(server) as hits:
            yield hits
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _serving(server: socket.socket) -> Iterator[list[str]]:
    hits: list[str] = []
    stop = threading.Event()
    server.settimeout(0.1)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append("hit")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield hits
    finally:
        stop.set()
        thread.join()
        server.close()
