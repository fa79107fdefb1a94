"""The container's seccomp profile: Docker's default, plus rules against set-id files and sockets.

Docker's default profile is an allow-list, and a profile given with `seccomp=<json>` replaces it
(there is no "default plus these"), so this module starts from Docker's own profile, shipped
unmodified as package data (`profiles/docker-default.json`, moby v20.10.24, Apache-2.0, see
`profiles/NOTICE`), and makes every change here, in code:

- chmod, fchmod, fchmodat, fchmodat2, and open, openat, creat, mknod, mknodat: allowed only
  when `mode & 06000 == 0`. A set-uid file in the project is a set-uid file on the host, owned
  by the root's owner (root in CI).
- openat2: ENOSYS. Its mode sits in a struct seccomp cannot read; libc falls back to openat.
- io_uring_setup, io_uring_enter, io_uring_register: refused. Its OPENAT ops create files
  without the openat syscall (newer Docker versions drop them from the default too).
- socket: only AF_INET, AF_INET6 and AF_NETLINK. No unix sockets, so a host server listening
  on a socket in the project is out of reach.
- socketpair: only SOCK_STREAM and SOCK_SEQPACKET (asyncio and multiprocessing use streams). A
  datagram pair can `sendto` any socket path; a connected stream pair cannot connect again.
- socketcall: refused. The 32-bit socket multiplexer; its arguments are behind a pointer.
- clone: allowed only without namespace flags (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
  NEWPID, NEWNET: Docker's own mask); unshare and setns: refused; clone3: ENOSYS (its flags are
  in a struct; libc falls back to clone). Docker's default does the same only for a container
  without CAP_SYS_ADMIN; here it holds whatever the capabilities, and in the toolbox's filter.
- 32-bit ABIs beside the native one (x86 and x32 beside x86_64, ARM beside AArch64, ...):
  dropped from `archMap`, so their syscalls kill the process (SIGSYS). On i386 libseccomp turns a
  `socket` rule with arguments into a `socketcall` rule without them: `int 0x80` reached unix
  sockets.

Refused means the profile's default action: the call fails with EPERM ("Operation not
permitted"). The rule on `socket` rather than `connect` is deliberate: seccomp sees only a
syscall's integer arguments, and `connect`'s address is behind a pointer, while the family is an
integer. Architectures are left to Docker: it resolves the profile's `archMap` and per-arch
rules for the engine's own architecture (right for a remote engine too), as for its default.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, cast

from executor.errors import SandboxError
from executor.toolbox.nofollow import read_plain

Profile = dict[str, Any]
Rule = dict[str, Any]

SET_ID_BITS = 0o6000
"""S_ISUID | S_ISGID: the mode bits no file the sandbox creates or changes may carry."""
MODE_ARGUMENT = {
    "chmod": 1, "fchmod": 1, "creat": 1, "mknod": 1,
    "fchmodat": 2, "fchmodat2": 2, "open": 2, "mknodat": 2,
    "openat": 3,
}
"""Syscalls that set a file's mode, and the index of their mode argument."""
SOCKET_FAMILIES = {"AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
"""The address families `socket()` may create (AF_NETLINK: getaddrinfo, getifaddrs, `ip`)."""
AF_UNIX = 1
"""The family only the egress forwarder may create (executor/network/forwarder.py)."""
SOCKETPAIR_TYPES = {"SOCK_STREAM": 1, "SOCK_SEQPACKET": 5}
"""The socket types `socketpair()` may create (asyncio and multiprocessing use streams)."""
CLONE_NAMESPACES = {
    "CLONE_NEWNS": 0x0002_0000, "CLONE_NEWCGROUP": 0x0200_0000, "CLONE_NEWUTS": 0x0400_0000,
    "CLONE_NEWIPC": 0x0800_0000, "CLONE_NEWUSER": 0x1000_0000, "CLONE_NEWPID": 0x2000_0000,
    "CLONE_NEWNET": 0x4000_0000,
}
"""The flags that make `clone()` create a namespace (a user namespace brings every capability
in it). CLONE_NEWTIME (0x80) is no clone() flag: there the low byte is the exit signal, and a
time namespace comes only from unshare and clone3, both refused whole."""
CLONE_NAMESPACE_MASK = sum(CLONE_NAMESPACES.values())  # 0x7E020000, as in Docker's clone rule
REFUSED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "socketcall", "unshare",
           "setns")
