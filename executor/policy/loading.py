"""Where a run's policy comes from: the person's own file, then the project's (trusted in full,
or only to tighten) or the one `--policy` names, parsed and layered into one `Policy`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from executor.errors import ConfigError, PolicyFileError
from executor.policy.decision import (
    BUILTIN_SOURCE,
    POLICY_FILE,
    SHELL_TOOL,
    PolicyOverrides,
    Verdict,
)
from executor.policy.layers import Policy
from executor.policy.rules import PolicyRegex, Rule
from executor.policy_file import RuleSpec, load_spec, rule_id
from executor.state import config_home
from executor.tools.base import RiskLevel
from executor.trust import read_project_file


def default_policy_path(root: Path) -> Path:
    """`<root>/.sandbox-agent/policy.toml`: a project policy, used as trusted only when trusted."""
    return root / POLICY_FILE


def user_policy_path() -> Path:
    """The person's own policy, always trusted: `~/.config/sandbox-agent/policy.toml`."""
    return config_home() / "policy.toml"


def load_policy(
    root: Path | None = None,
    path: Path | None = None,
    overrides: PolicyOverrides | None = None,
) -> Policy:
    """The policy for a run: the person's own policy plus `path` (named by them) or the project's.

    The user policy's rules come first (the person's word wins) and its defaults override. A
    project policy (`<root>/.sandbox-agent/policy.toml`) is the repository's word: used in full
    only when the person trusted its exact content (`sandbox-agent policy trust`), otherwise
    only its deny and ask rules apply, and only where they are stricter.
    """
    layers, notices = _user_layer(root)
    tighten = None
    if path is not None:
        named = _parse_file(path, "--policy")
        if named.network and root is not None and _inside(path, root):  # the tree's words
            notices.append(f"the [network] table of {path} is not used: it lies inside the "
                           "project, and nothing there allows a host")
            named.network = ()
        layers.append(named)
    elif root is not None:
        project, tighten, more = _project_policy(root)
        notices += more
        layers += [project] if project else []
    return _combine(layers, overrides, tighten, notices)


def _user_layer(root: Path | None) -> tuple[list[Policy], list[str]]:
    """The person's own policy, unless it lies inside the project (dotfiles kept in a repo, or
    a config dir linked into it): there the sandbox could rewrite it."""
    path = user_policy_path()
    if not path.is_file():
        return [], []
    if root is not None:
        real = Path(os.path.realpath(path))
        top = Path(os.path.realpath(root))
        if real == top or top in real.parents:
            return [], [f"your policy {path} is not used in this run: it lies inside the project "
                        f"{top}, where the sandbox can write"]
    return [_parse_file(path, "user")], []


def _inside(path: Path, root: Path) -> bool:
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents


def _parse_file(path: Path, label: str) -> Policy:
    return parse_policy(_read(path), path=str(path), label=label)


def _project_policy(root: Path) -> tuple[Policy | None, Policy | None, list[str]]:
    """(trusted layer, untrusted tightening layer, notices) of the root's policy file."""
    try:
        file = read_project_file(root, POLICY_FILE.as_posix())
    except ConfigError as exc:
        return None, None, [exc.message]
    if file is None:
        return None, None, []
    text = _decode(file.data, file.path)
    if file.trusted:
        trusted = parse_policy(text, path=str(file.path), label="project, trusted")
        trusted.network = ()  # trusted for its rules; a host is the person's to allow
        return trusted, None, []
    untrusted = parse_policy(text, path=str(file.path), label="project, untrusted: deny/ask only")
    why = "changed since you trusted it" if file.changed else "not trusted"
    notice = (f"project policy {file.path} is {why}: only its deny and ask rules apply; "
              f"review it and trust it with `sandbox-agent policy trust --root {root}`")
    return None, untrusted.without_allows(), [notice]


def _combine(layers: list[Policy], overrides: PolicyOverrides | None, tighten: Policy | None,
             notices: list[str]) -> Policy:
    """One policy: the layers' rules in order, later layers' defaults under earlier ones."""
    rules = [rule for layer in layers for rule in layer.rules]
    defaults: dict[RiskLevel, Verdict] = {}
    sources: dict[RiskLevel, str] = {}
    for layer in reversed(layers):
        for level, source in layer.default_sources.items():
            if source != "built-in":
                defaults[level], sources[level] = layer.defaults[level], source
    names = [layer.source for layer in layers] + ([tighten.source] if tighten else [])
    network = [entry for layer in layers for entry in layer.network]
    return Policy(rules, defaults, overrides, source=" + ".join(names) or BUILTIN_SOURCE,
                  default_sources=sources, tighten=tighten, notices=notices, network=network)


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"policy file {path} cannot be read: {exc}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyFileError(
            f"policy file {path} not found", fix="check the --policy path"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"policy file {path} cannot be read: {exc}") from None


def parse_policy(text: str, *, path: str, overrides: PolicyOverrides | None = None,
                 label: str | None = None) -> Policy:
    """Parse and validate policy TOML; errors name the file, the line and the reason.

    The format is `executor.policy_file.PolicySpec`; `label` (e.g. "user",
    "project, untrusted") is added to the policy's source.
    """
    spec, src = load_spec(text, path)
    levels = {level.value: level for level in RiskLevel}
    defaults = {levels[k]: cast(Verdict, v)
                for k, v in spec.defaults.model_dump(exclude_none=True).items()}
    rules = [_rule(rule_id(src, index), rule) for index, rule in enumerate(spec.rules, 1)]
    sources = {level: f"{src.name} [defaults]" for level in defaults}
    source = f"{path} ({label})" if label else path
    network = [(text, f"policy {src.name}") for text in spec.network.allow]
    network += [(f"preset:{name}", f"policy {src.name}") for name in spec.network.presets]
    return Policy(rules, defaults, overrides, source=source, default_sources=sources,
                  network=network)


def _rule(id: str, spec: RuleSpec) -> Rule:
    shell = spec.prefix is not None or spec.regex is not None
    return Rule(
        id=id, decision=spec.decision, tool=spec.tool or (SHELL_TOOL if shell else "*"),
        prefixes=tuple(spec.prefix or ()),
        regexes=tuple(PolicyRegex(r, on_timeout=spec.decision != "allow")
                      for r in spec.regex or ()),
        name=spec.name, reason=spec.reason,
    )
