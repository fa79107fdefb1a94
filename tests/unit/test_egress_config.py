"""A run's egress decisions: flags, the user config, presets; nothing from the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.config import Settings
from executor.errors import ConfigError
from executor.network.deps import DEPS_DIR, deps_volume
from executor.network.egress import environment
from executor.network.session import egress_config, prompt_note


def test_no_host_allowed_means_no_network_at_all():
    assert egress_config(Settings(), [], []) is None
    assert environment(None) == {}


def test_flags_and_the_user_config_together_each_with_its_source(tmp_path: Path):
    settings = Settings(allow_hosts="a.test, *.b.test", egress_resolve={"a.test": "1.2.3.4"})
    config = egress_config(settings, ["c.test:8443"], [], tmp_path)
    assert config is not None
    assert [(h.text, h.source) for h in config.allow] == [
        ("c.test:8443", "--allow-host"), ("a.test", "config"), ("*.b.test", "config")]
    assert config.resolve == {"a.test": "1.2.3.4"}
    assert config.deps_volume == deps_volume(tmp_path)
    env = environment(config)
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"  # the sandbox's own servers stay its own
    assert env["PYTHONUSERBASE"] == f"{DEPS_DIR}/python"
    assert "c.test:8443" in prompt_note(config)


def test_read_only_runs_and_review_take_the_flags_only():
    settings = Settings(allow_hosts="a.test", network="github")
    assert egress_config(settings, [], [], from_config=False) is None
    only = egress_config(settings, ["c.test"], [], from_config=False)
    assert only is not None and [h.text for h in only.allow] == ["c.test"]


def test_an_allowed_loopback_sends_localhost_through_the_proxy_too():
    config = egress_config(Settings(), ["localhost:5432"], [])
    assert config is not None and "NO_PROXY" not in environment(config)


def test_a_bad_rule_or_preset_fails_before_anything_starts():
    with pytest.raises(ConfigError, match="not a host name: 'bad host' \\(--allow-host\\)"):
        egress_config(Settings(), ["bad host"], [])
    with pytest.raises(ConfigError, match="no network preset 'pipy'"):
        egress_config(Settings(), [], ["pipy"])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_persons_policy_allows_hosts_a_projects_never(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    from executor.policy import load_policy, user_policy_path

    root = tmp_path / "proj"
    table = '[network]\nallow = ["mirror.corp.test:8443"]\npresets = ["github"]\n'
    _write(user_policy_path(), table)
    _write(root / ".sandbox-agent" / "policy.toml", '[network]\nallow = ["evil.test"]\n')
    inside = _write(root / "named.toml", '[network]\nallow = ["evil-too.test"]\n')
    policy = load_policy(root)
    assert [text for text, _ in policy.network] == ["mirror.corp.test:8443", "preset:github"]
    config = egress_config(Settings(), [], [], policy=policy.network)
    assert config is not None
    sources = {h.text: h.source for h in config.allow}
    assert sources["mirror.corp.test:8443"].startswith("policy ")
    assert sources["github.com"] == "preset github" and "evil.test" not in sources
    named = load_policy(root, inside)
    assert "evil-too.test" not in [text for text, _ in named.network]
    assert any("is not used" in notice for notice in named.notices)
    outside = _write(tmp_path / "mine.toml", '[network]\nallow = ["mine.test"]\n')
    assert sorted(t for t, _ in load_policy(root, outside).network) == [
        "mine.test", "mirror.corp.test:8443", "preset:github"]  # the user's and the named
    from executor.policy import POLICY_FILE
    from executor.trust import read_project_file, trust

    project_file = read_project_file(root, POLICY_FILE.as_posix())
    assert project_file is not None
    trust(root, project_file)  # trusted for its rules; still no host
    assert "evil.test" not in [t for t, _ in load_policy(root).network]


def test_gc_drops_the_socket_dir_a_killed_run_left_never_through_a_link(tmp_path: Path):
    from executor.network.egress import drop_socket_dir

    left = tmp_path / "sandbox-agent-abc.egress"
    left.mkdir()
    (left / "proxy.sock").write_text("")
    drop_socket_dir(tmp_path, "sandbox-agent-abc")
    assert not left.exists()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "proxy.sock").write_text("keep")
    (tmp_path / "sandbox-agent-def.egress").symlink_to(target)
    drop_socket_dir(tmp_path, "sandbox-agent-def")
    drop_socket_dir(tmp_path, "../elsewhere")
    assert (target / "proxy.sock").read_text() == "keep"


def test_a_result_names_what_the_network_refused_during_its_call():
    from executor.messages import ToolResult
    from executor.network.notes import MAX_NOTES, NotedSandbox, Refusals
    from executor.network.proxy import Connection
    from tests.fakes.sandbox import FakeSandbox

    refusals = Refusals()
    refusals.add(Connection("before.test", 443, "CONNECT", reason="blocked: before"))
    def during(args: dict) -> ToolResult:  # a command whose connections were refused
        refusals.add(Connection("a.test", 443, "CONNECT", reason="blocked: a.test is not allowed"))
        refusals.add(Connection("ok.test", 443, "CONNECT", decision="allowed"))
        for n in range(MAX_NOTES):
            refusals.add(Connection(f"n{n}.test", 80, "GET", reason="blocked"))
        return ToolResult(ok=True, output="done\n")

    box = NotedSandbox(FakeSandbox({"run_shell_command": during}), refusals)
    with box:  # started and stopped through the wrapper
        result = box.call("run_shell_command", {"command": "curl ..."})
    assert result.output.splitlines() == [
        "done", "network: denied a.test:443: blocked: a.test is not allowed",
        *[f"network: denied n{n}.test:80: blocked" for n in range(MAX_NOTES - 1)],
        "network: 1 more connections refused"]
