"""The seccomp profile: Docker's default, shipped unmodified, plus the rules seccomp.py adds.

What the kernel does with it is shown against a real container in
tests/docker/test_cli_kernel.py; here, that the generated JSON says what we mean.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import platform
import struct
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.sandbox import seccomp
from executor.sandbox.config import SandboxConfig
from executor.sandbox.hardening import container_options

PROFILES = resources.files("executor.sandbox").joinpath("profiles")
MODE_SYSCALLS = ["chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat", "mknod",
                 "mknodat"]
NAMESPACE_SYSCALLS = {"clone", "clone3", "unshare", "setns"}
RESTRICTED = {*MODE_SYSCALLS, "socket", "socketpair", "socketcall", "openat2", "io_uring_setup",
              "io_uring_enter", "io_uring_register", *NAMESPACE_SYSCALLS}
NAMESPACE_FLAGS = 0x7E02_0000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: Docker's clone mask."""


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    return json.loads(PROFILES.joinpath("docker-default.json").read_text())


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    return seccomp.profile()


def allowing(profile: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The rules that allow `name`."""
    return [rule for rule in profile["syscalls"]
            if rule["action"] == "SCMP_ACT_ALLOW" and name in rule.get("names", [])]


def masked(rule: dict[str, Any]) -> tuple[int, int, int]:
    """(index, mask, value) of a rule's one SCMP_CMP_MASKED_EQ condition."""
    [arg] = rule["args"]
    assert arg["op"] == "SCMP_CMP_MASKED_EQ"
    return arg["index"], arg["value"], arg["valueTwo"]


def test_the_shipped_default_is_the_file_its_notice_names():
    notice = PROFILES.joinpath("NOTICE").read_text()
    digest = hashlib.sha256(PROFILES.joinpath("docker-default.json").read_bytes()).hexdigest()
    assert f"sha256 {digest}" in notice
    assert "Apache License" in notice and "v20.10.24" in notice
    assert "Apache License" in PROFILES.joinpath("LICENSE-Apache-2.0").read_text()


@pytest.mark.parametrize("name", MODE_SYSCALLS)
def test_a_mode_is_allowed_only_without_set_id_bits(generated: dict[str, Any], name: str):
    [rule] = allowing(generated, name)
    index = {"chmod": 1, "fchmod": 1, "creat": 1, "mknod": 1, "openat": 3}.get(name, 2)
    assert masked(rule) == (index, 0o6000, 0)


def test_socket_only_for_inet_inet6_and_netlink(generated: dict[str, Any]):
    rules = allowing(generated, "socket")
    assert {masked(rule) for rule in rules} == {(0, 0xFFFF_FFFF, family) for family in (2, 10, 16)}


def test_socketpair_only_for_streams(generated: dict[str, Any]):
    rules = allowing(generated, "socketpair")
    assert {masked(rule) for rule in rules} == {(1, 0xF, 1), (1, 0xF, 5)}


@pytest.mark.parametrize("name", ["socketcall", "io_uring_setup", "io_uring_enter",
                                  "io_uring_register", "openat2", "unshare", "setns", "clone3"])
def test_refused_syscalls_are_allowed_by_no_rule(generated: dict[str, Any], name: str):
    assert allowing(generated, name) == []


def test_clone_only_without_namespace_flags_whatever_the_capabilities(
        default: dict[str, Any], generated: dict[str, Any]):
    native, s390 = allowing(generated, "clone")
    assert masked(native) == (0, NAMESPACE_FLAGS, 0) and masked(s390) == (1, NAMESPACE_FLAGS, 0)
    assert native["excludes"] == {"arches": ["s390", "s390x"]} and native["includes"] == {}
    assert s390["includes"] == {"arches": ["s390", "s390x"]} and s390["excludes"] == {}
    # Docker's default lets a container with CAP_SYS_ADMIN have all four; no rule of ours does.
    assert any("CAP_SYS_ADMIN" in rule["includes"].get("caps", []) and "unshare" in rule["names"]
               for rule in default["syscalls"])
    about = [rule for rule in generated["syscalls"] if NAMESPACE_SYSCALLS & set(rule["names"])]
    assert all(rule["comment"] == "sandbox-agent" and "caps" not in rule["includes"]
               and "caps" not in rule["excludes"] for rule in about)
    assert all(set(rule["names"]) <= NAMESPACE_SYSCALLS | {"openat2"} for rule in about)


@pytest.mark.parametrize("name", ["openat2", "clone3"])
def test_enosys_so_that_libc_falls_back(generated: dict[str, Any], name: str):
    rules = [rule for rule in generated["syscalls"] if name in rule["names"]]
    mips = ["mips3l64n32", "mips64", "mips64n32", "mipsel", "mipsel64"]
    assert sorted((r["action"], r["errnoRet"], r["includes"], r["excludes"]) for r in rules) == [
        ("SCMP_ACT_ERRNO", 38, {}, {"arches": mips}),
        ("SCMP_ACT_ERRNO", 89, {"arches": mips}, {}),
    ]


def test_everything_else_is_dockers_default(default: dict[str, Any], generated: dict[str, Any]):
    def unconditional(profile: dict[str, Any]) -> set[str]:
        return {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
                and not rule.get("args") and not rule["includes"] and not rule["excludes"]
                for name in rule["names"]}

    assert unconditional(generated) == unconditional(default) - RESTRICTED
    assert "read" in unconditional(generated) and "chmod" in unconditional(default)
    untouched = [rule for rule in default["syscalls"] if not RESTRICTED & set(rule["names"])]
    assert all(rule in generated["syscalls"] for rule in untouched)
    assert generated["defaultAction"] == "SCMP_ACT_ERRNO" and "defaultErrnoRet" not in generated


def test_only_native_architectures(default: dict[str, Any], generated: dict[str, Any]):
    assert [a["architecture"] for a in generated["archMap"]] == [
        a["architecture"] for a in default["archMap"]]
    assert all(a["subArchitectures"] == [] for a in generated["archMap"])
    assert any(a["subArchitectures"] for a in default["archMap"])


def test_any_other_rule_allowing_socket_goes_too(tmp_path: Path):
    # Newer Docker defaults allow socket() in a rule of its own (all families but AF_VSOCK).
    newer = {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["read", "socket"], "action": "SCMP_ACT_ALLOW", "args": []},
        {"names": ["socket"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_NE"}]},
        {"name": "chmod", "action": "SCMP_ACT_ALLOW", "args": []},
    ]}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    profile = seccomp.profile(tmp_path / "newer.json")
    assert {masked(rule)[2] for rule in allowing(profile, "socket")} == {2, 10, 16}
    assert [masked(rule) for rule in allowing(profile, "chmod")] == [(1, 0o6000, 0)]
    assert allowing(profile, "read") == [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                                          "args": []}]


