"""Shell analysis: what a command line runs, checked against the parse and against real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.shell import (
    MAX_CONTINUATIONS,
    WRAPPERS,
    ShellAnalysis,
    analyze,
    normal_form,
)


def argvs(analysis: ShellAnalysis) -> list[tuple[str, ...]]:
    return [command.argv for command in analysis.commands]


def whys(command: str) -> list[str]:
    return [u.why for u in analyze(command).unresolved]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("rm x;&|`$(){}[]<>'\"\\\n#*?=-!~\0\ud800é")),
               max_size=40))
def test_any_text_is_analysed_without_error(text: str) -> None:
    analysis = analyze(text)
    assert analysis.single <= analysis.resolved  # one plain command is always resolved


# ---------------------------------------------------------------------------- every simple command


@pytest.mark.parametrize(
    "command",
    [
        "ls | rm y", "ls && rm y", "ls || rm y", "ls; rm y", "ls & rm y", "ls\nrm y", "! rm y",
        "(rm y)", "{ rm y; }", "if true; then rm y; fi", "if false; then :; elif rm y; then :; fi",
        "if false; then :; else rm y; fi", "while rm y; do :; done", "until false; do rm y; done",
        "for f in x; do rm y; done", "for ((;;)); do rm y; done", "case a in a) rm y;; esac",
        "f() { rm y; }", "function f { rm y; }", "echo $(rm y)", "echo `rm y`",
        'echo "$(rm y)"', "cat <(rm y)", "tee >(rm y)", "echo ${x:-$(rm y)}",
        'echo "${x:=$(rm y)}"', "x=$(rm y)", "export x=$(rm y)", "a=(1 $(rm y))",
        "cat <<EOF\n$(rm y)\nEOF", "cat <<EOF | cat\na ${x:-$(rm y)}\nEOF",
        "echo $(( $(rm y) ))", "[[ -n $(rm y) ]]", "ls > $(rm y)", "cat <<< $(rm y)",
        "echo $(echo $(rm y))",
    ],
)
def test_finds_every_simple_command(command: str) -> None:
    assert ("rm", "y") in argvs(analyze(command)), analyze(command)


def test_a_quoted_here_document_body_is_text() -> None:
    analysis = analyze("cat <<'EOF'\n$(rm y) `rm z`\nEOF")
    assert argvs(analysis) == [("cat",)] and analysis.resolved


def test_words_are_resolved_like_bash() -> None:
    [command] = analyze("""\\rm "a b" 'c d' e\\ f "g\\"h" $'\\x72\\n' "$x"y /bin/rm""").commands
    assert command.argv == ("rm", "a b", "c d", "e f", 'g"h', "r\n", '"$x"y', "/bin/rm")
    assert [w.literal for w in command.words] == [True] * 6 + [False, True]
    assert command.program == "rm"
    assert analyze("/usr/bin/git push").commands[0].program == "git"


@pytest.mark.parametrize(
    ("word", "may_be_option"),
    [("-rf", True), ("x", False), ('"$x"', True), ("$x", True), ("./*.py", False), ("*", True),
     ('./"$x"', False), ("./$x", True), ("-{r,f}", True)],
)
def test_what_a_runtime_word_could_become(word: str, may_be_option: bool) -> None:
    [command] = analyze(f"rm {word}").commands
    assert command.words[1].may_be_option is may_be_option


