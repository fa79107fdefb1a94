"""How good `review` is at finding a planted defect: recall, located findings, false alarms.

    python benchmarks/bench_review.py [-k NAME] [--variants on,off] [--json FILE]
                                      [-- extra review flags, e.g. --provider ollama --model X]

Each case is a small git repository whose last change (left uncommitted) plants one defect of
a kind a reviewer should catch — an off-by-one, an injection, a swallowed error, a secret — or,
for the clean cases, makes a correct change. `sandbox-agent review --diff-base HEAD --format
json` runs on it through the real CLI (default provider: embedded), once per variant:

    on   the default skills (the bundled `review-checklist` skill in the prompt)
    off  `--skills-exclude review-checklist`

and the report is judged by what it says, not how: a case is **found** when a finding names
the defect's file and a line within `SLACK` of the defect, **named** when it only names the
file. On a clean case any `high` finding is a false alarm. Findings on other files count as
noise. Variants run interleaved, case by case, so machine load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import CLI, load

SLACK = 3
TIMEOUT = 900
VARIANTS = {"on": [], "off": ["--skills-exclude", "review-checklist"]}


@dataclass(frozen=True)
class Case:
    """A repository at `before`, changed to `after`; the defect (if any) at `file`:`line`."""

    name: str
    before: dict[str, str]
    after: dict[str, str]
    file: str = ""
    line: int = 0  # 1-based, in `after`; 0: a clean change

    @property
    def clean(self) -> bool:
        return not self.file


def _at(text: str, marker: str) -> int:
    """The 1-based line of `text` holding `marker`."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


_SUM_AFTER = '''def total(prices):
    """The sum of all prices."""
    result = 0
    for i in range(1, len(prices)):
        result += prices[i]
    return result


def mean(prices):
    return total(prices) / len(prices) if prices else 0.0
'''
_SHELL_AFTER = '''import subprocess


def list_dir(path):
    """The names in `path` (a directory name the user typed)."""
    done = subprocess.run(f"ls -1 {path}", shell=True, capture_output=True, text=True)
    return done.stdout.splitlines()
'''
_SQL_AFTER = '''import sqlite3


def find_user(db: sqlite3.Connection, name: str):
    """The user row called `name` (from the login form), or None."""
    cursor = db.execute(f"SELECT id, name FROM users WHERE name = '{name}'")
    return cursor.fetchone()
'''
_SWALLOW_AFTER = '''import json


def load_settings(path):
    """The settings in the JSON file at `path`."""
    try:
        with open(path) as stream:
            return json.load(stream)
    except Exception:
        pass
'''
_ADULT_AFTER = '''ADULT_AGE = 18


def is_adult(age: int) -> bool:
    """People aged 18 and over are adults."""
    return age > ADULT_AGE
'''
_DEFAULT_AFTER = '''def add_tag(tag, tags=[]):
    """A new list of tags with `tag` added to `tags`."""
    tags.append(tag)
    return tags
'''
_SECRET_AFTER = '''import os

API_URL = "https://api.example.test/v1"
API_KEY = "sk_live_51HxQeP2kV9tQ8rM3nB7yZ0aLwD4"


def headers():
    return {"Authorization": f"Bearer {API_KEY}", "User-Agent": os.environ.get("UA", "app")}
'''
_PATH_AFTER = '''import os

UPLOADS = "/srv/uploads"


def read_upload(filename: str) -> bytes:
    """The bytes of an uploaded file; `filename` comes from the request URL."""
    with open(os.path.join(UPLOADS, filename), "rb") as stream:
        return stream.read()
'''
_ADMIN_AFTER = '''class Forbidden(Exception):
    pass


def delete_account(user, account, store):
    """Only an admin may delete an account."""
    if not user.is_admin:
        store.delete(account)
        return
    raise Forbidden(user.name)
'''
_CLOSE_AFTER = '''def count_lines(path):
    """How many lines the text file at `path` has."""
    stream = open(path)
    count = sum(1 for _ in stream)
    return count


def longest_line(path):
    with open(path) as stream:
        return max((len(line) for line in stream), default=0)
'''
_CLEAN_AFTER = '''def slugify(title: str) -> str:
    """A URL-friendly form of `title`: lower case, words joined by dashes."""
    words = [w for w in title.lower().split() if w.isalnum()]
    return "-".join(words)


def test_slugify():
    assert slugify("Hello World") == "hello-world"
    assert slugify("") == ""
'''
_CLEAN2_AFTER = '''from dataclasses import dataclass


@dataclass
class Point:
    """A point in the plane."""

    x: float
    y: float

    def scaled(self, factor: float) -> "Point":
        """This point with both coordinates multiplied by `factor`."""
        return Point(self.x * factor, self.y * factor)
'''

