"""Review findings read from text, GitHub escaping, the SARIF builder, the user config reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.config import load_settings
from executor.errors import ConfigError
from executor.review import Finding, ReviewReport, parse_answer
from executor.review_formats import escape_data, escape_property, github_annotations, to_sarif_log
from executor.runner import Runner


def test_findings_are_read_from_a_json_block_in_the_answer() -> None:
    text = ('Here.\n```json\n{"summary": "S", "findings": [{"file": "/workspace/a.py:3", '
            '"severity": "critical", "title": "T"}, {"severity": "low"}]}\n```')
    summary, findings, source = parse_answer(text)
    assert (summary, source) == ("S", "json")
    assert findings == [Finding(file="a.py", line=3, severity="high", title="T")]


@pytest.mark.parametrize("line", [
    "- src/app.py:2 high: add() subtracts. Use +.",
    "1. **high** `src/app.py:2` - add() subtracts. Use +.",
    "* [HIGH] src/app.py:2: add() subtracts. Use +.",
])
def test_findings_are_read_from_lines_of_text(line: str) -> None:
    summary, findings, source = parse_answer(f"Summary.\n\n{line}")
    assert (summary, source) == ("Summary.", "text")
    assert findings == [Finding(file="src/app.py", line=2, severity="high",
                                title="add() subtracts.", body="Use +.")]


def test_an_answer_without_findings_is_the_summary() -> None:
    assert parse_answer("  Looks good.\n") == ("Looks good.", [], "none")


def test_github_escaping_follows_the_toolkit() -> None:
    assert escape_data("100%\r\n::x") == "100%25%0D%0A::x"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    report = ReviewReport(status="ok", root="/r", findings=[
        Finding(file="a,b.py", severity="medium", title="t:1", body="")])
    assert github_annotations(report) == ["::warning file=a%2Cb.py,title=medium%3A t%3A1::t:1"]


def test_sarif_log_structure() -> None:
    report = ReviewReport(status="ok", root="/r", findings=[
        Finding(file="a.py", severity="low", title="t")])
    log = to_sarif_log(report).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert log["version"] == "2.1.0" and set(log) == {"$schema", "version", "runs"}
    [result] = log["runs"][0]["results"]
    assert result["level"] == "note" and "region" not in result["locations"][0][
        "physicalLocation"]


def test_user_config_unknown_key_names_file_and_line(_private_state: Path) -> None:
    config = _private_state / "config"
    config.mkdir()
    (config / "config.toml").write_text('model = "m"\n\nmax_turn = 3\n')
    with pytest.raises(ConfigError, match=r"config\.toml:3: unknown key 'max_turn'"):
        load_settings()


def test_precedence_flags_env_config_defaults(_private_state: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = _private_state / "config"
    config.mkdir()
    (config / "config.toml").write_text('model = "c"\nmax_turns = 7\ntimeout = 9\n')
    monkeypatch.setenv("SANDBOX_AGENT_MAX_TURNS", "8")
    settings = load_settings({"timeout": 10})
    assert (settings.model, settings.max_turns, settings.timeout) == ("c", 8, 10)
    assert load_settings().max_retries == 2  # untouched: the default


def test_a_user_config_inside_the_project_is_refused(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    (root / "dotfiles").mkdir(parents=True)
    (root / "dotfiles" / "config.toml").write_text('host = "http://127.0.0.1:1"\n')
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG_DIR", str(root / "dotfiles"))
    with pytest.raises(ConfigError, match=r"your config file .* is inside the project root"):
        Runner.build(root)