"""Syscalls taken out of the allow-list altogether."""
NO_SYSCALL = ("openat2", "clone3")
"""Syscalls that fail with ENOSYS, so that callers fall back to an older one we can inspect."""

_ENOSYS, _ENOSYS_MIPS = 38, 89
# The arches whose ENOSYS is 89, named as in Docker's own clone3 rule.
_MIPS = ["mips3l64n32", "mips64", "mips64n32", "mipsel", "mipsel64"]
_S390 = ["s390", "s390x"]  # clone's flags are its second argument there
_TYPE_MASK = 0xF  # SOCK_TYPE_MASK: the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_INT_MASK = 0xFFFF_FFFF  # an int argument: the upper half of the register is not ours to judge
DEFAULT_PROFILE = "profiles/docker-default.json"
"""Docker's default profile, relative to this package."""


def profile(source: Traversable | Path | None = None, *, unix: bool = False) -> Profile:
    """Docker's default profile (or the one at `source`) with this module's rules applied;
    `unix`: AF_UNIX sockets allowed too (the egress forwarder's, never the sandbox's)."""
    base = load(source or resources.files("executor.sandbox").joinpath(DEFAULT_PROFILE))
    restricted = [*MODE_ARGUMENT, "socket", "socketpair", "clone", *REFUSED, *NO_SYSCALL]
    unix_rule = [_allow(["socket"], 0, _INT_MASK, AF_UNIX)] if unix else []
    base["syscalls"] = [*_without(base["syscalls"], restricted), *added_rules(), *unix_rule]
    base["archMap"] = [{**entry, "subArchitectures": []} for entry in base.get("archMap", [])]
    return base


@functools.cache
def security_opt() -> str:
    """The `security_opt` entry that applies `profile()` (built once per process)."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))


@functools.cache
def forwarder_security_opt() -> str:
    """The egress forwarder's: `profile()` and unix sockets (it reaches the host's proxy)."""
    return "seccomp=" + json.dumps(profile(unix=True), separators=(",", ":"))


def profile_file(directory: Path, *, unix: bool = False) -> Path:
    """`profile()` as a file in `directory` (a private dir of ours), for engines that take a path.

    Podman's Docker-compatible API reads `seccomp=` as a path on its host, where Docker's takes
    the JSON itself. The file is named by its content and rewritten whenever it differs.
    """
    data = json.dumps(profile(unix=unix), separators=(",", ":")).encode()
    path = directory / f"seccomp-{hashlib.sha256(data).hexdigest()[:16]}.json"
    return publish(path, data, "the seccomp profile")


def publish(path: Path, data: bytes, what: str) -> Path:
    """`data` as the world-readable file `path` in a private dir of ours (made 0700 when
    missing), written atomically and only when what is there differs (links not followed)."""
    try:
        if read_plain(path) == data:
            return path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.parent / f".{path.name}.{os.getpid()}"
        temporary.write_bytes(data)
        temporary.chmod(0o644)
        temporary.replace(path)
    except OSError as exc:
        raise SandboxError(f"cannot write {what} to {path}: {exc.strerror}") from exc
    return path


def load(source: Traversable | Path) -> Profile:
    """A Docker seccomp profile from JSON; a clear SandboxError when missing or not one."""
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SandboxError(f"the seccomp profile {source} is missing",
                           fix="reinstall sandbox-agent") from exc
    except (OSError, ValueError) as exc:
        raise SandboxError(f"the seccomp profile {source} is unreadable: {exc}",
                           fix="reinstall sandbox-agent") from exc
    if not _is_allow_list(data):
        raise SandboxError(f"the seccomp profile {source} is not a Docker allow-list profile "
                           "(defaultAction SCMP_ACT_ERRNO and a list of syscalls)")
    return cast(Profile, data)


def _is_allow_list(data: Any) -> bool:
    # The rules below only narrow what an allow rule lets through; on a profile whose default
    # is to allow, they would change nothing.
    return (isinstance(data, dict) and data.get("defaultAction") == "SCMP_ACT_ERRNO"
            and isinstance(data.get("syscalls"), list)
            and all(isinstance(rule, dict) for rule in data["syscalls"]))


def _without(rules: list[Rule], names: list[str]) -> list[Rule]:
    """`rules` with `names` taken out of every rule (emptied rules dropped), so that the rules
    added here are all the profile says about them: also Docker's own rules for clone and
    clone3, which hold only without CAP_SYS_ADMIN."""
    kept = []
    for rule in rules:
        if set(_names(rule)) & set(names):
            rule = {**rule, "names": [n for n in _names(rule) if n not in names]}
            rule.pop("name", None)
            if not rule["names"]:
                continue
        kept.append(rule)
    return kept


def _names(rule: Rule) -> list[str]:
    return list(rule.get("names") or ([rule["name"]] if rule.get("name") else []))


def added_rules() -> list[Rule]:
    """The rules that replace what `profile()` took out of Docker's allow-list."""
    return [*_mode_rules(), *_socket_rules(), *_clone_rules(), *_enosys_rules()]


