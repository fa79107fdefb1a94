"""The everyday tasks `bench_agent.py` gives the agent, each with a judge of its real effect.

Two kinds, phrased the way people phrase them:

- one-step: `create` a file with given behaviour, `answer` a question by reading, `list` the
  project, `run` something and report, `search` for where something is;
- multi-step: `edit` (read a named file, then change part of it and keep the rest working) and
  `find-edit` (find where something is, then change it and keep the project working).

Each task is in the `dev` half (look at its failures, tune against it) or the `check` half (run
only to confirm that a change generalises). A judge gets the project root after the run and the
agent's answer, and returns None on success or why the task failed. Code is judged by running
it — in a throwaway container (`Check.python`), never on the host — not by reading it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

Kind = Literal["create", "answer", "list", "run", "search", "edit", "find-edit"]
Split = Literal["dev", "check"]
ONE_STEP: tuple[Kind, ...] = ("create", "answer", "list", "run", "search")
MULTI_STEP: tuple[Kind, ...] = ("edit", "find-edit")


class Check(Protocol):
    """What a judge may do with the project after the run."""

    root: Path
    answer: str

    def python(self, code: str) -> tuple[int, str]:
        """Run `python3 -c code` in a throwaway container on a read-only copy of the root."""
        ...


Judge = Callable[[Check], str | None]


@dataclass(frozen=True)
class Task:
    """One request in a fresh project, and how to tell whether it was really done."""

    name: str
    kind: Kind
    split: Split
    ask: str
    files: dict[str, str]
    judge: Judge


def src(text: str) -> str:
    """A file's text written indented in this module."""
    return textwrap.dedent(text).lstrip("\n")


# --- judges ------------------------------------------------------------------------------------


def answer_has(*needles: str | tuple[str, ...]) -> Judge:
    """The answer mentions every needle (a tuple: any one of its spellings), ignoring case."""

    def judge(check: Check) -> str | None:
        text = check.answer.lower()
        for needle in needles:
            options = needle if isinstance(needle, tuple) else (needle,)
            if not any(o.lower() in text for o in options):
                return f"answer lacks {' or '.join(map(repr, options))}"
        return None

    return judge


def python_ok(code: str) -> Judge:
    """`code` (asserts against the project's modules) runs without error in the project."""

    def judge(check: Check) -> str | None:
        status, output = check.python(src(code))
        last = output.strip().splitlines()[-1:] or [f"exit status {status}"]
        return None if status == 0 else f"check failed: {last[0][:200]}"

    return judge


def runs_printing(script: str, *expected: str) -> Judge:
    """`python3 script` exits 0 and prints every expected string."""
    code = f"""
        import runpy, io, contextlib
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            runpy.run_path({script!r}, run_name="__main__")
        text = out.getvalue()
        for want in {list(expected)!r}:
            assert want in text, f"{{want!r}} not in output {{text!r}}"
        """
    return python_ok(code)


def file_lacks(path: str, *needles: str) -> Judge:
    """`path` exists and contains none of the needles."""

    def judge(check: Check) -> str | None:
        target = check.root / path
        if not target.is_file():
            return f"{path} is missing"
        text = target.read_text(errors="replace")
        found = [n for n in needles if n in text]
        return f"{path} still contains {found}" if found else None

    return judge


def all_of(*judges: Judge) -> Judge:
    """Every judge passes; the first failure is the reason."""

    def judge(check: Check) -> str | None:
        for one in judges:
            reason = one(check)
            if reason:
                return reason
        return None

    return judge


# --- projects shared by several tasks ----------------------------------------------------------

CALC = {
    "calc.py": src('''
        """Arithmetic helpers."""


        def add(a, b):
            """Return the sum of a and b."""
            return a + b


        def subtract(a, b):
            """Return a minus b."""
            return a - b
        '''),
    "test_calc.py": src("""
        import unittest

        from calc import add, subtract


        class CalcTest(unittest.TestCase):
            def test_add(self):
                self.assertEqual(add(2, 3), 5)

            def test_subtract(self):
                self.assertEqual(subtract(5, 3), 2)


        if __name__ == "__main__":
            unittest.main()
        """),
    "README.md": "# calc\n\nSmall arithmetic helpers. Run the tests with `python3 test_calc.py`.\n",
}

