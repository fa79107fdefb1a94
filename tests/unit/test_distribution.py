"""Every install line and package-index link in the repo names the distribution pyproject builds.

The console script is `sandbox-agent`, but a distribution of that name on the public index is an
unrelated project: an install line naming it would run a stranger's code next to the model key.
The only other names allowed after `pip install` are distributions pyproject.toml itself depends
on (the embedded model's parts, whose fix text names them).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import executor
from executor.models import embedded

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCANNED = ("README.md", "docs", "examples", "executor", "Makefile")
_INSTALL = re.compile(r"pip3?\s+install\b([^\n`]*)")
_STOP = re.compile(r"&&|\|\||\$\(|[;|),#]")
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?([=<>!~]=?[^\s]*)?$")
# A project page or simple-index page on a package index, whatever its host.
_INDEX_LINK = re.compile(r"https?://[^\s/\"'<>]+/(?:project|simple)/([A-Za-z0-9._-]+)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
_WITH_OUR_EXTRA = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\[(" + "|".join(EXTRAS) + r")\]")
"""`NAME[local]`, `NAME[otel]`…: a name given one of this project's extras is this project."""


def _specs() -> list[str]:
    project = PYPROJECT["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return specs


def _dependencies() -> set[str]:
    """What pyproject depends on, its references to itself (`NAME[otel]`) left out."""
    return {_canonical(re.split(r"[\s\[=<>!~;]", spec, maxsplit=1)[0]) for spec in _specs()
            if not _WITH_OUR_EXTRA.match(spec)}


def _files() -> list[Path]:
    found = []
    for name in SCANNED:
        path = REPO / name
        found += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [p for p in found if "__pycache__" not in p.parts and p.suffix not in {".pyc", ".gguf"}]


def names_after_pip_install(text: str) -> list[str]:
    """The requirement names each `pip install …` in `text` asks for (options, paths skipped)."""
    names = []
    for match in _INSTALL.finditer(text):
        args = _STOP.split(match.group(1), maxsplit=1)[0]
        for token in args.split():
            token = token.strip("'\"")
            if token.startswith(("-", ".")) or any(c in token for c in "/${}"):
                continue
            requirement = _REQUIREMENT.match(token)
            if requirement:
                names.append(_canonical(requirement.group(1)))
    return names


def _python_strings(text: str) -> str:
    """A module's string literals but its docstrings (prose): where its commands are."""
    tree = ast.parse(text)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts.append("".join(v.value if isinstance(v, ast.Constant) else "{}"
                                 for v in node.values))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings):
            parts.append(node.value)
    return "\n".join(parts)


def _markdown_code(text: str) -> str:
    """Fenced blocks and `inline code` of a Markdown text: its commands, not its prose."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return "\n".join([*fenced, *re.findall(r"`([^`\n]+)`", rest)])


def _command_text(path: Path, text: str) -> str:
    if path.suffix == ".py":
        return _python_strings(text)
    return _markdown_code(text) if path.suffix == ".md" else text


def _occurrences() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    installs, links = [], []
    for path in _files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        where = str(path.relative_to(REPO))
        commands = _command_text(path, text)
        installs += [(where, name) for name in names_after_pip_install(commands)]
        links += [(where, _canonical(name)) for name in _INDEX_LINK.findall(text)]
    return installs, links


def test_the_distribution_name_is_one_constant_matching_pyproject():
    assert PYPROJECT["project"]["name"] == executor.DISTRIBUTION
    assert _canonical(executor.DISTRIBUTION) != "sandbox-agent"
    assert PYPROJECT["project"]["scripts"] == {"sandbox-agent": "executor.cli:main"}
    fix = embedded.LOCAL_EXTRA_FIX
    assert fix == f"pip install '{executor.DISTRIBUTION}[local]'"


def test_every_install_line_names_this_distribution_or_one_it_depends_on():
    installs, _ = _occurrences()
    allowed = {_canonical(executor.DISTRIBUTION)} | _dependencies()
    strangers = [(where, name) for where, name in installs if name not in allowed]
    assert strangers == []
    # The scan sees the lines it must (else it would pass by finding nothing).
    ours = {where for where, name in installs if name == _canonical(executor.DISTRIBUTION)}
    assert {"examples/ci/github-actions.yml", "examples/ci/gitlab-ci.yml", "docs/MODELS.md",
            "docs/EXIT_CODES.md"} <= ours


def test_every_name_given_one_of_our_extras_is_this_distribution():
    named = [(str(path.relative_to(REPO)), _canonical(m.group(1))) for path in _files()
             for m in _WITH_OUR_EXTRA.finditer(_text(path))]
    named += [("pyproject.toml", _canonical(m.group(1))) for spec in _specs()
              if (m := _WITH_OUR_EXTRA.match(spec))]
    assert [(w, n) for w, n in named if n != _canonical(executor.DISTRIBUTION)] == []
    assert ("pyproject.toml", _canonical(executor.DISTRIBUTION)) in named  # dev needs otel


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return ""


def test_the_ci_examples_pin_the_version_pyproject_builds():
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        text = (REPO / "examples" / "ci" / name).read_text()
        assert f"pip install '{executor.DISTRIBUTION}=={PYPROJECT['project']['version']}'" in text


def test_no_link_to_a_package_index_page_of_another_project():
    _, links = _occurrences()
    assert [(w, n) for w, n in links if n != _canonical(executor.DISTRIBUTION)] == []


def test_the_scanner_reads_commands_not_prose():
    module = 'def f():\n    """pip install of the parts."""\n    return f"pip install {x} evil-one"\n'
    assert names_after_pip_install(_python_strings(module)) == ["evil-one"]
    markdown = "To pip install it all run `pip install other-one`.\n```\npip install third\n```\n"
    assert names_after_pip_install(_markdown_code(markdown)) == ["third", "other-one"]


def test_the_scanner_catches_the_forms_it_must():
    text = ("pip install sandbox-agent\n`pip install 'sandbox-agent[local]'`\n"
            "python -m pip install -q --upgrade Other_Pkg==1.2 && pip install -e .\n"
            "do not try to pip install; say so\npip install $(pip freeze | grep x) 'a{}'\n")
    assert names_after_pip_install(text) == ["sandbox-agent", "sandbox-agent", "other-pkg"]
    assert _INDEX_LINK.findall("see https://index.example/project/sandbox-agent/ now") == [
        "sandbox-agent"]
