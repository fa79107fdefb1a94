"""The CI examples work as written: their shell steps run here against the stand-in model server.

Each `run:` (GitHub) or `script:` line (GitLab) runs in bash, in a clone-like repository with a
base branch and a change, with the step's environment and the platform's variables set the way
the platform would. Two lines cannot run here and are checked to be exactly what they should be
instead: `pip install 'hardened-sandbox-agent==VERSION'` (the package is the one under test, already
installed) and
`sandbox-agent image build` (no registry to pull the base from; the test image is used). The
GitLab job's venv and `git fetch` lines are left out too: the test's repository has no remote,
and already has the target branch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from executor import DISTRIBUTION, __version__
from tests.docker.cli_support import SANDBOX_AGENT, cli_env, explain
from tests.fakes.model_server import Call, ModelServer

pytestmark = pytest.mark.docker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ci"
NOT_HERE = (f"pip install '{DISTRIBUTION}=={__version__}'", "sandbox-agent image build --quiet")
FINDING = {"file": "src/app.py", "line": 2, "severity": "medium", "title": "add() subtracts",
           "body": "Return a + b."}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c",
                    "user.email=t@example.invalid", *args], check=True, capture_output=True)


@pytest.fixture
def checkout(workdir: Path) -> Path:
    """A repository on a feature branch, its base branch `main` known as `origin/main`."""
    root = workdir / "checkout"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a + b\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "update-ref", "refs/remotes/origin/main", "HEAD")
    _git(root, "checkout", "-q", "-b", "feature")
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    _git(root, "commit", "-q", "-am", "change")
    return root


def _expand(value: str, context: dict[str, str]) -> str:
    """`${{ secrets.X }}`-style expressions replaced from `context`."""
    return re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: context[m.group(1)], str(value))


def _run(script: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    lines = [line for line in script.splitlines() if line.strip() not in NOT_HERE]
    path = f"{SANDBOX_AGENT.parent}:{os.environ['PATH']}"
    return subprocess.run(["bash", "-e", "-c", "\n".join(lines)], cwd=root, capture_output=True,
                          text=True, timeout=180, env=cli_env(PATH=path, **env), check=False)


def _script_review(server: ModelServer) -> None:
    server.reply(tool_calls=[Call("read_file", {"path": "src/app.py"})])
    server.reply(tool_calls=[Call("submit_review", {"summary": "One bug.",
                                                    "findings": [FINDING]})])
    server.reply("Reviewed.")


def test_the_github_workflow_runs_as_written(checkout: Path, model_server: ModelServer):
    workflow = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    steps: list[dict[str, Any]] = workflow["jobs"]["review"]["steps"]
    context = {"secrets.MODEL_HOST": model_server.openai_url, "secrets.MODEL_API_KEY": "k",
               "vars.REVIEW_MODEL": model_server.model, "github.base_ref": "main"}
    runs = [step for step in steps if "run" in step]
    assert [line.strip() for line in runs[0]["run"].splitlines()] == list(NOT_HERE)
    _script_review(model_server)

    outputs = []
    for step in runs:
        env = {k: _expand(v, context) for k, v in (step.get("env") or {}).items()}
        done = _run(step["run"], checkout, {**env, "GITHUB_ACTIONS": "true"})
        assert done.returncode == 0, f"step {step.get('name')}: {explain(done)}"
        outputs.append(done)

    assert "✓ model " in outputs[1].stdout  # doctor found the named model
    sarif = json.loads((checkout / "review.sarif").read_text())
    [result] = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 2}
    assert outputs[2].stdout.splitlines() == [
        "::warning file=src/app.py,line=2,title=medium%3A add() subtracts::Return a + b."]
    upload = next(step for step in steps if "upload-sarif" in step.get("uses", ""))
    assert upload["with"]["sarif_file"] == "review.sarif"
    prompt = model_server.chat_requests[0].body["messages"][1]["content"]
    assert "+    return a - b" in prompt  # the pull request's change, against origin/main


def test_the_gitlab_job_runs_as_written(checkout: Path, model_server: ModelServer,
                                        workdir: Path):
    job = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())["sandbox-agent-review"]
    variables = {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main", "MODEL_HOST":
                 model_server.openai_url, "MODEL_API_KEY": "k", "REVIEW_MODEL":
                 model_server.model}
    env = {**variables, **{k: re.sub(r"\$(\w+)", lambda m: variables.get(m[1], m[0]), v)
                           for k, v in job["variables"].items()}}
    script = [line for line in job["script"] if not line.startswith(("python3 -m venv",
                                                                      "git fetch"))]
    assert [line for line in job["script"] if line in NOT_HERE] == list(NOT_HERE)
    _script_review(model_server)

    done = _run("\n".join(script), checkout, env)
    after = _run("\n".join(job["after_script"]), checkout, env)

    assert done.returncode == 0, explain(done)
    [issue] = json.loads((checkout / "gl-code-quality-report.json").read_text())
    assert (issue["severity"], issue["location"]) == ("major", {"path": "src/app.py",
                                                                "lines": {"begin": 2}})
    assert issue["description"] == "add() subtracts — Return a + b."
    assert issue["check_name"] == "sandbox-agent/review/medium" and len(issue["fingerprint"]) == 64
    assert job["artifacts"]["reports"]["codequality"] == "gl-code-quality-report.json"
    assert after.returncode == 0, explain(after)
    assert "major    src/app.py:2 add() subtracts — Return a + b." in after.stdout


def test_the_gitlab_jobs_after_script_says_so_when_there_is_no_report(checkout: Path):
    job = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())["sandbox-agent-review"]

    after = _run("\n".join(job["after_script"]), checkout, {})

    assert after.returncode == 0 and "Traceback" not in after.stderr, explain(after)
    assert after.stdout == "no review report was written\n"
