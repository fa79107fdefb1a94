"""The sandbox seam at the facade: `Runner` takes a Sandbox (or a factory), names it from the
session store, and wraps it in its workspace (copy: base and changes kept; bind: writes
journaled). No Docker: the in-repo fake sandbox stands in."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from executor.messages import Message, ToolCall, ToolResult
from executor.models import ScriptedModel
from executor.runner import Runner
from executor.sandbox.docker import SandboxConfig
from executor.session import NdjsonSessionStore
from executor.tools.builtin import read_page
from executor.workspace.changes import load_base, load_changes
from executor.workspace.store import BlobStore, read_lines, session_dir
from tests.conftest import PRIVATE_ENV
from tests.fakes.sandbox import FakeSandbox


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("SANDBOX_AGENT_") and n not in PRIVATE_ENV]:
        monkeypatch.delenv(name)


def calling(name: str, **args: Any) -> Message:
    return Message.assistant("", [ToolCall(id="c1", name=name, arguments=args)])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "app.py").write_text("v1\n")
    return root


def runner(root: Path, script: list[Any], sandbox: Any, **options: Any) -> Runner:
    # native: these tests are about the sandbox, not the coach the json protocols get
    return Runner.build(root, model=ScriptedModel(script, tool_protocol="native"),
                        sandbox=sandbox, yes=True,
                        audit=False, **options)


def test_a_given_sandbox_runs_every_tool_call(root: Path):
    box = FakeSandbox()
    with runner(root, [calling("read_file", path="app.py"), "done"], box) as run:
        assert run.run("read it").answer == "done"
        name = run.session_name
    assert box.tools_called == ["read_file"] and box.stopped
    header = NdjsonSessionStore.open(root, str(name)).header
    assert header.container == "sandbox-agent-fa4efa4efa4e" and header.workspace == "bind"


def test_a_factory_gets_the_session_id_from_the_session_store(root: Path):
    seen: list[SandboxConfig] = []

    def factory(config: SandboxConfig) -> FakeSandbox:
        seen.append(config)
        return FakeSandbox()

    with runner(root, ["done"], factory, session="s1") as run:
        run.run("hi")
    header = NdjsonSessionStore.open(root, "s1").header
    assert [c.session_id for c in seen] == [header.sandbox_id] and len(header.sandbox_id) == 12
    with runner(root, ["again"], factory, session="s1", resume=True) as run:
        run.run("hi")
    assert seen[1].session_id == header.sandbox_id  # the same sandbox, by the store's word


def test_a_copy_session_keeps_its_base_and_collects_its_changes(root: Path):
    box = FakeSandbox(files={"app.py": b"v1\n"})
    script = [calling("write_file", path="app.py", content="v2\n"),
              calling("write_file", path="new/file.txt", content="new\n"), "done"]
    with runner(root, script, box, workspace="copy", session="c1") as run:
        run.run("change it")
        base = load_base(session_dir(root, "c1"))
        assert base is not None and set(base.manifest) == {"app.py"}
    assert (root / "app.py").read_text() == "v1\n"  # the host tree is not touched
    changes = load_changes(root, "c1")
    assert changes is not None and run.changes is not None
    assert {c.path: c.status for c in changes.changes} == {
        "app.py": "M", "new": "A", "new/file.txt": "A"}
    blobs = BlobStore.for_root(root)
    assert blobs.get(hashlib.sha256(b"v2\n").hexdigest()) == b"v2\n"


def test_a_resumed_copy_session_puts_its_pending_changes_back(root: Path):
    box = FakeSandbox(files={"app.py": b"v1\n"})
    with runner(root, [calling("write_file", path="app.py", content="v2\n"), "done"], box,
                workspace="copy", session="c1") as run:
        run.run("change it")
    seen: list[SandboxConfig] = []

    def factory(config: SandboxConfig) -> FakeSandbox:
        seen.append(config)
        return FakeSandbox(files={"app.py": b"v2\n"})

    with runner(root, ["done"], factory, session="c1", resume=True) as run:
        run.run("go on")
    assert seen[0].workspace == "copy" and list(seen[0].copy_overlay) == ["app.py"]
    base = load_base(session_dir(root, "c1"))
    assert base is not None
    assert base.manifest["app.py"].sha256 == hashlib.sha256(b"v1\n").hexdigest()


def test_bind_writes_are_journaled_with_the_content_they_overwrite(root: Path):
    snapshot = ToolResult(ok=True, output="file", meta={
        "resolved": "app.py", "exists": True, "kind": "file", "mode": 0o644, "size": 3,
        "sha256": hashlib.sha256(b"v1\n").hexdigest(), "data": "djEK"})
    written = ToolResult(ok=True, output="wrote", meta={
        "bytes": 3, "sha256_after": hashlib.sha256(b"v2\n").hexdigest()})
    box = FakeSandbox({"snapshot": snapshot, "write_file": written})
    with runner(root, [calling("write_file", path="app.py", content="v2\n"), "done"], box,
                session="b1") as run:
        run.run("change it")
    assert box.tools_called == ["snapshot", "write_file"]
    [record] = read_lines(session_dir(root, "b1") / "journal.ndjson")
    assert record["path"] == "app.py" and record["source"] == "tool"
    assert record["before"][3] == hashlib.sha256(b"v1\n").hexdigest()
    assert BlobStore.for_root(root).get(record["before"][3]) == b"v1\n"
    assert json.dumps(record)  # plain JSON all the way


@pytest.mark.parametrize(("provider", "include", "expected"), [
    ("ollama", [], []),  # measured: the bundled `ask` skills made the 1.5B model answer, not act
    ("embedded", [], []),
    ("embedded", ["safe-shell"], ["safe-shell"]),  # named ones count, whatever the provider
    ("ollama", ["python-testing", "safe-shell"], ["python-testing", "safe-shell"]),
])
def test_default_off_skills_reach_the_prompt_only_when_named(
        root: Path, provider: str, include: list[str], expected: list[str]):
    model = ScriptedModel(["done"], tool_protocol="native")
    with Runner.build(root, model=model, sandbox=FakeSandbox(), yes=True, audit=False,
                      provider=provider, skills_include=include) as run:
        run.run("hi")
        assert [s.id for s in run.skills.skills] == expected
    system = model.calls[0].messages[0]
    assert system.role == "system"
    assert ("Skill safe-shell" in system.content) == ("safe-shell" in expected)


@pytest.mark.parametrize("protocol", ["json", "constrained", "native"])
def test_weak_models_read_a_page_that_fits_their_window(root: Path, protocol: str):
    box = FakeSandbox()
    model = ScriptedModel([calling("read_file", path="app.py", start_line=1), "done"],
                          tool_protocol=protocol)
    with Runner.build(root, model=model, sandbox=box, yes=True, audit=False,
                      max_tokens=8192) as run:
        run.run("read it")
    [args] = [args for tool, args in box.calls if tool == "read_file"]
    # the json protocols are for weak models with small windows: a quarter of 8,192 tokens
    expected = {"page_lines": 128} if protocol != "native" else {}
    assert args == {"path": "app.py", "start_line": 1, **expected}
    assert read_page(8192) == 128 and read_page(32768) == 512 and read_page(100) == 40
