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
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, cast

from executor.errors import SandboxError

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
SOCKETPAIR_TYPES = {"SOCK_STREAM": 1, "SOCK_SEQPACKET": 5}
"""The socket types `socketpair()` may create (asyncio and multiprocessing use streams)."""
REFUSED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "socketcall")
"""Syscalls taken out of the allow-list altogether."""
NO_SYSCALL = ("openat2",)
"""Syscalls that fail with ENOSYS, so that callers fall back to an older one we can inspect."""

_ENOSYS, _ENOSYS_MIPS = 38, 89
# The arches whose ENOSYS is 89, named as in Docker's own clone3 rule.
_MIPS = ["mips3l64n32", "mips64", "mips64n32", "mipsel", "mipsel64"]
_TYPE_MASK = 0xF  # SOCK_TYPE_MASK: the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_INT_MASK = 0xFFFF_FFFF  # an int argument: the upper half of the register is not ours to judge
DEFAULT_PROFILE = "profiles/docker-default.json"
"""Docker's default profile, relative to this package."""


def profile(source: Traversable | Path | None = None) -> Profile:
    """Docker's default profile (or the one at `source`) with this module's rules applied."""
    base = load(source or resources.files("executor.sandbox").joinpath(DEFAULT_PROFILE))
    restricted = [*MODE_ARGUMENT, "socket", "socketpair", *REFUSED, *NO_SYSCALL]
    base["syscalls"] = [*_without(base["syscalls"], restricted), *added_rules()]
    base["archMap"] = [{**entry, "subArchitectures": []} for entry in base.get("archMap", [])]
    return base


@functools.cache
def security_opt() -> str:
    """The `security_opt` entry that applies `profile()` (built once per process)."""
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))


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
    """`rules` with `names` taken out of every rule that allows them (emptied rules dropped)."""
    kept = []
    for rule in rules:
        if rule.get("action") == "SCMP_ACT_ALLOW":
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
    return [*_mode_rules(), *_socket_rules(), *_enosys_rules()]


def _mode_rules() -> list[Rule]:
    by_index: dict[int, list[str]] = {}
    for name, index in MODE_ARGUMENT.items():
        by_index.setdefault(index, []).append(name)
    return [_allow(names, index, SET_ID_BITS, 0) for index, names in sorted(by_index.items())]


def _socket_rules() -> list[Rule]:
    families = [_allow(["socket"], 0, _INT_MASK, v) for v in SOCKET_FAMILIES.values()]
    pairs = [_allow(["socketpair"], 1, _TYPE_MASK, v) for v in SOCKETPAIR_TYPES.values()]
    return families + pairs


def _allow(names: list[str], index: int, mask: int, value: int) -> Rule:
    """Allow `names` when `argument[index] & mask == value`, else the default action (EPERM).

    Docker (like libseccomp) reads SCMP_CMP_MASKED_EQ's `value` as the mask and `valueTwo` as
    what the masked argument must equal: its own clone rule is written that way.
    """
    condition = {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
    return {"names": names, "action": "SCMP_ACT_ALLOW", "args": [condition],
            "comment": "sandbox-agent", "includes": {}, "excludes": {}}


def _enosys_rules() -> list[Rule]:
    names = list(NO_SYSCALL)
    common = {"names": names, "action": "SCMP_ACT_ERRNO", "args": [], "comment": "sandbox-agent"}
    return [{**common, "errnoRet": _ENOSYS, "includes": {}, "excludes": {"arches": _MIPS}},
            {**common, "errnoRet": _ENOSYS_MIPS, "includes": {"arches": _MIPS}, "excludes": {}}]
