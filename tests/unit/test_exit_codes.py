"""Every exit code of the error tree is documented, and named at the end of `--help`."""

from __future__ import annotations

import re
from pathlib import Path

from executor import errors
from executor.cli import EPILOG

DOC = Path(__file__).resolve().parents[2] / "docs" / "EXIT_CODES.md"


def codes() -> dict[str, int]:
    return {name: cls.exit_code for name, cls in vars(errors).items()
            if isinstance(cls, type) and issubclass(cls, errors.SandboxAgentError)}


def test_every_error_class_is_in_the_exit_code_table():
    table = DOC.read_text()
    for name, code in codes().items():
        assert re.search(rf"^\| {code} \|.*`{name}`", table, re.M), (name, code)


def test_the_help_epilog_names_the_workspace_codes():
    for code in ("15 engine cannot see the root", "60-64", "61 conflict", "62 project too big",
                 "63 apply or undo declined", "64 undo could not restore"):
        assert code in EPILOG, code


def _codes_named(text: str) -> set[int]:
    """Every code a text names: `12`, a range `10-16`, a pair `40/41`."""
    named: set[int] = set()
    for first, sep, last in re.findall(r"(?<![\d.,])(\d+)(?:([-/])(\d+))?(?![\d.,%])", text):
        named.update(range(int(first), int(last) + 1) if sep == "-" else
                     {int(first), int(last)} if sep == "/" else {int(first)})
    return named


def test_the_help_epilog_names_every_documented_code_and_no_other():
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", DOC.read_text(), re.M)}
    epilog = EPILOG.split(" See docs/")[0]
    assert 30 in documented and 130 in documented
    assert _codes_named(epilog) == documented