def _mode_rules() -> list[Rule]:
    by_index: dict[int, list[str]] = {}
    for name, index in MODE_ARGUMENT.items():
        by_index.setdefault(index, []).append(name)
    return [_allow(names, index, SET_ID_BITS, 0) for index, names in sorted(by_index.items())]


def _socket_rules() -> list[Rule]:
    families = [_allow(["socket"], 0, _INT_MASK, v) for v in SOCKET_FAMILIES.values()]
    pairs = [_allow(["socketpair"], 1, _TYPE_MASK, v) for v in SOCKETPAIR_TYPES.values()]
    return families + pairs


def _clone_rules() -> list[Rule]:
    native = _allow(["clone"], 0, CLONE_NAMESPACE_MASK, 0, excludes={"arches": _S390})
    return [native, _allow(["clone"], 1, CLONE_NAMESPACE_MASK, 0, includes={"arches": _S390})]


def _allow(names: list[str], index: int, mask: int, value: int, *,
           includes: dict[str, Any] | None = None, excludes: dict[str, Any] | None = None
           ) -> Rule:
    """Allow `names` when `argument[index] & mask == value`, else the default action (EPERM).

    Docker (like libseccomp) reads SCMP_CMP_MASKED_EQ's `value` as the mask and `valueTwo` as
    what the masked argument must equal: its own clone rule is written that way.
    """
    condition = {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
    return {"names": names, "action": "SCMP_ACT_ALLOW", "args": [condition],
            "comment": "sandbox-agent", "includes": includes or {}, "excludes": excludes or {}}


def _enosys_rules() -> list[Rule]:
    names = list(NO_SYSCALL)
    common = {"names": names, "action": "SCMP_ACT_ERRNO", "args": [], "comment": "sandbox-agent"}
    return [{**common, "errnoRet": _ENOSYS, "includes": {}, "excludes": {"arches": _MIPS}},
            {**common, "errnoRet": _ENOSYS_MIPS, "includes": {"arches": _MIPS}, "excludes": {}}]


# -- the toolbox's own filter ---------------------------------------------------------------------
#
# gVisor's runsc (Debian's 0.0~20221219; fixed upstream only in 2026) applies the container's
# profile to the container's first process and its children, never to `runsc exec`'d processes:
# the toolbox, and every command it runs, would be unfiltered there. So the toolbox also installs
# the rules above itself, as a classic BPF program built here (seccomp filters stack, and the
# strictest answer wins, so under runc this changes nothing). Only x86_64 is built and tested.
# Without the namespace rules a command under runsc could `unshare -U -r` and hold every
# capability in a user namespace of gVisor's (red-team, issue 23).

BPF_ARCHES = {"x86_64": 0xC000_003E}
"""Machines (`uname -m`) a toolbox filter is built for, and their AUDIT_ARCH value."""
SYSCALL_NUMBERS = {"x86_64": {
    "open": 2, "creat": 85, "chmod": 90, "fchmod": 91, "mknod": 133, "openat": 257,
    "mknodat": 259, "fchmodat": 268, "fchmodat2": 452, "socket": 41, "socketpair": 53,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "openat2": 437,
    "clone": 56, "unshare": 272, "setns": 308, "clone3": 435,
}}
"""The syscall numbers the toolbox filter names (socketcall does not exist on x86_64)."""

_X32_BIT = 0x4000_0000  # x32 syscalls on x86_64: another ABI, refused like the 32-bit ones
_LD, _AND, _JEQ, _JGE, _JSET, _RET = 0x20, 0x54, 0x15, 0x35, 0x45, 0x06
_KILL, _ERRNO, _ALLOW = 0x8000_0000, 0x0005_0000, 0x7FFF_0000
_EPERM = 1
Instruction = tuple[int, int, int, int]


def toolbox_filter(machine: str) -> bytes | None:
    """The toolbox's program for `machine` (`uname -m`): this module's rules, else allow.

    None for a machine not in BPF_ARCHES (the container's profile is then all there is).
    """
    if machine not in BPF_ARCHES:
        return None
    numbers = SYSCALL_NUMBERS[machine]
    program = [*_native_only(BPF_ARCHES[machine]), _ld(0), (_JGE, 0, 1, _X32_BIT), _ret(_KILL)]
    for name, index in MODE_ARGUMENT.items():
        program += _when(numbers[name], [_ld(_arg(index)), (_JSET, 0, 1, SET_ID_BITS),
                                         _ret(_ERRNO | _EPERM), _ret(_ALLOW)])
    program += _when(numbers["socket"], [_ld(_arg(0)), *_allow_any(SOCKET_FAMILIES.values())])
    program += _when(numbers["socketpair"], [_ld(_arg(1)), (_AND, 0, 0, _TYPE_MASK),
                                             *_allow_any(SOCKETPAIR_TYPES.values())])
    program += _when(numbers["clone"], [_ld(_arg(0)), (_JSET, 0, 1, CLONE_NAMESPACE_MASK),
                                        _ret(_ERRNO | _EPERM), _ret(_ALLOW)])
    for name in [n for n in REFUSED if n in numbers]:
        program += _when(numbers[name], [_ret(_ERRNO | _EPERM)])
    for name in NO_SYSCALL:
        program += _when(numbers[name], [_ret(_ERRNO | _ENOSYS)])
    return _assemble([*program, _ret(_ALLOW)])


def _native_only(arch: int) -> list[Instruction]:
    """Any other ABI (i386's `int 0x80` on x86_64) kills the process, as in the profile."""
    return [_ld(4), (_JEQ, 1, 0, arch), _ret(_KILL)]


def _when(number: int, block: list[Instruction]) -> list[Instruction]:
    """`block` (which ends in a return) runs for syscall `number`; others skip past it."""
    return [(_JEQ, 0, len(block), number), *block]


def _allow_any(values: Any) -> list[Instruction]:
    """Allow when the accumulator is one of `values`, else EPERM."""
    values = list(values)
    tests = [(_JEQ, len(values) - i, 0, value) for i, value in enumerate(values)]
    return [*tests, _ret(_ERRNO | _EPERM), _ret(_ALLOW)]


def _ld(offset: int) -> Instruction:
    return (_LD, 0, 0, offset)


def _arg(index: int) -> int:
    """Offset of argument `index`'s low 32 bits in struct seccomp_data (little-endian)."""
    return 16 + 8 * index


def _ret(action: int) -> Instruction:
    return (_RET, 0, 0, action)


def _assemble(program: list[Instruction]) -> bytes:
    """struct sock_filter[]: u16 code, u8 jt, u8 jf, u32 k, native byte order."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