def test_a_missing_profile_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SandboxError) as caught:
        seccomp.profile(tmp_path / "gone.json")
    assert "gone.json is missing" in str(caught.value)
    assert caught.value.fix == "reinstall sandbox-agent"


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "unreadable"),
    ('{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}', "not a Docker allow-list profile"),
    ('{"defaultAction": "SCMP_ACT_ERRNO"}', "not a Docker allow-list profile"),
    ("[1, 2]", "not a Docker allow-list profile"),
])
def test_a_profile_that_is_not_an_allow_list_is_refused(tmp_path: Path, text: str, says: str):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(SandboxError, match=says):
        seccomp.profile(tmp_path / "bad.json")


def test_the_container_gets_the_profile_with_the_other_options(tmp_path: Path):
    config = SandboxConfig(root=tmp_path, session_id="s1")
    options = container_options(config, tmp_path / "lock", "1000:1000")
    [no_new_privileges, profile] = options["security_opt"]
    assert no_new_privileges == "no-new-privileges"
    assert profile.startswith("seccomp=")
    assert json.loads(profile.removeprefix("seccomp=")) == seccomp.profile()


# -- the toolbox's own filter, run for real on this host ---------------------------------------

# Installs the toolbox's program on a child process, then tries each call and prints its errno.
_PROBE = r"""
import base64, ctypes, errno, json, os, socket, sys
sys.path.insert(0, sys.argv[2])
from executor.toolbox import confine as toolbox
print(toolbox.confine(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
def err(call):
    try:
        call()
        return 0
    except OSError as exc:
        return exc.errno
def raw(number, *args):
    if libc.syscall(number, *args) == -1:
        raise OSError(ctypes.get_errno(), "")
os.chdir(sys.argv[3])
open("f", "w").close()
print(json.dumps({
    "chmod 0755": err(lambda: os.chmod("f", 0o755)),
    "chmod 4755": err(lambda: os.chmod("f", 0o4755)),
    "chmod 2755": err(lambda: os.chmod("f", 0o2755)),
    "fchmod 4755": err(lambda: os.fchmod(os.open("f", os.O_RDONLY), 0o4755)),
    "open 0644": err(lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY, 0o644))),
    "open 4755": err(lambda: os.open("h", os.O_CREAT | os.O_WRONLY, 0o4755)),
    "mknod 4755": err(lambda: os.mknod("n", 0o4755 | 0o10000)),
    "socket inet": err(lambda: socket.socket(socket.AF_INET).close()),
    "socket unix": err(lambda: socket.socket(socket.AF_UNIX)),
    "socketpair stream": err(lambda: [s.close() for s in socket.socketpair()]),
    "socketpair dgram": err(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)),
    "openat2": err(lambda: raw(437, -100, b"f", None, 0)),
    "io_uring_setup": err(lambda: raw(425, 1, None)),
}))
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the toolbox filter is x86_64 only")
def test_the_toolbox_filter_refuses_what_the_profile_refuses(tmp_path: Path):
    program = seccomp.toolbox_filter("x86_64")
    assert program is not None
    toolbox_dir = str(Path(seccomp.__file__).parents[2])  # the repository: executor/ is there
    done = subprocess.run([sys.executable, "-c", _PROBE, base64.b64encode(program).decode(),
                           toolbox_dir, str(tmp_path)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    status, results = done.stdout.splitlines()
    assert status == "installed"
    assert json.loads(results) == {
        "chmod 0755": 0, "chmod 4755": errno.EPERM, "chmod 2755": errno.EPERM,
        "fchmod 4755": errno.EPERM, "open 0644": 0, "open 4755": errno.EPERM,
        "mknod 4755": errno.EPERM, "socket inet": 0, "socket unix": errno.EPERM,
        "socketpair stream": 0, "socketpair dgram": errno.EPERM, "openat2": errno.ENOSYS,
        "io_uring_setup": errno.EPERM,
    }
    assert not (tmp_path / "h").exists() and not (tmp_path / "f").stat().st_mode & 0o6000


# The ways to a new namespace, then what must keep working (threads, fork, vfork, posix_spawn:
# glibc tries clone3 first and falls back to clone). Run with and without the program.
_NAMESPACES = r"""
import ctypes, errno, json, os, struct, subprocess, sys, threading
sys.path.insert(0, sys.argv[2])
from executor.toolbox import confine as toolbox
print(toolbox.confine(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
NEWUSER, NEWNET, NEWNS, NEWPID, NEWTIME, SIGCHLD = 0x10000000, 0x40000000, 0x20000, 0x20000000, 0x80, 17
def err(result):
    return 0 if result >= 0 else ctypes.get_errno()
def cloned(flags):  # a raw clone returns twice, like fork: the child leaves at once
    pid = libc.syscall(56, ctypes.c_long(flags), 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return err(pid)
def clone3(flags):
    args = ctypes.create_string_buffer(struct.pack("=8Q", flags, 0, 0, 0, SIGCHLD, 0, 0, 0))
    pid = libc.syscall(435, args, ctypes.c_long(64))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return err(pid)
seen = []
thread = threading.Thread(target=lambda: seen.append("thread"))
thread.start()
thread.join()
pid = os.fork()
if pid == 0:
    os._exit(3)
seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
seen.append(subprocess.run(["/bin/sh", "-c", "sleep 0.01 & wait; echo sh"], capture_output=True,
                           text=True).stdout.strip())
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 5"], os.environ)
seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
seen.append(cloned(SIGCHLD))
results = {"works": seen,
           "clone NEWNET": cloned(NEWNET | SIGCHLD), "clone NEWNS": cloned(NEWNS | SIGCHLD),
           "clone NEWPID": cloned(NEWPID | SIGCHLD), "clone NEWUSER": cloned(NEWUSER | SIGCHLD),
           "clone3": clone3(0), "clone3 NEWUSER": clone3(NEWUSER)}
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
results["setns"] = err(libc.setns(fd, 0))
results["unshare NEWTIME"] = err(libc.unshare(NEWTIME))
results["unshare NEWUSER"] = err(libc.unshare(NEWUSER))  # last: it changes this process
print(json.dumps(results))
"""


def run_namespaces(program: bytes) -> tuple[str, dict[str, Any]]:
    toolbox_dir = str(Path(seccomp.__file__).parents[2])  # the repository: executor/ is there
    done = subprocess.run([sys.executable, "-c", _NAMESPACES, base64.b64encode(program).decode(),
                           toolbox_dir], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    status, results = done.stdout.splitlines()
    return status, json.loads(results)


WORKS = ["thread", 3, "sh", 5, 0]
"""A thread ran, fork's child exited 3, sh's background job was waited for, posix_spawn's
child exited 5, a raw clone without namespace flags made a child."""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the toolbox filter is x86_64 only")
def test_the_toolbox_filter_refuses_new_namespaces_but_not_processes():
    program = seccomp.toolbox_filter("x86_64")
    assert program is not None

    status, results = run_namespaces(program)

    assert status == "installed"
    assert results == {
        "works": WORKS, "clone NEWNET": errno.EPERM, "clone NEWNS": errno.EPERM,
        "clone NEWPID": errno.EPERM, "clone NEWUSER": errno.EPERM, "clone3": errno.ENOSYS,
        "clone3 NEWUSER": errno.ENOSYS, "setns": errno.EPERM, "unshare NEWTIME": errno.EPERM,
        "unshare NEWUSER": errno.EPERM,
    }


@pytest.mark.skipif(os.geteuid() != 0 or platform.machine() != "x86_64",
                    reason="the control needs root (new namespaces of every kind) on x86_64")
def test_without_the_filter_the_same_calls_make_namespaces():
    """The control: the refusals above are the filter's, not this host's."""
    status, results = run_namespaces(b"")

    assert status == "not given"
    assert results["works"] == WORKS
    assert {name: value for name, value in results.items() if name != "works"} == {
        "clone NEWNET": 0, "clone NEWNS": 0, "clone NEWPID": 0, "clone NEWUSER": 0, "clone3": 0,
        "clone3 NEWUSER": 0, "setns": 0, "unshare NEWTIME": 0, "unshare NEWUSER": 0}


def test_the_toolbox_filter_kills_other_abis():
    program = seccomp.toolbox_filter("x86_64")
    assert program is not None
    first = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, 48, 8)]
    assert first[:3] == [(0x20, 0, 0, 4), (0x15, 1, 0, 0xC000_003E), (0x06, 0, 0, 0x8000_0000)]
    assert first[4:] == [(0x35, 0, 1, 0x4000_0000), (0x06, 0, 0, 0x8000_0000)]  # x32
    assert len(program) % 8 == 0 and program[-8:] == struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF_0000)


def test_no_toolbox_filter_for_a_machine_it_is_not_built_for():
    assert seccomp.toolbox_filter("aarch64") is None


def test_a_toolbox_elsewhere_declines_the_program_and_says_why(monkeypatch: pytest.MonkeyPatch):
    from tests.unit import toolbox_view as toolbox

    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "h", "6", "#1", "riscv64")))
    assert toolbox.confine("AAAA") == "not installed: built for x86_64, this is riscv64"
    assert toolbox.confine(None) == "not given"


# -- how the profile reaches the engine ---------------------------------------------------------


def test_podman_gets_the_profile_as_a_file(tmp_path: Path):
    path = seccomp.profile_file(tmp_path / "d")
    assert json.loads(path.read_text()) == seccomp.profile()
    assert path.stat().st_mode & 0o777 == 0o644 and (tmp_path / "d").stat().st_mode & 0o777 == 0o700
    path.write_text("{}")  # changed behind our back: rewritten
    assert seccomp.profile_file(tmp_path / "d") == path
    assert json.loads(path.read_text()) == seccomp.profile()
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")  # never written through a link
    assert seccomp.profile_file(tmp_path / "d") == path and not path.is_symlink()
    assert not (tmp_path / "elsewhere.json").exists()
    config = SandboxConfig(root=tmp_path, session_id="s1")
    options = container_options(config, tmp_path / "lock", "1000:1000", podman_profile=path)
    assert options["security_opt"] == ["no-new-privileges", f"seccomp={path}"]
    assert options["tmpfs"]["/var/tmp"].startswith("ro,")  # Podman adds a writable one
    assert "size=1m" in options["tmpfs"]["/run"]
