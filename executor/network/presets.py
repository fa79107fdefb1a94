"""Named allow-lists: `--network pypi|npm|github`.

The package presets allow the index and registry the person's own pip and npm are configured
with, read from them when the run starts (`pip config list`, `npm config get registry`), so a
company mirror just works and nothing here names a registry. Without an index-url, pip's own
default index is asked of pip itself, with the host its files are served from.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from executor.errors import ConfigError
from executor.state import private_dir, state_home

PRESETS = ("pypi", "npm", "github")
"""The presets there are."""
GITHUB = ("github.com", "*.github.com", "*.githubusercontent.com")
"""Cloning, the API, release and raw downloads."""
PIP_CERT = "/run/sandbox-agent-ca/pip.pem"
"""Where the CA bundle the person's pip trusts is mounted in the sandbox."""
Run = Callable[[Sequence[str]], str]
"""Runs a command and returns its stdout; OSError or CalledProcessError when it fails."""
_PIP_DEFAULT = ("from pip._internal.models.index import PyPI; "
                "print(PyPI.simple_url); print(PyPI.file_storage_domain)")


@dataclass(frozen=True)
class Preset:
    """What a preset allows, and the environment that points the sandbox's tools there."""

    hosts: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """PIP_INDEX_URL, NPM_CONFIG_REGISTRY ...: the sandbox has no config of the person's."""
    files: dict[str, str] = field(default_factory=dict)
    """Files of the person's mounted read-only (path inside -> path on the host): the CA
    bundle their pip trusts, which a mirror's certificate may need."""


def run_command(argv: Sequence[str]) -> str:
    """`argv`'s stdout (15 s at most), run in a directory of ours: the person's current one is
    usually the project, whose `pip/` package `python -m pip` would import and whose `.npmrc`
    npm would read (red-team round 25)."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=15, check=True,
                          cwd=private_dir(state_home(), parents=True))
    return done.stdout


def preset(name: str, run: Run = run_command) -> Preset:
    """What preset `name` stands for on this machine."""
    if name == "github":
        return Preset(list(GITHUB))
    try:
        if name == "pypi":
            return pip_preset(run)
        if name == "npm":
            return npm_preset(run)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"--network {name}: could not read the configuration of your "
                          f"{'pip' if name == 'pypi' else 'npm'} ({exc})",
                          fix="allow its index's host with --allow-host HOST instead") from None
    raise ConfigError(f"no network preset {name!r} (there are: {', '.join(PRESETS)})",
                      fix="pick one of them, or allow hosts with --allow-host HOST")


def pip_preset(run: Run) -> Preset:
    """The hosts of the indexes pip is configured with (http and https ones)."""
    pip = _pip()
    config = _pip_config(run([*pip, "config", "list"]))
    env, files = _pip_env(config), _pip_cert(config)
    if files:
        env["PIP_CERT"] = PIP_CERT
    urls = [url for key, values in config.items()
            if key.endswith((".index-url", ".extra-index-url")) for url in values.split()]
    if "PIP_INDEX_URL" not in env:  # pip's own default index
        if "-m" not in pip:
            raise ConfigError("--network pypi: your pip names no index-url, and its default "
                              "could not be asked of it", fix="allow it with --allow-host HOST")
        default, storage = [*run([pip[0], "-P", "-c", _PIP_DEFAULT]).split(), "", ""][:2]
        urls += [default] + ([f"https://{storage}/"] if storage else [])
    return Preset(list(dict.fromkeys(rule for rule in map(url_rule, urls) if rule)), env, files)


def _pip_cert(config: dict[str, str]) -> dict[str, str]:
    """The CA bundle pip is configured to trust (`cert`), when it is a file here."""
    for key in sorted(config, key=lambda key: not key.startswith(":env:")):
        if key.endswith(".cert") and os.path.isfile(config[key]):
            return {PIP_CERT: os.path.realpath(config[key])}
    return {}


def _pip_env(config: dict[str, str]) -> dict[str, str]:
    """The http(s) indexes as PIP_INDEX_URL and PIP_EXTRA_INDEX_URL (the last setting of
    each wins, as in pip: the environment's, then the files')."""
    env: dict[str, str] = {}
    for key, values in sorted(config.items(), key=lambda item: not item[0].startswith(":env:")):
        urls = [without_credentials(url) for url in values.split() if url_rule(url)]
        for suffix, name in ((".index-url", "PIP_INDEX_URL"),
                             (".extra-index-url", "PIP_EXTRA_INDEX_URL")):
            if key.endswith(suffix) and urls and name not in env:
                env[name] = " ".join(urls)
    return env


def npm_preset(run: Run) -> Preset:
    """The host of the registry npm is configured with."""
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError("--network npm reads the registry your npm is configured with, and "
                          "npm is not installed here", fix="allow the registry with --allow-host")
    registry = run([npm, "config", "get", "registry"]).strip()
    rule = url_rule(registry)
    if not rule:
        raise ConfigError("npm's registry is not an http(s) URL",
                          fix="allow its host with --allow-host HOST")
    return Preset([rule], {"NPM_CONFIG_REGISTRY": without_credentials(registry)})


def without_credentials(url: str) -> str:
    """`url` without the `user:token@` of its authority: what the sandbox gets is the model's
    to read (an index that needs them: the person passes the variable with `--env`)."""
    parts = urlsplit(url.strip().strip("'\""))
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def url_rule(url: str) -> str:
    """The rule allowing `url`'s host and port ('' for what is not http or https)."""
    parts = urlsplit(url.strip().strip("'\""))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port}" if parts.port and parts.port not in (80, 443) else host


def _pip() -> list[str]:
    """The person's pip: this interpreter's when it has one, else pip3 on PATH (`-P`: no
    directory of the caller's on its path)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-P", "-m", "pip"]
    found = shutil.which("pip3") or shutil.which("pip")
    if found is None:
        raise ConfigError("--network pypi reads the index your pip is configured with, and "
                          "pip is not installed here", fix="allow the index with --allow-host")
    return [found]


def _pip_config(text: str) -> dict[str, str]:
    """`pip config list` lines (`global.index-url='URL'`) as key -> value."""
    pairs = (line.partition("=") for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip().strip("'\"") for key, _, value in pairs}
