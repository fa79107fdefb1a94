"""The seccomp profile: Docker's default, shipped unmodified, plus the rules seccomp.py adds.

What the kernel does with it is shown against a real container in
tests/docker/test_cli_kernel.py; here, that the generated JSON says what we mean.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.sandbox import seccomp
from executor.sandbox.docker import SandboxConfig, container_options

PROFILES = resources.files("executor.sandbox").joinpath("profiles")
MODE_SYSCALLS = ["chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat", "mknod",
                 "mknodat"]
RESTRICTED = {*MODE_SYSCALLS, "socket", "socketpair", "socketcall", "openat2", "io_uring_setup",
              "io_uring_enter", "io_uring_register"}


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
                                  "io_uring_register", "openat2"])
def test_refused_syscalls_are_allowed_by_no_rule(generated: dict[str, Any], name: str):
    assert allowing(generated, name) == []


def test_openat2_fails_with_enosys_so_libc_falls_back(generated: dict[str, Any]):
    rules = [rule for rule in generated["syscalls"] if "openat2" in rule["names"]]
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
