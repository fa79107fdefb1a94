"""A reply's `signals`: derived in the toolbox from its meta records, parsed once by the host,
and reacted to by `DockerSandbox.call` in at most one retry (never by calling itself again).

The engine is faked at the seams the sandbox composes (a Deployment and a Runtime whose
engine-facing methods record what they were asked); the reactions are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.messages import ToolResult
from executor.protocols import OutputCallback, SandboxInfo
from executor.sandbox import signals
from executor.sandbox.config import SandboxConfig
from executor.sandbox.deployment import Deployment
from executor.sandbox.docker import DockerSandbox
from executor.sandbox.runtime import Runtime
from executor.sandbox.signals import Signals, Unrestored
from executor.toolbox.wire import signals_of


def test_the_toolbox_derives_signals_from_the_meta_records_that_stay():
    meta: dict[str, Any] = {
        "remount_needed": ["vendor/.git"], "processes_unstopped": True,
        "protected_restored": [{"path": "a", "moved_to": "b", "error": "EBUSY"},
                               {"path": "c", "moved_to": "d"}],
        "git_quarantined": [{"path": "x/.git", "kind": "dir", "renamed_to": None,
                             "error": "EPERM"},
                            {"path": "y/.git", "kind": "dir", "renamed_to": "y/.git.q"}]}
    assert signals_of(meta) == {
        "remount": ["vendor/.git"], "unstoppable": True,
        "unrestored": [{"path": "a", "moved_to": "b", "error": "EBUSY"}],
        "undisabled": ["x/.git"]}
    assert signals_of({"bytes": 3, "processes_unstopped": False}) == {}


def test_the_host_parses_signals_once_into_a_typed_value():
    parsed = signals.parse({"remount": ["a/.git", 3], "unstoppable": True,
                            "unrestored": [{"path": "p", "error": "E"}, "junk"],
                            "undisabled": "not a list"})
    assert parsed == Signals(remount=("a/.git", "3"), unstoppable=True,
                             unrestored=(Unrestored("p", "E"),), undisabled=())
    assert signals.parse(None) is signals.NONE and signals.parse({}) is signals.NONE
    assert signals.parse({"unstoppable": "yes"}).unstoppable is False  # only true is true


class FakeDeployment(Deployment):
    """A Deployment whose engine is a list: what it created and removed."""

    def __init__(self, config: SandboxConfig) -> None:
        super().__init__(config, client=SimpleNamespace(api="api"), warn=lambda m: None)
        self.created: list[dict[str, Any]] = []
        self.removed = 0
        self.container = SimpleNamespace(id="c0")

    def create(self, options: dict[str, Any]) -> Any:
        self.created.append(options)
        self.container = SimpleNamespace(id=f"c{len(self.created)}")
        return self.container

    def remove(self) -> bool:
        self.removed += 1
        self.container = None
        return True

    def ensure_running(self) -> bool:
        return True

    def start_egress(self) -> None:
        pass

    def detach_egress(self) -> None:
        pass


class FakeRuntime(Runtime):
    """A Runtime whose toolbox answers from a list of (result, signals)."""

    def __init__(self, lock_dir: Path, replies: list[tuple[ToolResult, Signals]]) -> None:
        super().__init__(lock_dir, "sandbox-agent-s", lambda m: None, fifo=False)
        self.replies, self.calls, self.started = replies, 0, 0
        self.toolbox = SimpleNamespace(stop=lambda: None)  # type: ignore[assignment]

    def start(self, api: Any, container_id: str, user: str, argv: list[str],
              attached: Any = None, *, gvisor: bool) -> dict[str, Any]:
        self.started += 1
        self.toolbox = SimpleNamespace(stop=lambda: None)  # type: ignore[assignment]
        return {"ready": True, "filter": "installed"}

    def call(self, tool: str, args: dict[str, Any], timeout: float,
             on_output: OutputCallback | None) -> tuple[ToolResult, Signals]:
        self.calls += 1
        return self.replies[min(self.calls, len(self.replies)) - 1]


Made = tuple[DockerSandbox, FakeDeployment, FakeRuntime]


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Callable[[list[tuple[ToolResult, Signals]]], Made]]:
    """A sandbox over the fakes, answering with the replies given; its lock released after."""
    boxes: list[DockerSandbox] = []

    def make(replies: list[tuple[ToolResult, Signals]]) -> Made:
        box, place, runtime = _sandbox(tmp_path, replies)
        boxes.append(box)
        return box, place, runtime

    yield make
    for box in boxes:
        box._deployment.unlock()


def _sandbox(tmp_path: Path, replies: list[tuple[ToolResult, Signals]]) -> Made:
    root = tmp_path / "proj"
    root.mkdir()
    config = SandboxConfig(root=root, session_id="s", lock_dir=tmp_path / "locks")
    box = DockerSandbox(config)
    place, runtime = FakeDeployment(config), FakeRuntime(tmp_path / "locks", replies)
    box._deployment, box._runtime = place, runtime
    place.lock()  # as a start does: the run record goes beside the lock
    box._info = SandboxInfo(container_id="c0", container_name=box.name, image="i",
                            image_digest="d", mount_mode="rw", network="none", user="1:1",
                            workspace="bind", runtime="runc", engine="Docker")
    return box, place, runtime


REFUSED = ToolResult(ok=False, output="a git repository appeared", meta={"remount_needed": ["v"]})
DONE = ToolResult(ok=True, output="done")


def test_a_remount_signal_recreates_once_and_retries_once(made: Callable[..., Made]):
    box, place, runtime = made([(REFUSED, Signals(remount=("v/.git",))),
                                              (DONE, signals.NONE)])
    assert box.call("run_shell_command", {"command": "true"}) == DONE
    assert (len(place.created), place.removed, runtime.calls, runtime.started) == (1, 1, 2, 1)
    assert box.info.container_id == "c1"


def test_a_remount_asked_again_after_the_retry_is_not_followed(made: Callable[..., Made]):
    """The toolbox keeps refusing: one new container, one retry, then its answer stands."""
    box, place, runtime = made([(REFUSED, Signals(remount=("v/.git",)))])
    assert box.call("run_shell_command", {"command": "true"}) == REFUSED
    assert (len(place.created), runtime.calls) == (1, 2)


def test_an_unrestored_mount_ends_the_session_and_undisabled_gits_are_kept(
        made: Callable[..., Made]):
    moved = Signals(unrestored=(Unrestored(".husky", "EBUSY"),), undisabled=("x/.git",))
    box, place, _ = made([(DONE, moved)])
    with pytest.raises(SandboxError, match=r"\.husky is protected .* \(EBUSY\)"):
        box.call("run_shell_command", {"command": "true"})
    assert box._git.undisabled == {"x/.git"} and place.created == []


def test_an_unstoppable_process_costs_a_bind_session_its_container(made: Callable[..., Made]):
    box, place, runtime = made([(DONE, Signals(unstoppable=True))])
    assert box.call("run_shell_command", {"command": "true"}) == DONE
    assert (len(place.created), runtime.calls) == (1, 1)  # no retry: the command ran
