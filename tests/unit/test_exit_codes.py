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
