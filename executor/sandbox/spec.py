"""A run's sandbox as one frozen value, and the digest that labels its container.

The value is everything the container is created with (`container_options`) and the argv its
toolboxes start with, so a feature that adds a mount, an environment variable, a limit or a
network cannot leave it out: there is no second list to forget. The git surface (what is
kept from the sandbox because git on the host runs it, why, and by which mechanism:
executor/gitsafety/surface.py) is a field of its own. The container carries the
digest in a label the sandbox cannot change, and a later run re-uses a container only when
its own digest is equal (`--resume` after a controller died, a copy kept for review).

Environment values are secrets more often than not: only their names and a digest of the
values are kept. The size of a copy workspace (the tmpfs and the memory it is charged to) is
the size of the data, not a decision, and is left out so a copy can be resumed after the
project changed on the host.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPEC_VERSION = 1
"""Bumped when the meaning of a field changes: a container of another version is never re-used."""

LABEL_SPEC = "sandbox-agent.spec"
"""The container label holding the digest of its `SandboxSpec`."""
LABEL_SPEC_FIELDS = "sandbox-agent.spec-fields"
"""The label holding each field's own short digest, to name what changed between two runs."""

_LEFT_OUT = frozenset({"labels", "name"})
"""Identity, not decisions: the name follows the session, the labels carry the digest itself."""
_NAMES = {
    "mounts": "mounts (the root's mode and the protected git paths)",
    "tmpfs": "tmpfs mounts", "environment": "environment", "network_mode": "network",
    "network_disabled": "network", "image": "image", "runtime": "runtime", "user": "user",
    "security_opt": "seccomp profile and no-new-privileges", "cap_drop": "capabilities",
    "mem_limit": "memory limit", "memswap_limit": "memory limit", "nano_cpus": "CPU limit",
    "pids_limit": "process limit", "ulimits": "resource limits (disk budget, files, processes)",
    "command": "first process", "toolbox": "toolbox options (git guard, budget, timeouts)",
    "read_only": "read-only root file system", "egress": "network allow-list",
    "version": "sandbox-agent's sandbox version",
    "git": "git protection (what is kept from the sandbox, why, and how)",
}


@dataclass(frozen=True)
class SandboxSpec:
    """What one run decided its sandbox is: a canonical field -> value map, compared by digest."""

    fields: Mapping[str, str]
    """Each decision's canonical JSON (environment values and large blobs as digests)."""

    @classmethod
    def of(cls, options: Mapping[str, Any], toolbox: list[str], image_id: str, *,
           network: Mapping[str, Any] | None = None,
           git: Mapping[str, Any] | None = None) -> SandboxSpec:
        """The spec of `containers.create(**options)` whose toolboxes run with `toolbox`;
        `network`: the egress decisions (allow-list, pins, limits) when any host is allowed;
        `git`: the git surface (executor/gitsafety/surface.py: `GitSurface.spec`)."""
        values: dict[str, Any] = {k: v for k, v in options.items() if k not in _LEFT_OUT}
        if network:  # absent without egress: the digest of a run without network is unchanged
            values["egress"] = dict(network)
        if git is not None:  # what is protected and by which mechanism, not only the mounts
            values["git"] = dict(git)
        values["image"] = image_id  # the digest, whatever name the run used for it
        values["environment"] = _environment(options.get("environment") or {})
        values["toolbox"] = toolbox
        values["version"] = SPEC_VERSION
        return cls({key: _canonical(value) for key, value in sorted(values.items())})

    @property
    def digest(self) -> str:
        """sha256 of every field: equal digests, equal sandboxes."""
        return _sha(json.dumps(dict(self.fields), sort_keys=True))

    def labels(self) -> dict[str, str]:
        """The labels a container made from this spec carries."""
        short = {key: _sha(value)[:12] for key, value in self.fields.items()}
        return {LABEL_SPEC: self.digest, LABEL_SPEC_FIELDS: json.dumps(short, sort_keys=True)}

    def differences(self, labels: Mapping[str, str]) -> list[str]:
        """What a container with these labels was made with differently, in words (all of it
        when it has no spec: an older version made it)."""
        if labels.get(LABEL_SPEC) == self.digest:
            return []
        try:
            theirs = json.loads(labels.get(LABEL_SPEC_FIELDS) or "")
        except ValueError:
            theirs = None
        if not isinstance(theirs, dict):
            return ["everything (it was made by an older sandbox-agent)"]
        mine = json.loads(self.labels()[LABEL_SPEC_FIELDS])
        changed = {key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)}
        return sorted({_NAMES.get(key, key) for key in changed}) or ["the whole description"]


def _environment(env: Mapping[str, Any]) -> dict[str, Any]:
    """Names in the clear, values only as one digest."""
    pairs = json.dumps(sorted((str(k), str(v)) for k, v in env.items()))
    return {"names": sorted(str(k) for k in env), "values_sha256": _sha(pairs)}


def _canonical(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=_plain, separators=(",", ":"))
    return text if len(text) <= 4096 else json.dumps({"sha256": _sha(text)})


def _plain(value: Any) -> Any:
    """docker.types objects are dicts; anything else by its text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
