"""The probes' attacks: each runs in the lab's sandboxes and returns the evidence that its
guarantee held, or raises `Breach` with the evidence that it did not (`Caveat`: it held, at a
cost the person should know of)."""

from __future__ import annotations

import re
import time

from executor import toolmeta
from executor.errors import ConfigError
from executor.messages import ToolResult
from executor.network.egress import AllowedHost, EgressConfig
from executor.sandbox.probes.lab import (
    DISK_BUDGET,
    Breach,
    Caveat,
    Lab,
    inert,
    listener,
    unix_server,
)
from executor.state import LEGACY_DIR


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
    toolbox = box.runtime.toolbox  # what the commands run under: its pid, the next request id
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
    with listener() as (port, hits):
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
    with listener() as (port, hits), listener() as (other, other_hits):
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
    with unix_server(lab.root / "s.sock") as hits:
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
    config = lab.box().deployment.config
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