# ---------------------------------------------------------------------------- unresolved


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("eval rm x", "eval runs its arguments as shell code"),
        (". ./env.sh", "runs the commands in a file"),
        ("source env.sh", "runs the commands in a file"),
        ("trap 'rm x' EXIT", "trap keeps a string"),
        ("alias ls=rm", "alias"),
        ("$(echo rm) x", "program name `$(echo rm)` is only known when it runs"),
        ("`echo rm` x", "is only known when it runs"),
        ("a=rm; $a x", "program name `$a`"),
        ('"$a" x', "program name"),
        ("rm${IFS}x", "program name `rm${IFS}x`"),
        ("r? x", "program name `r?`"),
        ("r{m,} x", "program name `r{m,}`"),
        ("sh -c 'rm x'", "sh runs shell code"),
        ("bash -lc 'rm x'", "bash runs shell code"),
        ("bash script.sh", "bash runs shell code"),
        ("echo rm x | dash", "dash runs shell code"),
        ("busybox rm x", "busybox runs another command"),
        ("find . -name x -exec rm {} +", "find -exec"),
        ("find . -okdir rm {} ;", "find -exec"),
        ("find $dirs", "find -exec"),
        ("uv run rm x", "uv run runs another command"),
        ("echo $((x))", "arithmetic on `x`"),
        ("for ((i=0; i<3; i++)); do :; done", "arithmetic on"),
        ("[[ $n -gt 3 ]]", "arithmetic on `$n`"),
        ("echo ${a[i]}", "arithmetic on `i`"),
        ("echo ${s:n}", "arithmetic on `n`"),
        ("let n=1", "let evaluates arithmetic"),
        ("printf -v 'a[$(rm x)]' y", "printf evaluates the subscript of a name"),
        ("unset 'a[`rm x`]'", "unset evaluates the subscript"),
        ("[[ -v 'a[$(rm x)]' ]]", "a test evaluates the subscript"),
        ("cat <<EOF\n`rm x`\nEOF", "backtick substitution the parser read as text"),
        ('echo "${x:-`rm x`}"', "backtick substitution the parser read as text"),
        ("echo 'unterminated", "cannot parse"),
        ("rm x &&", "cannot parse"),
        ("<\nrm -rf /", "bash ends a command at a newline"),
    ],
)
def test_unresolved_reasons(command: str, why: str) -> None:
    analysis = analyze(command)
    assert not analysis.resolved and not analysis.single
    assert any(why in reason for reason in whys(command)), analysis.unresolved
    assert all(u.fix for u in analysis.unresolved)


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_every_wrapper_running_a_command_is_unresolved(wrapper: str) -> None:
    assert f"{wrapper} runs another command" in " ".join(whys(f"{wrapper} -x 5 rm x"))


@pytest.mark.parametrize(
    "command",
    ["ls -la", "python3 -m pytest -q", "git status", "cat a | grep b", "[[ -f x ]] && echo y",
     "echo $((1+2))", "for f in *.py; do echo $f; done", "grep -rm 3 x .", "command -v rg",
     "env", "time", "[[ $? -ne 0 ]] || echo $(($# + 1))", "bash --version", "find . -name '*.py'",
     "find \"$d\" -type f", "cat <<EOF\nhello $USER\nEOF", "echo ${a[0]} ${a[@]} ${s:1:2}",
     "uv pip list", "export A=1 B", "unset A", "printf '%s' '[x]'", "grep '[$(]' f"],
)
def test_ordinary_commands_are_resolved(command: str) -> None:
    assert analyze(command).resolved, analyze(command).unresolved


def test_single_means_one_plain_simple_command() -> None:
    assert analyze("  ls -la  ").single and analyze("ls $HOME *.py").single
    for command in ("ls; ", "ls &", "ls | x", "ls > out", "A=1 ls", "ls $(x)", "ls # c",
                    "ls\nx", "eval ls", "(ls)"):
        assert not analyze(command).single, command


# ---------------------------------------------------------------------------- continuations


def test_a_line_continuation_joins_the_word() -> None:
    analysis = analyze("r\\\nm x")
    assert argvs(analysis) == [("rm", "x")] and analysis.joined == "rm x" and analysis.resolved


def test_an_escaped_backslash_before_a_newline_ends_the_command() -> None:
    assert argvs(analyze("echo a\\\\\nrm x")) == [("echo", "a\\"), ("rm", "x")]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo 'a\\\nb'", [("echo", "a\\\nb")]),  # single quotes keep it
        ("echo $'a\\\nb'", [("echo", "a\\\nb")]),
        ('echo "a\\\nb"', [("echo", "ab")]),  # double quotes do not
        ("echo a # c \\\nrm x", [("echo", "a"), ("rm", "x")]),  # nor does a comment continue
        ("cat <<'E'\nr\\\nm\nE", [("cat",)]),
        ("l\\\ns \\\n-la", [("ls", "-la")]),
    ],
)
def test_continuations_are_joined_where_bash_joins_them(
    command: str, expected: list[tuple[str, ...]]
) -> None:
    assert argvs(analyze(command)) == expected


def test_too_many_continuations_are_unresolved() -> None:
    analysis = analyze("echo " + "a\\\n" * (MAX_CONTINUATIONS + 1))
    assert any("line continuations" in u.why for u in analysis.unresolved)


