"""One contract for every `Sandbox`: the in-repo fake, and the Docker sandbox in both
workspaces. What the Runner relies on holds for each of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.messages import ToolResult
from executor.protocols import Sandbox
from executor.sandbox.docker import DockerSandbox
from executor.workspace.copyload import ArchiveLoader
from tests.docker.conftest import make_config
from tests.fakes.sandbox import FakeSandbox

pytestmark = pytest.mark.docker

Factory = Callable[[], Any]


@pytest.fixture(params=["fake", "docker-bind", "docker-copy", "docker-copy-on-disk"])
def make(request: pytest.FixtureRequest, project: Path, docker_client: Any
         ) -> Iterator[Factory]:
    """A factory of unstarted sandboxes of one kind on `project`; each is stopped at the end."""
    made: list[Any] = []

    def factory() -> Any:
        if request.param == "fake":
            box: Any = FakeSandbox(files={"hello.py": b'print("hello")\n'})
        else:
            workspace = "bind" if request.param == "docker-bind" else "copy"
            storage = "disk" if request.param.endswith("on-disk") else "auto"
            box = DockerSandbox(make_config(project, workspace=workspace, copy_storage=storage),
                                client=docker_client, copy_loader=ArchiveLoader())
        made.append(box)
        return box

    yield factory
    for box in made:
        box.stop()


def test_it_is_a_sandbox_and_refuses_calls_before_start(make: Factory):
    box = make()
    assert isinstance(type(box), type) and all(callable(getattr(box, name)) for name in
                                               ("start", "stop", "call", "is_alive"))
    assert not box.is_alive()
    with pytest.raises(SandboxError):
        box.call("read_file", {"path": "hello.py"})


def test_a_started_sandbox_runs_calls_and_describes_itself(make: Factory):
    with make() as box:
        assert isinstance(box, Sandbox) and box.is_alive()
        result = box.call("read_file", {"path": "hello.py"})
        assert isinstance(result, ToolResult)
        info = box.info
        assert info.container_name.startswith("sandbox-agent-")
        assert info.mount_mode in ("ro", "rw") and info.workspace in ("bind", "copy")
        assert info.network == "none" and info.image_digest.startswith("sha256:")
    assert not box.is_alive()


def test_stopping_twice_is_safe(make: Factory):
    box = make()
    box.start()
    box.stop()
    box.stop()
    assert not box.is_alive()


def test_a_copy_says_what_it_copied_and_every_workspace_lists_its_files(make: Factory):
    with make() as box:
        copied = box.copy_manifest()
        if box.info.workspace == "copy":
            assert copied is not None and "hello.py" in copied
        else:
            assert copied is None  # a bind workspace copies nothing
        listing = box.call("manifest", {})
        assert listing.ok and "hello.py" in {row[0] for row in listing.meta["entries"]}