WEBAPP = {
    "app.py": src("""
        from config import HOST, PORT
        from users import load_users


        def main():
            users = load_users("data/users.csv")
            print(f"serving {len(users)} users on {HOST}:{PORT}")


        if __name__ == "__main__":
            main()
        """),
    "config.py": src("""
        HOST = "127.0.0.1"
        PORT = 8731
        TIMEOUT_SECONDS = 30
        LOG_LEVEL = "DEBUG"
        """),
    "users.py": src("""
        import csv


        def load_users(path):
            # TODO: skip users whose email is empty
            with open(path, newline="") as f:
                return list(csv.DictReader(f))


        def user_names(users):
            return [u["name"] for u in users]
        """),
    "data/users.csv": "name,email\nada,ada@example.org\nlinus,linus@example.org\n",
    "requirements.txt": "requests==2.32.3\n",
    "README.md": "# webapp\n\nA tiny app. Start it with `python3 app.py`.\n",
}

SHOP = {
    "shop/__init__.py": '__version__ = "1.2.0"\n',
    "shop/billing.py": src("""
        def calc_total(prices, tax_rate=0.2):
            subtotal = sum(prices)
            return round(subtotal * (1 + tax_rate), 2)
        """),
    "shop/cart.py": src("""
        from shop.billing import calc_total


        class Cart:
            def __init__(self):
                self.items = {}

            def add(self, name, price):
                self.items[name] = price

            def total(self):
                return calc_total(list(self.items.values()))
        """),
    "main.py": src("""
        from shop.cart import Cart

        cart = Cart()
        cart.add("pen", 1.5)
        cart.add("book", 10.0)
        print("total:", cart.total())
        """),
}


def with_files(base: dict[str, str], **extra: str) -> dict[str, str]:
    """`base` plus files given as keyword arguments (`__` in a name stands for `/`)."""
    return {**base, **{k.replace("__", "/"): v for k, v in extra.items()}}


# --- the tasks ---------------------------------------------------------------------------------

