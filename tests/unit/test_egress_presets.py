"""Network presets read the person's own pip and npm configuration (a fake `run` stands in
for the commands; nothing here names a registry)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from executor.errors import ConfigError
from executor.network.presets import PIP_CERT, pip_preset, preset, url_rule


def fake_run(outputs: dict[str, str]):
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        key = next(k for k in outputs if k in " ".join(argv))
        return outputs[key]
    return run, calls


def test_a_configured_mirror_is_allowed_and_handed_to_the_sandbox(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    run, calls = fake_run({"config list": (
        "global.index-url='https://mirror.corp.test:8443/simple'\n"
        "global.extra-index-url='file:///opt/wheels https://extra.corp.test/simple'\n"
        f"global.cert='{ca}'\n")})
    found = pip_preset(run)
    assert found.hosts == ["mirror.corp.test:8443", "extra.corp.test"]
    assert found.env == {"PIP_INDEX_URL": "https://mirror.corp.test:8443/simple",
                         "PIP_EXTRA_INDEX_URL": "https://extra.corp.test/simple",
                         "PIP_CERT": PIP_CERT}
    assert found.files == {PIP_CERT: str(ca.resolve())}
    assert len(calls) == 1  # pip's own default was not needed


def test_without_an_index_url_pip_itself_names_its_default():
    run, calls = fake_run({"config list": "global.find-links='/opt/wheels'\n",
                           "-c": "https://index.example.test/simple\nfiles.example.test\n"})
    found = pip_preset(run)
    assert found.hosts == ["index.example.test", "files.example.test"]
    assert found.env == {} and "PyPI" in calls[1][-1]


def test_the_environment_wins_over_the_files():
    run, _ = fake_run({"config list": ("global.index-url='https://file.test/simple'\n"
                                       ":env:.index-url='https://env.test/simple'\n")})
    assert pip_preset(run).env["PIP_INDEX_URL"] == "https://env.test/simple"


def test_github_and_unknown_presets():
    assert "github.com" in preset("github").hosts
    with pytest.raises(ConfigError, match="no network preset 'pipy'"):
        preset("pipy")


def test_url_rules():
    assert url_rule("https://a.test/simple") == "a.test"
    assert url_rule("http://a.test:8080/") == "a.test:8080"
    assert url_rule("https://[fd00::1]:8443/x") == "[fd00::1]:8443"
    assert url_rule("file:///opt/pypi/simple") == ""


def test_npm_takes_the_registry_npm_is_configured_with():
    import shutil

    from executor.network.presets import npm_preset

    run, calls = fake_run({"config get registry": "https://npm.corp.test:4873/\n"})
    if shutil.which("npm") is None:
        with pytest.raises(ConfigError, match="npm is not installed here"):
            npm_preset(run)
        return
    found = npm_preset(run)
    assert found.hosts == ["npm.corp.test:4873"]
    assert found.env == {"NPM_CONFIG_REGISTRY": "https://npm.corp.test:4873/"}
    assert calls[0][1:] == ["config", "get", "registry"]


def test_credentials_in_an_index_url_stay_on_the_host():
    """Red-team round 25: `PIP_INDEX_URL` carried the person's index token into the sandbox,
    where the model read it with `env`."""
    run, _ = fake_run({"config list": (
        "global.index-url='https://ci-user:S3CR3T@mirror.corp.test/simple'\n"
        "global.extra-index-url='https://tok@extra.corp.test/simple'\n")})
    found = pip_preset(run)
    assert found.env == {"PIP_INDEX_URL": "https://mirror.corp.test/simple",
                         "PIP_EXTRA_INDEX_URL": "https://extra.corp.test/simple"}
    assert found.hosts == ["mirror.corp.test", "extra.corp.test"]


def test_pip_and_npm_run_with_nothing_of_the_callers_directory(tmp_path: Path, monkeypatch):
    """Red-team round 25: `python -m pip` put the current directory (usually the project)
    first on its path and ran the project's `pip/__main__.py` on the host; npm read the
    project's `.npmrc` and its registry became an allowed host."""
    import sys

    from executor.network import presets

    project = tmp_path / "proj"
    (project / "pip").mkdir(parents=True)
    (project / "pip" / "__init__.py").write_text("")
    (project / "pip" / "__main__.py").write_text(
        "print(\"global.index-url='https://evil.invalid/simple'\")\n")
    (project / ".npmrc").write_text("registry=http://127.0.0.1:18099/\n")
    bin_dir = tmp_path / "bin"  # an npm that reads the .npmrc of where it runs, as npm does
    bin_dir.mkdir()
    (bin_dir / "npm").write_text("#!/bin/sh\nsed -n 's/^registry=//p' .npmrc 2>/dev/null || "
                                 "echo https://registry.example.test/\n")
    (bin_dir / "npm").chmod(0o755)
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.chdir(project)
    assert "evil.invalid" not in presets.preset("pypi").hosts
    assert presets.preset("npm").hosts == ["registry.example.test"]