# One file per call: the two sides of a pipeline run at once.
_RECORDER = "echo() { printf '%s\\0' \"$@\" > \"$(mktemp -p \"$RECORD\")\"; }\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    "command",
    [
        "ec\\\nho a\\\\\necho b", 'echo "x\\\ny" z', "echo 'x\\\ny'", "echo a # c \\\necho b",
        "echo $'\\x41\\tB' \\e\\c\\h\\o", '\\echo "a b" c\\ d "e\\"f" \'g\'h', "echo a\\\\\\\nb",
        "echo 1; { echo 2 | echo 3; } && (echo 4)", "echo \"$(echo inner)\" done",
        "echo \"$(echo a\\\nb)\"", "cat <<E\n$(echo in heredoc)\nE",
    ],
)
def test_literal_words_match_what_bash_runs(command: str, tmp_path: Path) -> None:
    """Differential check: bash runs `command` with `echo` recording each call's argv."""
    record = tmp_path / "record"
    record.mkdir()
    subprocess.run(["bash", "-c", _RECORDER + command], capture_output=True, check=True,
                   env={"RECORD": str(record), "PATH": os.environ["PATH"]}, cwd=tmp_path)
    ran = Counter(("echo", *f.read_bytes().decode().split("\0")[:-1]) for f in record.iterdir())
    echoes = [c for c in analyze(command).commands if c.program == "echo"]
    assert len(echoes) == sum(ran.values()), (echoes, ran)
    assert Counter(("echo", *c.argv[1:]) for c in echoes if c.literal) <= ran, (echoes, ran)


# ---------------------------------------------------------------------------- normal forms


@pytest.mark.parametrize(
    ("command", "normal"),
    [
        ("rm --recursive --force x", "rm -r -f x"), ("rm -Rf x", "rm -r -f x"),
        ("rm --rec --forc x", "rm -r -f x"), ("rm -- -rf", "rm -rf"),
        ("git -C . -c a=b --no-pager push -f origin", "git push --force origin"),
        ("git --git-dir=.git --work-tree . push", "git push"),
        ("/usr/bin/git push --force-with-lease=main", "git push --force-with-lease"),
        ("grep -rm 3 x .", "grep -r -m 3 x ."),
    ],
)
def test_normal_form(command: str, normal: str) -> None:
    assert normal_form(analyze(command).commands[0]) == normal


def test_importing_the_cli_does_not_load_the_parser() -> None:
    code = ("import sys; from executor.cli import main; sys.argv = ['sandbox-agent', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('loaded' if 'tree_sitter' in sys.modules else 'lazy')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["sandbox-agent 0.1.0", "lazy"]


def test_each_command_is_shown_as_written_with_its_redirections() -> None:
    command = "x=1 cat <<'EOF' > out.txt\nrm -rf /\nEOF\necho a\u00a0b 2>&1 | tee -a log; r\\\nm -f y"
    assert [c.shown for c in analyze(command).commands] == [
        "x=1 cat <<'EOF' > out.txt", "echo a\u00a0b 2>&1", "tee -a log", "rm -f y"]


CRASHERS = ["{\U0010fffd}", "echo {\U000e0000,a}", "echo {12..3\U000fea04}", "x; {\U0008d28f",
            "r{\\\n\U0010fffd"]  # the last one is `{` and the character once the line is joined


def test_a_brace_before_a_far_codepoint_fails_closed_without_reaching_the_parser() -> None:
    # tree-sitter-bash's `{1..9}` scanner passes these to C's isdigit, which reads outside its
    # table: parsed, they crash the process most of the time, so each runs in a child, many times
    code = ("import sys\nfrom executor.shell import analyze\n"
            "for _ in range(20):\n"
            "    for c in sys.argv[1:]:\n"
            "        u = analyze(c + '\\nrm -rf /').unresolved\n"
            "        assert len(u) == 1 and 'cannot read safely' in u[0].why, (c, u)\n"
            "print('held')\n")
    done = subprocess.run([sys.executable, "-c", code, *CRASHERS], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "held"), done.stderr[-2000:]


def test_far_codepoints_elsewhere_are_still_parsed() -> None:
    assert argvs(analyze("echo '\U0010fffd' {1..3} \U000e0000{a,b}")) == [
        ("echo", "\U0010fffd", "{1..3}", "\U000e0000{a,b}")]
