"""The sandbox spec: every decision a container is made with changes its digest; nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from executor.gitsafety.hostgit import Protected
from executor.sandbox.config import SandboxConfig
from executor.sandbox.hardening import container_options
from executor.sandbox.spec import LABEL_SPEC, SandboxSpec

ARGV = ["--kill-strays", "--readonly-dir", ".git", "--git-guard", "--sign"]


def spec(tmp_path: Path, *, argv: list[str] = ARGV, image: str = "sha256:aa",
         protected: Protected | None = None, **config: Any) -> SandboxSpec:
    settings = SandboxConfig(root=tmp_path, session_id="s1", **config)
    options = container_options(settings, tmp_path / "l.lock", "1000:1000", protected)
    return SandboxSpec.of(options, argv, image)


CHANGED: dict[str, dict[str, Any]] = {
    "read_only": {"read_only": True},
    "env name": {"env": {"DEPLOY_TOKEN": "x"}},
    "memory": {"memory": "300m"},
    "pids": {"pids_limit": 64},
    "cpus": {"cpus": 0.5},
    "tmp": {"tmp_size": "8m"},
    "disk budget": {"disk_budget": 1234},
    "network": {"network": True},
    "runtime": {"runtime": "runsc"},
    "workspace": {"workspace": "copy"},
    "copy storage": {"workspace": "copy", "copy_storage": "disk"},
}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_each_decision_changes_the_digest(tmp_path: Path, name: str):
    assert spec(tmp_path).digest != spec(tmp_path, **CHANGED[name]).digest


def test_the_protected_set_the_toolbox_options_and_the_image_count(tmp_path: Path):
    (tmp_path / ".git").mkdir()
    base = spec(tmp_path)
    assert base.digest != spec(tmp_path, protected=Protected((".git",), ())).digest
    assert base.digest != spec(tmp_path, protected=Protected((), (".husky",))).digest
    assert base.digest != spec(tmp_path, argv=ARGV[:1]).digest  # --allow-git-writes' toolbox
    assert base.digest != spec(tmp_path, image="sha256:bb").digest


def test_an_env_value_changes_the_digest_but_never_shows(tmp_path: Path):
    one = spec(tmp_path, env={"DEPLOY_TOKEN": "s3cr3t-one"})
    two = spec(tmp_path, env={"DEPLOY_TOKEN": "s3cr3t-two"})
    assert one.digest != two.digest
    assert "s3cr3t" not in repr(one.fields) + repr(one.labels())
    assert two.differences(one.labels()) == ["environment"]


def test_the_same_decisions_give_the_same_digest(tmp_path: Path):
    assert spec(tmp_path).labels() == spec(tmp_path).labels()
    assert spec(tmp_path).differences(spec(tmp_path).labels()) == []


def test_the_size_of_a_copy_is_not_a_decision_but_its_caller_must_say_so(tmp_path: Path):
    """Blueprint.spec() builds with copy_bytes=0; a raw size does change the options."""
    small = spec(tmp_path, workspace="copy", copy_bytes=0)
    assert small.digest != spec(tmp_path, workspace="copy", copy_bytes=10**6).digest


def test_differences_are_named_and_an_unlabelled_container_differs_in_everything(
        tmp_path: Path):
    base, other = spec(tmp_path), spec(tmp_path, read_only=True, memory="300m")
    assert other.differences(base.labels()) == ["memory limit", "mounts (the root's mode and "
                                                "the protected git paths)", "resource limits "
                                                "(disk budget, files, processes)",
                                                "tmpfs mounts"]  # .sandbox-agent's cover
    assert base.differences({}) == ["everything (it was made by an older sandbox-agent)"]
    forged = {**base.labels(), LABEL_SPEC: "0" * 64}
    assert base.differences(forged) == ["the whole description"]


def _egress(*hosts: str, **more: Any) -> Any:
    from executor.network.egress import AllowedHost, EgressConfig

    return EgressConfig(allow=[AllowedHost(text=h, source="--allow-host") for h in hosts], **more)


def _run_spec(tmp_path: Path, **config: Any) -> SandboxSpec:
    """The spec a run's DockerSandbox decides (no engine needed: nothing starts)."""
    from executor.sandbox.docker import DockerSandbox

    settings = SandboxConfig(root=tmp_path, session_id="s1", lock_dir=tmp_path / "locks",
                             fifo_channel=False, **config)
    return DockerSandbox(settings).blueprint.spec()


def test_the_allow_list_is_part_of_the_spec(tmp_path: Path):
    """A resumed container never keeps an older network: each egress decision is a field."""
    none = _run_spec(tmp_path)
    one = _run_spec(tmp_path, egress=_egress("a.example:443"))
    assert "egress" not in none.fields  # a run without network keeps the digest it had
    assert one.digest != none.digest
    assert "environment" in one.differences(none.labels())  # the proxy variables too
    assert "network allow-list" in one.differences(none.labels())
    other = _run_spec(tmp_path, egress=_egress("a.example:443", "b.example"))
    assert "network allow-list" in other.differences(one.labels())
    pinned = _run_spec(tmp_path, egress=_egress("a.example:443", resolve={"a.example": "1.2.3.4"}))
    assert pinned.differences(one.labels()) == ["network allow-list"]
    same = _run_spec(tmp_path, egress=_egress("a.example:443"))
    assert same.digest == one.digest
    assert json.loads(one.fields["egress"])["allow"] == ["a.example:443"]