CASES = [
    Case("off-by-one", {"shop/prices.py": "def total(prices):\n    return sum(prices)\n"},
         {"shop/prices.py": _SUM_AFTER}, "shop/prices.py", _at(_SUM_AFTER, "range(1,")),
    Case("shell-injection", {"tools/files.py": "import os\n\n\ndef list_dir(path):\n"
                                               "    return sorted(os.listdir(path))\n"},
         {"tools/files.py": _SHELL_AFTER}, "tools/files.py", _at(_SHELL_AFTER, "shell=True")),
    Case("sql-injection", {"app/users.py": "import sqlite3\n"},
         {"app/users.py": _SQL_AFTER}, "app/users.py", _at(_SQL_AFTER, "SELECT")),
    Case("swallowed-error", {"app/settings.py": "import json\n"},
         {"app/settings.py": _SWALLOW_AFTER}, "app/settings.py",
         _at(_SWALLOW_AFTER, "except Exception")),
    Case("wrong-comparison", {"rules.py": "ADULT_AGE = 18\n"}, {"rules.py": _ADULT_AFTER},
         "rules.py", _at(_ADULT_AFTER, "age > ADULT_AGE")),
    Case("mutable-default", {"tags.py": "\n"}, {"tags.py": _DEFAULT_AFTER}, "tags.py",
         _at(_DEFAULT_AFTER, "tags=[]")),
    Case("hard-coded-secret", {"client.py": "import os\n\nAPI_URL = \"https://api.example.test/v1\"\n"},
         {"client.py": _SECRET_AFTER}, "client.py", _at(_SECRET_AFTER, "API_KEY =")),
    Case("path-traversal", {"files.py": "import os\n\nUPLOADS = \"/srv/uploads\"\n"},
         {"files.py": _PATH_AFTER}, "files.py", _at(_PATH_AFTER, "os.path.join")),
    Case("inverted-check", {"accounts.py": "class Forbidden(Exception):\n    pass\n"},
         {"accounts.py": _ADMIN_AFTER}, "accounts.py", _at(_ADMIN_AFTER, "store.delete")),
    Case("file-not-closed", {"text.py": _CLOSE_AFTER.split("\n\n\n")[1]},
         {"text.py": _CLOSE_AFTER}, "text.py", _at(_CLOSE_AFTER, "stream = open(path)")),
    Case("clean-slugify", {"slug.py": "def slugify(title):\n    return title\n"},
         {"slug.py": _CLEAN_AFTER}),
    Case("clean-dataclass", {"geometry.py": "from dataclasses import dataclass\n"},
         {"geometry.py": _CLEAN2_AFTER}),
]


