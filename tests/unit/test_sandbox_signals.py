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

from executor.errors import SandboxError, ToolboxError, ToolboxTimeoutError
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
        box.deployment.unlock()


def _sandbox(tmp_path: Path, replies: list[tuple[ToolResult, Signals]], *,
             workspace: str = "bind") -> Made:
    root = tmp_path / "proj"
    root.mkdir()
    config = SandboxConfig(root=root, session_id="s", lock_dir=tmp_path / "locks",
                           workspace=workspace)
    box = DockerSandbox(config)
    place, runtime = FakeDeployment(config), FakeRuntime(tmp_path / "locks", replies)
    box._assemble(place, runtime)
    place.lock()  # as a start does: the run record goes beside the lock
    box._info = SandboxInfo(container_id="c0", container_name=box.deployment.name, image="i",
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
    assert box.git.undisabled == {"x/.git"} and place.created == []


def test_an_unstoppable_process_costs_a_bind_session_its_container(made: Callable[..., Made]):
    box, place, runtime = made([(DONE, Signals(unstoppable=True))])
    assert box.call("run_shell_command", {"command": "true"}) == DONE
    assert (len(place.created), runtime.calls) == (1, 1)  # no retry: the command ran


class StuckRuntime(FakeRuntime):
    """A toolbox whose first call is interrupted or times out, and whose kill fails (a
    command of the tools' uid paused the kill script)."""

    def __init__(self, lock_dir: Path, first: BaseException) -> None:
        super().__init__(lock_dir, [(DONE, signals.NONE)])
        self.first: BaseException | None = first
        self.kills = 0

    def call(self, tool: str, args: dict[str, Any], timeout: float,
             on_output: OutputCallback | None) -> tuple[ToolResult, Signals]:
        if self.first is not None:
            first, self.first = self.first, None
            raise first
        return super().call(tool, args, timeout, on_output)

    def kill(self, api: Any, container_id: str, user: str,
             ensure_running: Callable[[], bool], alone: Callable[[], bool] = bool) -> bool:
        self.kills += 1
        self.toolbox = None
        return False


@pytest.mark.parametrize("first", [KeyboardInterrupt(), ToolboxTimeoutError("no answer")])
def test_no_toolbox_starts_beside_what_a_failed_kill_left(tmp_path: Path, first: BaseException):
    """A bind session gets a new container before its next toolbox (red-team round 17)."""
    box, place, _ = _sandbox(tmp_path, [])
    runtime = StuckRuntime(tmp_path / "locks", first)
    box._assemble(place, runtime)
    try:
        if isinstance(first, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                box.call("run_shell_command", {"command": "sleep 9"})
            assert box.call("run_shell_command", {"command": "true"}) == DONE
        else:
            assert box.call("run_shell_command", {"command": "sleep 9"}).ok is False
        assert runtime.kills == 1 and len(place.created) == 1 and place.removed == 1
        assert runtime.started == 1  # the only toolbox started is the new container's
    finally:
        box.deployment.unlock()


def test_a_copy_session_ends_when_a_kill_failed(tmp_path: Path):
    box, place, _ = _sandbox(tmp_path, [], workspace="copy")
    runtime = StuckRuntime(tmp_path / "locks", ToolboxTimeoutError("no answer"))
    box._assemble(place, runtime)
    try:
        with pytest.raises(ToolboxError, match="could not be stopped"):
            box.call("run_shell_command", {"command": "sleep 9"})
        assert runtime.started == 0 and place.created == []
    finally:
        box.deployment.unlock()


class InterruptedKillRuntime(StuckRuntime):
    """The kill's wait (a paused kill script makes it last 15 s) is cut by a second Ctrl-C."""

    def kill(self, api: Any, container_id: str, user: str,
             ensure_running: Callable[[], bool], alone: Callable[[], bool] = bool) -> bool:
        self.kills += 1
        self.toolbox = None
        raise KeyboardInterrupt


@pytest.mark.parametrize("first", [KeyboardInterrupt(), ToolboxTimeoutError("no answer")])
@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_a_kill_cut_short_counts_as_failed(tmp_path: Path, first: BaseException, workspace: str):
    """Red-team round 18: a Ctrl-C during the kill's wait skipped the round-17 rule, and the
    next call started a toolbox beside what the command left."""
    box, place, _ = _sandbox(tmp_path, [], workspace=workspace)
    runtime = InterruptedKillRuntime(tmp_path / "locks", first)
    box._assemble(place, runtime)
    try:
        with pytest.raises(KeyboardInterrupt):
            box.call("run_shell_command", {"command": "sleep 9"})
        if workspace == "copy":
            with pytest.raises(SandboxError, match="could not be stopped"):
                box.call("run_shell_command", {"command": "true"})
            assert runtime.started == 0 and place.created == []
        else:
            assert box.call("run_shell_command", {"command": "true"}) == DONE
            assert len(place.created) == 1 and place.removed == 1
            assert runtime.started == 1  # the only toolbox started is the new container's
    finally:
        box.deployment.unlock()


class FailedStartRuntime(FakeRuntime):
    """A toolbox start that fails half way: the process may be left running."""

    def start(self, api: Any, container_id: str, user: str, argv: list[str],
              attached: Any = None, *, gvisor: bool) -> dict[str, Any]:
        if self.started == 0:
            self.started, self.toolbox = 1, None
            raise ToolboxError("the toolbox did not start: no ready line")
        return super().start(api, container_id, user, argv, attached, gvisor=gvisor)


def test_no_toolbox_starts_beside_one_whose_start_failed(tmp_path: Path):
    box, place, _ = _sandbox(tmp_path, [])
    runtime = FailedStartRuntime(tmp_path / "locks", [(DONE, signals.NONE)])
    box._assemble(place, runtime)
    try:
        with pytest.raises(ToolboxError):
            box._restarts.start_toolbox(running=True)
        assert box.call("run_shell_command", {"command": "true"}) == DONE
        assert len(place.created) == 1 and runtime.started == 2
    finally:
        box.deployment.unlock()


class LeftoverRuntime(FakeRuntime):
    """A re-attached container whose leftovers cannot be killed (their kill script paused)."""

    def kill_in_container(self, api: Any, container_id: str, user: str, pid: int) -> bool:
        return False


@pytest.mark.parametrize("workspace", ["bind", "copy"])
def test_leftovers_that_cannot_be_killed_cost_a_bind_container_and_end_a_copy_session(
        tmp_path: Path, workspace: str):
    """Red-team round 13, decided by `Recovery.clear_left` before any toolbox starts there."""
    box, place, _ = _sandbox(tmp_path, [], workspace=workspace)
    runtime = LeftoverRuntime(tmp_path / "locks", [])
    box._assemble(place, runtime)
    try:
        if workspace == "copy":
            with pytest.raises(SandboxError, match="cannot be resumed safely"):
                box._recovery.clear_left()
            assert place.removed == 0
        else:
            assert box._recovery.clear_left() is True  # the caller makes the new container
            assert place.removed == 1 and place.container is None
    finally:
        box.deployment.unlock()


def test_a_kill_cut_short_leaves_the_fifos_to_no_later_toolbox(tmp_path: Path):
    class Cut(Runtime):
        def kill_in_container(self, api: Any, container_id: str, user: str, pid: int) -> bool:
            raise KeyboardInterrupt

    runtime = Cut(tmp_path / "locks", "sandbox-agent-s", lambda m: None)
    runtime._channel = tmp_path / "chan"
    runtime.toolbox = SimpleNamespace(pid=7, stop=lambda: None)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        runtime.kill("api", "cid", "1000", lambda: True)
    assert runtime.toolbox is None and not runtime.has_channel
