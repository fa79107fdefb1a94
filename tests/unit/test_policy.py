"""The policy: rule order, shell matching, flags, fail-closed, explain, file errors, CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import assume, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from executor.cli import policy as policy_cli
from executor.errors import ConfigError, PolicyFileError
from executor.policy import (
    Decision,
    Policy,
    PolicyOverrides,
    ToolInfo,
    explain,
    load_policy,
    parse_policy,
    shell_of,
    starts_with_command,
)
from executor.state import config_home
from executor.tools.base import RiskLevel
from executor.tools.builtin import EditFile, ReadFile, RunShellCommand, WriteFile
from executor.trust import read_project_file, trust

SHELL = RunShellCommand()


def policy(text: str, **flags: Any) -> Policy:
    return parse_policy(text, path="/p/policy.toml", overrides=PolicyOverrides(**flags))


def shell(p: Policy, command: str, *, interactive: bool = True) -> Decision:
    return p.decide(SHELL, {"command": command}, interactive=interactive)


DENY_RM = """
[[rules]]
tool = "run_shell_command"
prefix = "rm"
decision = "deny"
reason = "no deletes"
"""

ALLOW_LS = """
[[rules]]
prefix = ["ls", "git status"]
decision = "allow"
"""


# ---------------------------------------------------------------------------- rules


def test_first_matching_rule_wins() -> None:
    allow_first = policy(
        '[[rules]]\nprefix = "git"\ndecision = "allow"\n'
        '[[rules]]\nprefix = "git push"\ndecision = "deny"\n'
    )
    deny_first = policy(
        '[[rules]]\nprefix = "git push"\ndecision = "deny"\n'
        '[[rules]]\nprefix = "git"\ndecision = "allow"\n'
    )
    first = shell(allow_first, "git push origin")
    assert (first.decision, first.rule) == ("allow", "policy.toml:1 [[rules]] #1")
    second = shell(deny_first, "git push origin")
    assert (second.decision, second.rule) == ("deny", "policy.toml:1 [[rules]] #1")
    assert shell(deny_first, "git log").rule == "policy.toml:4 [[rules]] #2"


def test_rule_ids_carry_line_and_name() -> None:
    p = policy('# header\n\n[[rules]]\nname = "no-net"\ntool = "fetch_*"\ndecision = "deny"\n')
    decision = p.decide(ToolInfo("fetch_url"), {}, interactive=True)
    assert decision.rule == "policy.toml:3 [[rules]] #1 (no-net)"
    assert decision.reason == "denied by policy.toml:3 [[rules]] #1 (no-net)"


def test_prefix_matches_whole_words_regex_searches() -> None:
    by_prefix = policy(DENY_RM)
    assert shell(by_prefix, "rm -rf build").decision == "deny"
    assert shell(by_prefix, "rm").decision == "deny"
    assert shell(by_prefix, "rmdir build").decision == "ask"  # default: high risk
    by_regex = policy('[[rules]]\nregex = "rm\\\\s+-(r|f)+"\ndecision = "deny"\n')
    assert shell(by_regex, "find . | xargs rm -rf").decision == "deny"
    assert shell(by_regex, "rm x").decision == "ask"
    assert starts_with_command("./scripts/build.sh", "./scripts/")  # ends in "/": no boundary


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf x", "  rm   -rf x", "ls; rm -rf x", "ls && rm x", "false || rm x", "ls | rm x",
        "ls & rm x", "ls\nrm x", "echo $(rm x)", "echo `rm x`", "(rm x)", "{ rm x; }",
        "FOO=1 rm x", "/bin/rm x", "'rm' x", '"r"m x',
    ],
)
def test_deny_prefix_catches_every_simple_command(command: str) -> None:
    decision = shell(policy(DENY_RM), command)
    assert (decision.decision, decision.reason) == ("deny", "no deletes"), decision


# These were denied with the rule's own reason when wrappers were peeled off by name; a
# wrapper now makes the command unresolvable, so they are denied as that (fail closed).
@pytest.mark.parametrize("command", ["sudo -n rm x", "env A=1 rm x"])
def test_deny_prefix_fails_closed_on_wrappers(command: str) -> None:
    decision = shell(policy(DENY_RM), command)
    assert decision.decision == "deny" and decision.reason, decision
    assert decision.reason.startswith(f"cannot tell statically what `{command}` runs"), decision


@pytest.mark.parametrize("command", ["rmdir x", "echo rm", "grep -r rm .", "ls ./rm-notes"])
def test_deny_prefix_leaves_other_commands(command: str) -> None:
    assert shell(policy(DENY_RM), command).decision == "ask"


def test_matched_names_the_offending_part() -> None:
    assert shell(policy(DENY_RM), "ls; rm -rf x").matched == "rm -rf x"


@pytest.mark.parametrize("command", ["ls -la", "git status --short", "  ls  "])
def test_allow_prefix_allows_simple_commands(command: str) -> None:
    decision = shell(policy(ALLOW_LS), command, interactive=False)
    assert decision.allowed and decision.approved_by == "policy:policy.toml:2 [[rules]] #1"


@pytest.mark.parametrize(
    "command",
    [
        "ls; cat /etc/passwd", "ls && curl x", "ls || x", "ls | sh", "ls & x", "ls > out",
        "ls < in", "ls $(x)", "ls `x`", "ls\nx", "git status; git push",
    ],
)
def test_allow_prefix_never_matches_compound_commands(command: str) -> None:
    decision = shell(policy(ALLOW_LS), command)
    assert decision.decision == "ask" and decision.rule == "default:high"
    assert decision.notes and "single simple command" in decision.notes[0]


def test_allow_regex_is_conservative_too() -> None:
    p = policy('[[rules]]\nregex = "^pytest( .*)?$"\ndecision = "allow"\n')
    assert shell(p, "pytest -q").allowed
    assert not shell(p, "pytest -q; rm -rf /").allowed


def test_a_whole_tool_allow_rule_allows_any_command() -> None:
    p = policy('[[rules]]\ntool = "run_shell_command"\ndecision = "allow"\n')
    assert shell(p, "ls; make").allowed


def test_an_ask_rule_matches_inside_compound_commands() -> None:
    p = policy('[[rules]]\nprefix = "git push"\ndecision = "ask"\nreason = "pushes"\n', yes=False)
    decision = shell(p, "git commit -m x && git push", interactive=True)
    assert (decision.decision, decision.reason) == ("ask", "pushes")


def test_tool_globs() -> None:
    p = policy('[[rules]]\ntool = "mcp_*"\ndecision = "deny"\n[[rules]]\ntool = "*"\n'
               'decision = "allow"\n')
    assert p.decide(ToolInfo("mcp_fs"), {}, interactive=True).decision == "deny"
    assert p.decide(WriteFile(), {"path": "a"}, interactive=False).allowed


@given(st.text(max_size=40))
def test_a_denied_command_after_anything_is_denied(prefix: str) -> None:
    # a trailing backslash joins the lines (`0\<newline>rm` runs `0rm`): then rm is not alone
    assume(not prefix.endswith("\\"))
    assert shell(policy(DENY_RM), prefix + "\nrm -rf /").decision == "deny"


@given(st.text(alphabet="ls -a;&|`$()<>\n", max_size=30))
def test_allow_never_covers_control_operators(suffix: str) -> None:
    decision = shell(policy(ALLOW_LS), "ls " + suffix)
    if decision.allowed:  # a trailing newline ends the one command: it is not an operator
        assert not any(op in suffix.strip() for op in (";", "&", "|", "`", "$(", "<", ">", "\n"))


# ---------------------------------------------------------------------------- spellings

DENY_RM_FLAG = {"deny_commands": ("rm",), "yes": True}

# The review's spellings of `rm x` that ran under `--deny-command rm --yes`: each is denied
# now, either because the parse finds `rm` or because it cannot tell (fail closed).
REVIEW_SPELLINGS = {
    "sh -c 'rm x'": "sh runs shell code",
    "if true; then rm x; fi": None,
    "eval rm x": "eval runs its arguments as shell code",
    "$(echo rm) x": "the program name `$(echo rm)` is only known when it runs",
    "a=rm; $a x": "the program name `$a` is only known when it runs",
    "nice -n 5 rm x": "nice runs another command",
    "timeout 5 rm x": "timeout runs another command",
    "env -u HOME rm x": "env runs another command",
    "rm${IFS}x": "the program name `rm${IFS}x` is only known when it runs",
    "r\\\nm x": None,
    "for f in x; do rm $f; done": None,
}


@pytest.mark.parametrize(("command", "why"), REVIEW_SPELLINGS.items())
def test_review_spellings_of_rm_are_denied(command: str, why: str | None) -> None:
    decision = shell(policy("", **DENY_RM_FLAG), command, interactive=False)
    assert (decision.decision, decision.rule) == ("deny", "flag --deny-command"), decision
    assert decision.reason is not None
    if why is None:  # resolved: the rule itself matched
        assert decision.reason == "commands starting with 'rm' are denied by --deny-command"
        assert decision.matched and decision.matched.startswith("rm ")
    else:  # unresolved: says why and how to rewrite it
        assert decision.reason.startswith("cannot tell statically what `"), decision.reason
        assert why in decision.reason and "so it was denied." in decision.reason
        assert "--deny-command" in decision.reason


def test_the_fail_closed_reason_reads_as_documented() -> None:
    decision = shell(policy("", **DENY_RM_FLAG), "eval rm x")
    assert decision.reason == (
        "cannot tell statically what `eval rm x` runs (eval runs its arguments as shell code); "
        "shell deny rules are set (--deny-command), so it was denied. Run the program directly."
    )


@pytest.mark.parametrize(
    "command",
    ["echo a\\\\\nrm x", "cat <<EOF\n$(rm y)\nEOF", "echo ${x:-$(rm y)}", "\\rm x", "'rm' x",
     "/bin/rm x", "$'\\x72m' x", "x() { rm y; }", "echo ok | (cd d && rm y)"],
)
def test_rm_anywhere_is_denied_with_the_rules_reason(command: str) -> None:
    decision = shell(policy(DENY_RM), command)
    assert (decision.decision, decision.reason) == ("deny", "no deletes"), decision


BENIGN = ["ls -la", "python3 -m pytest -q", "git status", "cat a | grep b", "[[ -f x ]] && echo y",
          "echo $((1+2))", "for f in *.py; do echo $f; done", "grep -rm 3 x .", "rmdir build",
          "echo rm", "git rm --cached x", "ls ./rm"]


@pytest.mark.parametrize("command", BENIGN)
def test_benign_commands_are_not_denied_by_an_rm_rule(command: str) -> None:
    decision = shell(policy(DENY_RM, **DENY_RM_FLAG), command, interactive=False)
    assert (decision.decision, decision.approved_by) == ("allow", "--yes"), decision


@pytest.mark.parametrize("command", ["ls -la", "python3 -m pytest -q", "git status", "  ls  "])
def test_benign_single_commands_are_allowed_by_allow_rules(command: str) -> None:
    allow = policy('[[rules]]\nprefix = ["ls", "git status", "python3 -m pytest"]\n'
                   'decision = "allow"\n' + DENY_RM)
    assert shell(allow, command, interactive=False).allowed


@pytest.mark.parametrize(
    ("command", "hit"),
    [
        ("git -C . push", True), ("git --no-pager -c a=b push origin", True),
        ("/usr/bin/git push -f", True), ("'git' \"push\"", True), ("git --git-dir=.git push", True),
        ("git pull", False), ("git log push", False), ("git commit -m push", False),
        ("echo git push", False),
    ],
)
def test_a_prefix_binds_the_spellings_of_git_push(command: str, hit: bool) -> None:
    decision = shell(policy("", deny_commands=("git push",)), command)
    assert (decision.decision == "deny") is hit, decision


@pytest.mark.parametrize(
    ("command", "hit"),
    [
        ("rm -rf x", True), ("rm -fr x", True), ("rm -r -f x", True), ("rm -Rf x", True),
        ("rm --recursive --force x", True), ("rm --rec --force x", True), ("rm -rfv x", True),
        ("rm -r x", False), ("rm x", False), ("rm -- -rf", False), ("rm ./-rf", False),
    ],
)
def test_a_prefix_binds_option_spellings(command: str, hit: bool) -> None:
    rules = policy('[[rules]]\nprefix = "rm -rf"\ndecision = "deny"\nreason = "no rm -rf"\n')
    decision = shell(rules, command)
    assert (decision.decision, decision.reason) == (("deny", "no rm -rf") if hit else
                                                    ("ask", decision.reason)), decision


@pytest.mark.parametrize(
    "command", ["rm $opts x", 'rm "$o" x', "rm * x", "rm -r $x", "git $sub", "git -C $d $s"]
)
def test_a_prefix_that_might_match_at_run_time_fails_closed(command: str) -> None:
    rules = policy('[[rules]]\nprefix = ["rm -rf", "git push"]\ndecision = "deny"\n')
    decision = shell(rules, command)
    assert decision.decision == "deny" and decision.reason, decision
    assert "is only known when it runs" in decision.reason
    assert decision.reason.endswith("Write the arguments out literally.")


@pytest.mark.parametrize("command", ["rm ./*.py", "rm ./\"$f\" x", "git status $x", "rm -r ./\"$x\""])
def test_runtime_words_that_cannot_change_the_match_do_not_deny(command: str) -> None:
    rules = policy('[[rules]]\nprefix = ["rm -rf", "git push"]\ndecision = "deny"\n')
    assert shell(rules, command).decision == "ask"


@pytest.mark.parametrize(
    ("regex", "command"),
    [
        ("git\\\\s+push", "git -C . push"), ("git\\\\s+push", "sh -c 'git push'"),
        ("rm\\\\s+-rf", "rm --recursive --force x"), ("rm\\\\s+-[a-zA-Z]*r", "rm -f -R x"),
        ("^rm x$", "\\rm 'x'"), ("curl .*\\\\| *sh", "curl -s x | sh"),
    ],
)
def test_a_regex_is_searched_in_every_spelling(regex: str, command: str) -> None:
    rules = policy(f'[[rules]]\nregex = "{regex}"\ndecision = "deny"\nreason = "no"\n')
    assert shell(rules, command).decision == "deny", (regex, command)


def test_unresolved_commands_pass_without_shell_deny_or_ask_rules() -> None:
    assert shell(policy(""), "eval rm x").rule == "default:high"
    whole_tool = policy('[[rules]]\ntool = "run_shell_command"\ndecision = "allow"\n' + DENY_RM)
    assert shell(whole_tool, "eval rm x").allowed  # the allow-all comes first: as for `rm x`


def test_an_ask_rule_asks_for_unresolved_commands() -> None:
    ask_push = '[[rules]]\nprefix = "git push"\ndecision = "ask"\n'
    then_allow = ask_push + '[[rules]]\ntool = "run_shell_command"\ndecision = "allow"\n'
    decision = shell(policy(then_allow), "sh -c 'git push'")
    assert decision.decision == "ask" and decision.rule == "policy.toml:1 [[rules]] #1"
    assert decision.reason and "so it needs approval" in decision.reason
    assert shell(policy(then_allow), "git status").allowed
    then_deny = policy(ask_push + DENY_RM)
    assert shell(then_deny, "eval x").decision == "deny"  # a deny rule further down wins
    closed = shell(policy(then_allow), "eval git push", interactive=False)
    assert closed.decision == "deny" and closed.fail_closed
    assert shell(policy(then_allow, yes=True), "eval git push").approved_by == "--yes"


def test_allow_rules_never_match_unresolved_commands() -> None:
    p = policy('[[rules]]\nprefix = ["eval", "timeout", "sh"]\ndecision = "allow"\n')
    for command in ("eval ls", "timeout 5 ls", "sh -c ls"):
        decision = shell(p, command)
        assert decision.decision == "ask" and decision.rule == "default:high", decision
        assert "cannot be resolved statically" in decision.notes[0]


@pytest.mark.parametrize(
    "command",
    ["PATH=/tmp/x ls", "ls -la\\ ; rm x", "/tmp/x/ls", "ls>x", "'ls' $(rm x)"],
)
def test_allow_prefixes_match_words_as_written(command: str) -> None:
    assert not shell(policy(ALLOW_LS), command).allowed, command


def test_allow_prefixes_do_not_normalise_options() -> None:
    p = policy('[[rules]]\nprefix = "git status"\ndecision = "allow"\n')
    assert shell(p, "git status -s").allowed and shell(p, "'git' status").allowed
    assert not shell(p, "git -c core.fsmonitor='rm x' status").allowed


# ---------------------------------------------------------------------------- defaults & flags


def test_builtin_defaults_follow_risk_and_approval() -> None:
    p = Policy()
    read = p.decide(ReadFile(), {"path": "a"}, interactive=False)
    assert (read.decision, read.rule, read.approved_by) == ("allow", "default:low", "default:low")
    assert p.evaluate(WriteFile(), {"path": "a"}).decision == "ask"
    assert p.evaluate(EditFile(), {"path": "a"}).rule == "default:medium"
    assert p.evaluate(SHELL, {"command": "ls"}).rule == "default:high"
    assert p.evaluate(ToolInfo("nuke", RiskLevel.CRITICAL), {}).decision == "deny"
    flagged = p.evaluate(ToolInfo("mail", RiskLevel.LOW, requires_approval=True), {})
    assert (flagged.decision, flagged.reason) == ("ask", "mail requires approval")


def test_file_defaults_override_builtin_ones() -> None:
    p = policy('[defaults]\nhigh = "deny"\nlow = "ask"\n')
    assert shell(p, "ls").decision == "deny"
    assert p.evaluate(ReadFile(), {}).decision == "ask"
    assert p.evaluate(WriteFile(), {}).decision == "ask"  # medium: still built in
    assert p.default_sources[RiskLevel.HIGH] == "policy.toml [defaults]"


def test_yes_approves_ask_but_never_deny() -> None:
    p = policy(DENY_RM, yes=True)
    assert shell(p, "rm -rf /", interactive=False).decision == "deny"
    approved = shell(p, "make", interactive=False)
    assert (approved.decision, approved.approved_by, approved.rule) == (
        "allow", "--yes", "default:high"
    )
    critical = p.decide(ToolInfo("nuke", RiskLevel.CRITICAL), {}, interactive=False)
    assert critical.decision == "deny"


def test_non_interactive_ask_fails_closed() -> None:
    p = Policy()
    asked = p.decide(WriteFile(), {"path": "a"}, interactive=True)
    assert asked.needs_approval and not asked.fail_closed
    denied = p.decide(WriteFile(), {"path": "a"}, interactive=False)
    assert denied.decision == "deny" and denied.fail_closed
    assert denied.reason and "non-interactive" in denied.reason and "--yes" in denied.reason
    assert p.evaluate(WriteFile(), {"path": "a"}).decision == "ask"  # the step before


def test_deny_flags_beat_file_rules() -> None:
    allow_all = '[[rules]]\ntool = "*"\ndecision = "allow"\n'
    by_tool = policy(allow_all, deny_tools=("write_file",), yes=True)
    assert by_tool.evaluate(WriteFile(), {}).rule == "flag --deny-tool"
    assert by_tool.evaluate(EditFile(), {}).allowed
    by_prefix = policy(allow_all, deny_prefixes=("mcp_",))
    assert by_prefix.evaluate(ToolInfo("mcp_shell"), {}).rule == "flag --deny-prefix"
    by_command = policy(allow_all, deny_commands=("git push",))
    denied = shell(by_command, "git add . && git  push -f")
    assert (denied.decision, denied.rule, denied.matched) == (
        "deny", "flag --deny-command", "git push -f"
    )
    assert shell(by_command, "git pull").allowed


def test_read_only_denies_tools_that_are_not_read_only_safe() -> None:
    p = policy('[[rules]]\ntool = "*"\ndecision = "allow"\n', read_only=True)
    for tool in (WriteFile(), EditFile(), SHELL):
        assert p.evaluate(tool, {"command": "ls"}).rule == "flag --read-only"
    assert p.evaluate(ReadFile(), {"path": "a"}).allowed


def test_approve_and_decline() -> None:
    asked = Policy().evaluate(WriteFile(), {})
    approved = asked.approve()
    assert (approved.decision, approved.approved_by, approved.rule) == (
        "allow", "user", "default:medium"
    )
    assert asked.decline().decision == "deny"
    with pytest.raises(ValueError):
        approved.approve()


# ---------------------------------------------------------------------------- explain


def test_explain_names_decision_rule_and_reason() -> None:
    p = policy(ALLOW_LS + '\n[[rules]]\nname = "no-rm"\nregex = "rm\\\\s+-rf"\n'
               'decision = "deny"\nreason = "no recursive deletes"\n')
    text = explain(p, SHELL, {"command": "ls; rm -rf /"})
    assert "decision:  deny" in text
    assert "rule:      policy.toml:6 [[rules]] #2 (no-rm) — tool run_shell_command, regex" in text
    assert "reason:    no recursive deletes" in text
    assert "matched:   rm -rf /" in text
    assert "skipped policy.toml:2 [[rules]] #1" in text
    assert "policy:    /p/policy.toml" in text


def test_explain_fail_closed_and_defaults() -> None:
    text = explain(Policy(), WriteFile(), {"path": "a"}, interactive=False)
    assert "decision:  deny (fail closed" in text
    assert "rule:      default:medium — from built-in" in text
    assert "approved:  --yes" in explain(Policy(overrides=PolicyOverrides(yes=True)), SHELL, {})


def test_explain_shows_the_parse() -> None:
    p = policy("", deny_commands=("rm",))
    text = explain(p, SHELL, {"command": "ls -la | eval rm x; echo \"$HOME\"/'a b'"})
    lines = text.splitlines()
    assert 'command 1: ls argv ["ls", "-la"]' in lines
    assert 'command 2: eval argv ["eval", "rm", "x"]' in lines
    assert 'command 3: echo argv ["echo", "\\"$HOME\\"/\'a b\'"]  (known only at run time: ' \
           '"$HOME"/\'a b\')' in lines
    assert ("unresolved: `eval rm x`: eval runs its arguments as shell code "
            "(fix: run the program directly)") in lines
    assert "decision:  deny" in lines and "rule:      flag --deny-command" in lines
    joined = explain(p, SHELL, {"command": "r\\\nm x"})
    assert "joined:    rm x  (line continuations joined)" in joined.splitlines()
    assert "matched:   rm x" in joined.splitlines()


# ---------------------------------------------------------------------------- files & errors


def error_of(text: str) -> str:
    with pytest.raises(PolicyFileError) as caught:
        parse_policy(text, path="/p/policy.toml")
    return caught.value.message


def test_bad_toml_names_the_line() -> None:
    message = error_of('[defaults]\nlow = "allow"\nhigh = = "ask"\n')
    assert message.startswith("/p/policy.toml:3: invalid TOML")


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[[rules]]\ntool = "x"\n\ndecision = "permit"\n', 4, "must be one of allow, ask, deny"),
        ('[[rules]]\ntool = "x"\ndecision = "deny"\n[[rules]]\nregex = "rm("\ndecision = "deny"\n',
         5, "invalid regex"),
        ('[defaults]\nlow = "allow"\nhuge = "deny"\n', 3, "unknown risk level 'huge'"),
        ('[defaults]\nlow = "yes"\n', 2, "[defaults] low: decision must be"),
        ('[[rules]]\ntool = "x"\ndecison = "deny"\n', 3, "unknown key 'decison'"),
        ('[[rules]]\ntool = "x"\n', 1, "missing decision"),
        ('[[rules]]\ndecision = "deny"\n', 1, "needs a tool"),
        ('[[rules]]\ntool = "write_file"\nprefix = "x"\ndecision = "deny"\n', 2,
         "tool must be run_shell_command"),
        ('[[rules]]\nprefix = "a"\nregex = "b"\ndecision = "deny"\n', 1, "either prefix or regex"),
        ('[[rules]]\nprefix = ""\ndecision = "deny"\n', 2, "prefix must be a non-empty string"),
        ('[[rules]]\ntool = "x"\ndecision = "deny"\nreason = 3\n', 4, "reason must be a string"),
        ('version = 2\n', 1, "unknown key 'version'"),
        ('rules = "x"\n', 1, "rules must be an array"),
    ],
)
def test_invalid_files_name_line_and_reason(text: str, line: int, reason: str) -> None:
    message = error_of(text)
    assert message.startswith(f"/p/policy.toml:{line}: "), message
    assert reason in message


def test_load_policy_finds_the_root_file(tmp_path: Path) -> None:
    assert load_policy(tmp_path).source == "built-in defaults"
    path = tmp_path / ".sandbox-agent" / "policy.toml"
    path.parent.mkdir()
    path.write_text(DENY_RM)
    loaded = load_policy(tmp_path, overrides=PolicyOverrides(yes=True))
    assert loaded.source.startswith(str(path)) and loaded.overrides.yes
    assert shell(loaded, "rm x").decision == "deny"  # an untrusted project may tighten
    with pytest.raises(PolicyFileError, match="not found"):
        load_policy(tmp_path, tmp_path / "missing.toml")


ALLOW_ALL = '[[rules]]\ntool = "*"\ndecision = "allow"\n'
WRITE = ToolInfo("write_file", RiskLevel.MEDIUM, requires_approval=True)


def test_a_project_policy_allows_nothing_until_the_person_trusts_it(tmp_path: Path) -> None:
    path = tmp_path / ".sandbox-agent" / "policy.toml"
    path.parent.mkdir()
    path.write_text(ALLOW_ALL + '[defaults]\nmedium = "allow"\n')
    untrusted = load_policy(tmp_path)
    assert untrusted.decide(WRITE, {"path": "a"}, interactive=False).decision == "deny"
    assert untrusted.notices and "not trusted" in untrusted.notices[0]
    trust(tmp_path, read_project_file(tmp_path, ".sandbox-agent/policy.toml"))
    trusted = load_policy(tmp_path)
    decision = trusted.decide(WRITE, {"path": "a"}, interactive=False)
    assert decision.decision == "allow" and decision.approved_by.startswith("policy:")
    assert not trusted.notices
    path.write_text(ALLOW_ALL + "# one more line\n")
    changed = load_policy(tmp_path)
    assert changed.decide(WRITE, {"path": "a"}, interactive=False).decision == "deny"
    assert "changed since you trusted it" in changed.notices[0]


def test_an_untrusted_ask_never_weakens_the_persons_deny(tmp_path: Path) -> None:
    user = config_home() / "policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[[rules]]\nprefix = "git push"\ndecision = "deny"\n'
                    '[[rules]]\nprefix = "git status"\ndecision = "allow"\n')
    project = tmp_path / ".sandbox-agent" / "policy.toml"
    project.parent.mkdir()
    project.write_text('[[rules]]\nprefix = "git"\ndecision = "ask"\n')
    policy = load_policy(tmp_path, overrides=PolicyOverrides(yes=True))
    assert shell(policy, "git push").decision == "deny"
    assert shell(policy, "git status").decision == "allow"  # ask, then --yes
    assert shell(policy, "git status").approved_by == "--yes"
    assert shell(load_policy(tmp_path), "git status").decision == "ask"


def test_the_persons_policy_and_a_named_file_apply_a_linked_project_policy_is_not_used(
        tmp_path: Path) -> None:
    user = config_home() / "policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[[rules]]\ntool = "write_file"\ndecision = "allow"\n')
    assert load_policy(tmp_path).decide(WRITE, {"path": "a"}, interactive=False).allowed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "policy.toml").write_text(ALLOW_ALL)
    (tmp_path / ".sandbox-agent").symlink_to(elsewhere)
    linked = load_policy(tmp_path)
    assert "not used" in linked.notices[0] and "elsewhere" not in linked.source
    named = load_policy(tmp_path, elsewhere / "policy.toml")
    assert str(elsewhere / "policy.toml") in named.source and not named.notices


def test_shell_of_parses_shell_calls_only() -> None:
    parsed = shell_of("run_shell_command", {"command": "A=1 /usr/bin/git  push && echo 'hi there'"})
    assert parsed is not None and not parsed.single and parsed.resolved
    assert [c.argv for c in parsed.commands] == [("/usr/bin/git", "push"), ("echo", "hi there")]
    assert shell_of("read_file", {"command": "ls"}) is None
    assert shell_of("run_shell_command", {"command": 3}) == shell_of("run_shell_command", {})


# ---------------------------------------------------------------------------- CLI


@pytest.fixture
def cli() -> Callable[..., Any]:
    app = typer.Typer()
    app.add_typer(policy_cli.app, name="policy")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["policy", *args])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".sandbox-agent").mkdir()
    (tmp_path / ".sandbox-agent" / "policy.toml").write_text(
        '[[rules]]\nname = "no-rm"\nregex = "rm\\\\s+-rf"\ndecision = "deny"\n'
        'reason = "no recursive deletes"\n'
    )
    return tmp_path


def test_cli_explain(cli: Callable[..., Any], project: Path) -> None:
    result = cli("explain", "--root", str(project), "--tool", "run_shell_command",
                 "--args", '{"command": "rm -rf /"}')
    assert result.exit_code == 0
    assert "decision:  deny" in result.stdout and "no recursive deletes" in result.stdout
    assert "policy.toml:1 [[rules]] #1 (no-rm)" in result.stdout


def test_cli_explain_flags_and_json(cli: Callable[..., Any], project: Path) -> None:
    args = ["explain", "--root", str(project), "--tool", "write_file", "--args", '{"path": "a"}']
    closed = json.loads(cli(*args, "--non-interactive", "--json").stdout)
    assert (closed["decision"], closed["fail_closed"]) == ("deny", True)
    assert json.loads(cli(*args, "--yes", "--json").stdout)["approved_by"] == "--yes"
    denied = json.loads(cli(*args, "--yes", "--deny-tool", "write_file", "--json").stdout)
    assert (denied["decision"], denied["rule"]) == ("deny", "flag --deny-tool")
    read_only = json.loads(cli(*args, "--read-only", "--json").stdout)
    assert read_only["rule"] == "flag --read-only"
    command = cli("explain", "--root", str(project), "--tool", "run_shell_command", "--args",
                  '{"command": "git push"}', "--deny-command", "git push", "--json")
    assert json.loads(command.stdout)["rule"] == "flag --deny-command"
    parsed = json.loads(cli("explain", "--root", str(project), "--tool", "run_shell_command",
                            "--args", '{"command": "timeout 5 rm x"}', "--json").stdout)
    assert parsed["shell"]["commands"][0]["argv"] == ["timeout", "5", "rm", "x"]
    assert parsed["shell"]["unresolved"][0]["why"].startswith("timeout runs another command")
    assert "shell" not in json.loads(cli(*args, "--json").stdout)


def test_cli_explain_custom_tools_need_a_risk(cli: Callable[..., Any], tmp_path: Path) -> None:
    unknown = cli("explain", "--root", str(tmp_path), "--tool", "deploy")
    assert unknown.exit_code == ConfigError.exit_code and "--risk" in unknown.output
    custom = cli("explain", "--root", str(tmp_path), "--tool", "deploy", "--risk", "critical")
    assert custom.exit_code == 0 and "default:critical" in custom.stdout
    prefixed = cli("explain", "--root", str(tmp_path), "--tool", "mcp_x", "--risk", "low",
                   "--deny-prefix", "mcp_")
    assert "flag --deny-prefix" in prefixed.stdout


def test_cli_user_errors(cli: Callable[..., Any], tmp_path: Path) -> None:
    bad_json = cli("explain", "--root", str(tmp_path), "--tool", "read_file", "--args", "{")
    assert bad_json.exit_code == 2 and "not valid JSON" in bad_json.output
    root = tmp_path / "proj"
    root.mkdir()
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text('[[rules]]\ntool = "x"\ndecision = "maybe"\n')
    result = cli("explain", "--root", str(root), "--policy", str(bad_file), "--tool", "x",
                 "--risk", "low")
    assert result.exit_code == PolicyFileError.exit_code == 3
    assert f"{bad_file}:3:" in result.output
    inside = root / "p.toml"  # a run refuses it (the sandbox could rewrite it): explain too
    inside.write_text('[[rules]]\ntool = "*"\ndecision = "allow"\n')
    refused = cli("show", "--root", str(root), "--policy", str(inside))
    assert refused.exit_code == 2 and "inside the project root" in refused.output


def test_cli_show_lists_rules_in_order(cli: Callable[..., Any], project: Path) -> None:
    result = cli("show", "--root", str(project), "--deny-tool", "write_file")
    assert result.exit_code == 0
    out = result.stdout
    positions = [out.index(s) for s in ("--deny-tool", "no-rm", "default:low", "default:critical")]
    assert positions == sorted(positions)


def test_a_catastrophic_regex_cannot_hang_the_controller() -> None:
    p = policy('[[rules]]\nregex = "^(a|aa)+$"\ndecision = "deny"\n'
               '[[rules]]\nregex = "^(b|bb)+$"\ndecision = "allow"\n')
    started = time.monotonic()
    assert shell(p, "a" * 60 + "!").decision == "deny"  # out of time: a deny rule matches
    assert shell(p, "b" * 60 + "!").decision == "ask"  # ... an allow rule does not
    assert time.monotonic() - started < 5


def test_a_user_policy_inside_the_project_is_not_used(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "dotfiles"
    (root / "sandbox-agent").mkdir(parents=True)
    (root / "sandbox-agent" / "policy.toml").write_text(ALLOW_ALL)
    monkeypatch.setenv("SANDBOX_AGENT_CONFIG_DIR", str(root / "sandbox-agent"))
    inside = load_policy(root)
    assert not inside.decide(WRITE, {"path": "a"}, interactive=False).allowed
    assert "inside the project" in inside.notices[0]
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    assert load_policy(elsewhere).decide(WRITE, {"path": "a"}, interactive=False).allowed


def test_auto_edit_approves_default_writes_and_nothing_else() -> None:
    p = policy('[[rules]]\ntool = "edit_file"\ndecision = "ask"\n', auto_edit=True)
    decided = p.decide(WriteFile(), {"path": "a.py"}, interactive=False)
    assert (decided.decision, decided.approved_by) == ("allow", "--auto-edit")
    assert p.decide(EditFile(), {"path": "a.py"}, interactive=True).decision == "ask"  # a rule's
    assert shell(p, "touch x").decision == "ask"  # commands still ask…
    assert shell(p, "touch x", interactive=False).decision == "deny"  # …and fail closed
    plain = policy("", auto_edit=True).decide(EditFile(), {"path": "a.py"}, interactive=False)
    assert (plain.decision, plain.approved_by) == ("allow", "--auto-edit")