TASKS: list[Task] = [
    # ---- dev: one-step
    Task(
        "create-fizzbuzz", "create", "dev",
        "Create fizzbuzz.py that prints the numbers from 1 to 15, one per line, but Fizz for "
        "multiples of 3, Buzz for multiples of 5 and FizzBuzz for multiples of both.",
        {},
        python_ok("""
            import subprocess, sys
            out = subprocess.run([sys.executable, "fizzbuzz.py"], capture_output=True,
                                 text=True, check=True).stdout.split()
            want = ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11",
                    "Fizz", "13", "14", "FizzBuzz"]
            assert out == want, out
            """),
    ),
    Task(
        "create-palindrome", "create", "dev",
        "write a function is_palindrome(s) in text_utils.py that returns True when s reads "
        "the same backwards, ignoring upper/lower case",
        dict(CALC),
        python_ok("""
            from text_utils import is_palindrome
            assert is_palindrome("Level") and is_palindrome("abba") and is_palindrome("")
            assert not is_palindrome("python")
            """),
    ),
    Task(
        "answer-port", "answer", "dev",
        "Which port does this app listen on?",
        dict(WEBAPP),
        answer_has("8731"),
    ),
    Task(
        "list-files", "list", "dev",
        "What files are in this project?",
        dict(WEBAPP),
        answer_has("app.py", "config.py", "users.py", "users.csv", "requirements.txt",
                   "README"),
    ),
    Task(
        "run-script", "run", "dev",
        "Run total.py and tell me what it prints.",
        {"total.py": "numbers = [3, 41, 17, 99]\nprint(sum(n * n for n in numbers))\n"},
        answer_has("11780"),
    ),
    Task(
        "run-tests", "run", "dev",
        "Run the tests in test_words.py. Which test fails?",
        {
            "words.py": src("""
                def shout(text):
                    return text.upper() + "!"


                def whisper(text):
                    return text.upper() + "..."
                """),
            "test_words.py": src("""
                import unittest

                from words import shout, whisper


                class WordsTest(unittest.TestCase):
                    def test_shout(self):
                        self.assertEqual(shout("hi"), "HI!")

                    def test_whisper(self):
                        self.assertEqual(whisper("hi"), "hi...")


                if __name__ == "__main__":
                    unittest.main()
                """),
        },
        answer_has("whisper"),
    ),
    Task(
        "search-definition", "search", "dev",
        "In which file is load_users defined?",
        dict(WEBAPP),
        answer_has("users.py"),
    ),
    Task(
        "search-todo", "search", "dev",
        "Is there a TODO left anywhere in the code? Where?",
        dict(WEBAPP),
        answer_has("users.py"),
    ),
    Task(
        "create-gitignore", "create", "dev",
        "Add a .gitignore that ignores __pycache__ directories and .venv",
        dict(CALC),
        python_ok("""
            text = open(".gitignore").read()
            assert "__pycache__" in text and ".venv" in text, text
            assert open("calc.py").read().startswith('\"\"\"Arithmetic helpers.')
            """),
    ),
    # ---- dev: multi-step
    Task(
        "edit-add-function", "edit", "dev",
        "Add a function multiply(a, b) to calc.py that returns a times b. Keep the existing "
        "functions.",
        dict(CALC),
        all_of(
            python_ok("""
                import calc
                assert calc.multiply(6, 7) == 42
                assert calc.add(2, 3) == 5 and calc.subtract(5, 3) == 2
                """),
            runs_printing("test_calc.py"),
        ),
    ),
    Task(
        "edit-greeting", "edit", "dev",
        "greet.py says Hello. Make it say Hi instead.",
        {
            "greet.py": src("""
                def greet(name):
                    return "Hello, " + name + "!"


                def farewell(name):
                    return "Goodbye, " + name + "."


                if __name__ == "__main__":
                    print(greet("world"))
                    print(farewell("world"))
                """),
        },
        all_of(
            runs_printing("greet.py", "Hi, world!", "Goodbye, world."),
            file_lacks("greet.py", "Hello"),
        ),
    ),
    Task(
        "edit-fix-empty", "edit", "dev",
        "average() in stats.py crashes on an empty list. Make it return 0 for an empty list.",
        {
            "stats.py": src("""
                def average(values):
                    return sum(values) / len(values)


                def spread(values):
                    return max(values) - min(values)
                """),
        },
        python_ok("""
            from stats import average, spread
            assert average([]) == 0
            assert average([1, 2, 3]) == 2
            assert spread([4, 1, 9]) == 8
            """),
    ),
    Task(
        "find-timeout", "find-edit", "dev",
        "The app's timeout is 30 seconds. Change it to 60.",
        dict(WEBAPP),
        python_ok("""
            import config
            assert config.TIMEOUT_SECONDS == 60, config.TIMEOUT_SECONDS
            assert config.PORT == 8731 and config.HOST == "127.0.0.1"
            assert config.LOG_LEVEL == "DEBUG"
            import app
            """),
    ),
    Task(
        "find-rename", "find-edit", "dev",
        "Rename the function calc_total to compute_total everywhere in the project.",
        dict(SHOP),
        all_of(
            runs_printing("main.py", "total: 13.8"),
            python_ok("""
                import shop.billing
                assert shop.billing.compute_total([10.0]) == 12.0
                assert not hasattr(shop.billing, "calc_total")
                """),
        ),
    ),
    Task(
        "find-typo", "find-edit", "dev",
        "Somewhere in the project 'recieve' is misspelled. Fix it.",
        {
            "mailbox.py": src("""
                class Mailbox:
                    def __init__(self):
                        self.messages = []

                    def put(self, message):
                        self.messages.append(message)
                        print("You will recieve a notification.")

                    def count(self):
                        return len(self.messages)


                if __name__ == "__main__":
                    box = Mailbox()
                    box.put("hello")
                    print(box.count())
                """),
            "README.md": "# mailbox\n\nKeeps messages.\n",
        },
        all_of(
            file_lacks("mailbox.py", "recieve"),
            runs_printing("mailbox.py", "You will receive a notification.", "1"),
        ),
    ),
    # ---- check: one-step
    Task(
        "create-count-lines", "create", "check",
        "Make a script count_lines.py that prints how many lines data.txt has.",
        {"data.txt": "".join(f"line {i}\n" for i in range(1, 13))},
        runs_printing("count_lines.py", "12"),
    ),
    Task(
        "create-temperature", "create", "check",
        "I need temperature.py with a function c_to_f(c) that converts Celsius to Fahrenheit.",
        {},
        python_ok("""
            from temperature import c_to_f
            assert c_to_f(0) == 32 and c_to_f(100) == 212 and round(c_to_f(-40)) == -40
            """),
    ),
    Task(
        "answer-python-version", "answer", "check",
        "What Python version does this project require?",
        {
            "pyproject.toml": src("""
                [project]
                name = "weather"
                version = "0.4.1"
                requires-python = ">=3.10"
                dependencies = ["httpx"]
                """),
            "weather.py": "def forecast(city):\n    return f'sunny in {city}'\n",
        },
        answer_has("3.10"),
    ),
    Task(
        "answer-default", "answer", "check",
        "what name does greet() use when it is called without one?",
        {
            "greeter.py": src("""
                def greet(name="stranger"):
                    return f"Good day, {name}."
                """),
        },
        answer_has("stranger"),
    ),
    Task(
        "list-everything", "list", "check",
        "Show me everything that's in this project.",
        {
            "src/app.py": "print('app')\n",
            "docs/guide.md": "# Guide\n",
            "Makefile": "run:\n\tpython3 src/app.py\n",
            "setup.cfg": "[metadata]\nname = app\n",
        },
        answer_has("app.py", "guide.md", "Makefile", "setup.cfg"),
    ),
    Task(
        "run-output", "run", "check",
        "Run report.py. What's the average it reports?",
        {
            "report.py": src("""
                scores = [72, 85, 90, 66, 97]
                print("students:", len(scores))
                print("average:", sum(scores) / len(scores))
                """),
        },
        answer_has("82"),
    ),
    Task(
        "run-python-version", "run", "check",
        "Which version of Python is installed in the sandbox?",
        {},
        answer_has("3.11"),
    ),
    Task(
        "search-db-url", "search", "check",
        "Which file has the database URL in it?",
        {
            "main.py": "from store import connect\n\nconnect()\n",
            "store.py": "from settings import DATABASE_URL\n\n\ndef connect():\n"
                        "    return DATABASE_URL\n",
            "settings.py": 'DATABASE_URL = "postgres://db.internal:5432/shop"\nDEBUG = False\n',
        },
        answer_has("settings.py"),
    ),
    Task(
        "search-caller", "search", "check",
        "Where is send_email called?",
        {
            "mailer.py": "def send_email(to, body):\n    return f'to {to}: {body}'\n",
            "notify.py": src("""
                from mailer import send_email


                def notify_signup(user):
                    return send_email(user, "welcome!")
                """),
            "cli.py": "import notify\n\nprint(notify.notify_signup('ada'))\n",
        },
        answer_has("notify.py"),
    ),
    # ---- check: multi-step
    Task(
        "edit-add-method", "edit", "check",
        "Add a remove(name) method to the Inventory class in inventory.py that removes that "
        "item.",
        {
            "inventory.py": src("""
                class Inventory:
                    def __init__(self):
                        self.items = {}

                    def add(self, name, count=1):
                        self.items[name] = self.items.get(name, 0) + count

                    def count(self, name):
                        return self.items.get(name, 0)
                """),
        },
        python_ok("""
            from inventory import Inventory
            inv = Inventory()
            inv.add("apple", 3)
            inv.add("pear")
            inv.remove("apple")
            assert inv.count("apple") == 0 and inv.count("pear") == 1
            """),
    ),
    Task(
        "edit-port", "edit", "check",
        "change the default port in server.py from 8000 to 9000",
        {
            "server.py": src("""
                import sys

                DEFAULT_HOST = "0.0.0.0"
                DEFAULT_PORT = 8000


                def address(argv):
                    port = int(argv[1]) if len(argv) > 1 else DEFAULT_PORT
                    return f"{DEFAULT_HOST}:{port}"


                if __name__ == "__main__":
                    print(address(sys.argv))
                """),
        },
        python_ok("""
            import server
            assert server.DEFAULT_PORT == 9000
            assert server.address(["x"]) == "0.0.0.0:9000"
            assert server.address(["x", "81"]) == "0.0.0.0:81"
            """),
    ),
    Task(
        "edit-fix-formula", "edit", "check",
        "The fahrenheit_to_celsius function in convert.py gives wrong results. Fix it.",
        {
            "convert.py": src("""
                def fahrenheit_to_celsius(f):
                    return (f - 32) * 9 / 5


                def km_to_miles(km):
                    return km * 0.621371
                """),
        },
        python_ok("""
            from convert import fahrenheit_to_celsius, km_to_miles
            assert abs(fahrenheit_to_celsius(212) - 100) < 1e-9
            assert abs(fahrenheit_to_celsius(32)) < 1e-9
            assert abs(km_to_miles(10) - 6.21371) < 1e-9
            """),
    ),
    Task(
        "find-version", "find-edit", "check",
        "Bump the project's version from 1.2.0 to 1.3.0.",
        dict(SHOP),
        all_of(
            python_ok("""
                import shop
                assert shop.__version__ == "1.3.0"
                """),
            runs_printing("main.py", "total: 13.8"),
        ),
    ),
    Task(
        "find-log-level", "find-edit", "check",
        "The log level is set to DEBUG somewhere. Set it to INFO.",
        dict(WEBAPP),
        python_ok("""
            import config
            assert config.LOG_LEVEL == "INFO", config.LOG_LEVEL
            assert config.PORT == 8731 and config.TIMEOUT_SECONDS == 30
            import app
            """),
    ),
    Task(
        "find-divide-zero", "find-edit", "check",
        "The function that divides two numbers should raise a ValueError when the divisor "
        "is zero. Please add that.",
        {
            "mathops/__init__.py": "",
            "mathops/basic.py": src("""
                def add(a, b):
                    return a + b


                def ratio(a, b):
                    return a / b
                """),
            "mathops/power.py": "def square(x):\n    return x * x\n",
        },
        python_ok("""
            from mathops.basic import add, ratio
            assert ratio(6, 3) == 2 and add(1, 2) == 3
            try:
                ratio(1, 0)
            except ValueError:
                pass
            else:
                raise AssertionError("no ValueError")
            """),
    ),
]
