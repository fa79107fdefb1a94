"""Shell deny rules through the real CLI: every spelling of `rm x` an outside review ran
under `--deny-command rm --yes` is denied, the file is still there, and the model is told why.

The stand-in model server asks for each command in turn; the real `sandbox-agent ask` runs
them (or not) in a real container; the test then looks at the project on the host and at
the tool results the model received.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docker.cli_support import ask, assert_ok, tool_exchanges
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

SPELLINGS = [
    "sh -c 'rm x'",
    "if true; then rm x; fi",
    "eval rm x",
    "$(echo rm) x",
    "a=rm; $a x",
    "nice -n 5 rm x",
    "timeout 5 rm x",
    "env -u HOME rm x",
    "rm${IFS}x",
    "r\\\nm x",
    "for f in x; do rm $f; done",
    "echo a\\\\\nrm x",  # an escaped backslash, then a newline: two commands
    "echo ${v:-$(rm x)}",
    "cat <<EOF\n$(rm x)\nEOF",
    # the second review: bash reads one harmless command, the sandbox's sh (dash) two
    "true &>/dev/null rm -rf x",
    "true &>/dev/null rm x",
    "ls |& rm x",
    "ls\r#; rm x",  # the third: CR is a blank to the parser, part of a word to dash
    # the parser's brace-range scanner reads outside a C table on these: the host crashed
    # (on each about half the time, so there are several)
    *(f"{{{chr(far)}}}; rm x" for far in (0x10FFFD, 0x1075D6, 0xFEA04, 0xDC5E8, 0xCEEB9)),
    "echo {1..\U000e0000}\nrm x",
]


def test_every_spelling_of_a_denied_command_is_denied(project: Path, model_server: ModelServer):
    (project / "x").write_text("keep\n")
    for command in SPELLINGS:
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "cat x && ls -la"})])
    model_server.reply("x survived.")

    done = ask(project, model_server, "ollama", "--deny-command", "rm", "--yes",
               "--max-turns", "40")

    assert_ok(done, "x survived.")
    assert (project / "x").read_text() == "keep\n"
    exchanges = tool_exchanges(model_server.last_chat)
    assert [args["command"] for _, args, _ in exchanges] == [*SPELLINGS, "cat x && ls -la"]
    for (_, args, result) in exchanges[:-1]:
        assert result.startswith("Denied: "), (args, result)
        why = result.removeprefix("Denied: ")
        assert why == "commands starting with 'rm' are denied by --deny-command" or (
            why.startswith("cannot tell statically what `") and "so it was denied." in why
        ), (args, result)
    control = exchanges[-1][2]  # the same run still executes what the rule does not cover
    assert control.startswith("exit_code: 0") and "keep" in control, control


def test_a_policy_file_prefix_binds_option_spellings(workdir: Path, project: Path,
                                                     model_server: ModelServer):
    (project / "build").mkdir()
    (project / "build" / "out.o").write_text("object\n")
    policy = workdir / "policy.toml"  # outside the project: the person's own file
    policy.write_text('[[rules]]\nname = "no rm -rf"\nprefix = "rm -rf"\ndecision = "deny"\n'
                      'reason = "recursive deletes are not allowed here"\n')
    denied = ["rm --recursive --force build", "rm -R -f build", "opts=-rf; rm $opts build"]
    for command in [*denied, "rm build/out.o"]:
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--policy", policy, "--yes")

    assert_ok(done, "Done.")
    assert (project / "build").is_dir()
    assert not (project / "build" / "out.o").exists()  # plain `rm FILE` was not covered
    results = [result for _, _, result in tool_exchanges(model_server.last_chat)]
    assert results[:2] == ["Denied: recursive deletes are not allowed here"] * 2
    assert results[2].startswith("Denied: cannot tell statically what `rm $opts build` runs")
    assert results[3].startswith("exit_code: 0"), results[3]