@dataclass
class Outcome:
    """One review of one case, judged."""

    case: str
    variant: str
    clean: bool
    found: bool
    named: bool
    false_alarm: bool
    findings: int
    noise: int
    seconds: float
    exit_code: int
    error: str = ""
    report: dict[str, Any] = field(default_factory=dict)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=b@b", "-c", "user.name=b", *args], cwd=root,
                   check=True, capture_output=True)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def run_case(case: Case, variant: str, extra: Sequence[str]) -> Outcome:
    """Make the repository, review its uncommitted change, judge the report."""
    with tempfile.TemporaryDirectory(prefix=f"bench-review-{case.name}-") as tmp:
        root, state = Path(tmp) / "project", Path(tmp) / "state"
        root.mkdir()
        _git(root, "init", "-q")
        _write(root, case.before)
        _git(root, "add", ".")
        _git(root, "commit", "-q", "-m", "before")
        _write(root, case.after)
        argv = [CLI, "review", "--root", str(root), "--diff-base", "HEAD", "--format", "json",
                *(extra if any(a.startswith("--provider") for a in extra)
                  else ["--provider", "embedded", *extra]), *VARIANTS[variant]]
        env = {**os.environ, "SANDBOX_AGENT_STATE_DIR": str(state / "state"),
               "SANDBOX_AGENT_CONFIG_DIR": str(state / "config")}
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT,
                                  stdin=subprocess.DEVNULL, check=False)
            code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            code, out, err = -1, "", "timed out"
        seconds = round(time.monotonic() - started, 1)
    try:
        report = json.loads(out)
    except ValueError:
        return Outcome(case.name, variant, case.clean, False, False, False, 0, 0, seconds, code,
                       error=(err.strip().splitlines() or ["no report"])[-1][:200])
    return judge(case, variant, report, seconds, code)


def judge(case: Case, variant: str, report: dict[str, Any], seconds: float,
          code: int) -> Outcome:
    """Found (file and line within SLACK), named (file), false alarm, noise."""
    findings = report.get("findings") or []
    on_file = [f for f in findings if _same_file(str(f.get("file") or ""), case.file)]
    found = any(isinstance(f.get("line"), int) and abs(f["line"] - case.line) <= SLACK
                for f in on_file) if not case.clean else False
    false_alarm = case.clean and any(f.get("severity") == "high" for f in findings)
    return Outcome(case.name, variant, case.clean, found, bool(on_file) and not case.clean,
                   false_alarm, len(findings), len(findings) - len(on_file), seconds, code,
                   report=report)


def _same_file(reported: str, expected: str) -> bool:
    reported = reported.strip().removeprefix("./").removeprefix("/project/")
    return bool(expected) and (reported == expected or reported.endswith("/" + expected))


def summary(outcomes: Sequence[Outcome], variant: str) -> str:
    mine = [o for o in outcomes if o.variant == variant]
    buggy, clean = [o for o in mine if not o.clean], [o for o in mine if o.clean]
    times = [o.seconds for o in mine] or [0.0]
    return (f"  {variant:<4} found {sum(o.found for o in buggy)}/{len(buggy)} "
            f"(file named {sum(o.named for o in buggy)}/{len(buggy)}), "
            f"false alarms {sum(o.false_alarm for o in clean)}/{len(clean)}, "
            f"noise {sum(o.noise for o in buggy)} findings elsewhere, "
            f"no report {sum(o.exit_code != 0 or bool(o.error) for o in mine)}, "
            f"median {statistics.median(times):.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="names", action="append", default=[])
    parser.add_argument("--variants", default="on,off")
    parser.add_argument("--json", type=Path)
    parser.add_argument("extra", nargs="*", help="extra `review` flags (after --)")
    options = parser.parse_args(argv)
    variants = [v for v in options.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variant(s): {', '.join(sorted(unknown))}")
    cases = [c for c in CASES if not options.names or any(n in c.name for n in options.names)]
    flags = " ".join(options.extra) or "(defaults)"
    print(f"{len(cases)} cases x {variants} · review flags: {flags} · load {load()}", flush=True)
    outcomes = []
    for case in cases:
        for variant in variants:
            o = run_case(case, variant, options.extra)
            outcomes.append(o)
            verdict = ("false alarm" if o.false_alarm else "ok") if o.clean else \
                ("found" if o.found else "named" if o.named else "missed")
            print(f"{case.name:<18} {variant:<4} {verdict:<11} {o.findings} finding(s) "
                  f"{o.seconds:6.1f} s  exit {o.exit_code} {o.error}", flush=True)
    print(f"load {load()}")
    for variant in variants:
        print(summary(outcomes, variant))
    if options.json:
        options.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
