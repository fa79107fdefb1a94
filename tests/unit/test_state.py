"""The user state dir: outside the project, private, keyed by the root's real path, and never
followed through a link or blocked on a FIFO."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from executor.errors import ConfigError, SessionError
from executor.state import (
    check_outside,
    config_home,
    ensure_project_dir,
    legacy_notice,
    open_private,
    project_dir,
    reaches_into,
    read_private,
    state_home,
)


def test_state_and_config_homes_follow_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(tmp_path / "s"))
    assert state_home() == tmp_path / "s"
    monkeypatch.delenv("SANDBOX_AGENT_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_home() == tmp_path / "xdg" / "sandbox-agent"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_home() == tmp_path / "home" / ".local" / "state" / "sandbox-agent"
    monkeypatch.delenv("SANDBOX_AGENT_CONFIG_DIR")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert config_home() == tmp_path / "home" / ".config" / "sandbox-agent"


def test_project_dir_is_private_outside_the_root_and_keyed_by_the_real_path(tmp_path: Path
                                                                           ) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "alias").symlink_to(root)
    made = ensure_project_dir(tmp_path / "alias")
    assert made == project_dir(root) == project_dir(tmp_path / "alias")
    assert made.name.startswith("proj-") and root not in made.parents
    for path in (state_home(), made):
        info = path.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert (made / "root").read_text() == f"{root.resolve()}\n"
    assert project_dir(tmp_path / "other") != made


def test_a_state_dir_inside_the_project_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(ConfigError, match="inside the project root"):
        ensure_project_dir(tmp_path)


def test_a_symlink_or_foreign_dir_in_place_of_state_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "proj"
    root.mkdir()
    state_home().mkdir(parents=True)
    (state_home() / "projects").symlink_to(elsewhere)
    with pytest.raises(SessionError, match="not a directory"):
        ensure_project_dir(root)
    assert list(elsewhere.iterdir()) == []
    if os.geteuid() == 0:  # only root can hand a directory to another user
        (state_home() / "projects").unlink()
        (state_home() / "projects").mkdir()
        os.chown(state_home() / "projects", 4242, 4242)
        with pytest.raises(SessionError, match="owned by uid 4242"):
            ensure_project_dir(root)


def test_state_files_are_never_followed_or_blocked_on(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_text("original\n")
    link = tmp_path / "day.ndjson"
    link.symlink_to(target)
    with pytest.raises(OSError):
        open_private(link, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert target.read_text() == "original\n"
    fifo = tmp_path / "fifo.ndjson"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_private(fifo)
        except OSError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO in place of a state file hung"
    assert outcome and "not a regular file" in str(outcome[0])


def test_an_old_in_tree_state_dir_gets_one_notice(tmp_path: Path) -> None:
    assert legacy_notice(tmp_path) is None
    (tmp_path / ".sandbox-agent").mkdir()
    assert legacy_notice(tmp_path) is None  # a project policy alone is not old state
    (tmp_path / ".sandbox-agent" / "audit").mkdir()
    notice = legacy_notice(tmp_path)
    assert notice is not None and "ignored and never trusted" in notice
    assert str(state_home()) in notice


def test_what_reaches_into_the_root_is_decided_by_every_step_not_a_prefix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As written, every link followed on the way (the sandbox could re-point one in the
    tree) and the real target must all lie outside the root."""
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (root / "p.toml").write_text("x")
    out = tmp_path / "out"
    out.mkdir()
    (out / "p.toml").write_text("x")
    (root / "to-out.toml").symlink_to(out / "p.toml")  # inside as written, outside for real
    (out / "to-in.toml").symlink_to(root / "p.toml")  # outside as written, inside for real
    (out / "dir").symlink_to(root / "sub")
    (root / "hop").symlink_to(out)  # a link in the tree, on the way to a file outside
    (out / "via").symlink_to("../proj/hop/p.toml")
    (out / "loop").symlink_to("loop")
    (tmp_path / "proj-evil").mkdir()  # a string prefix of the root, not inside it
    inside = {
        root / "p.toml": root / "p.toml",
        root / "sub" / "new.toml": root / "sub",  # not there yet: still inside
        root / "to-out.toml": root / "to-out.toml",
        out / "to-in.toml": root / "p.toml",
        out / "dir" / "p.toml": root / "sub",
        out / "via": root / "hop",
        out / "loop": out / "loop",  # the kernel gives up: so do we, closed
        root: root,
    }
    for path, hit in inside.items():
        assert reaches_into(root, path) == hit, path
    for path in (out / "p.toml", root / ".." / "out" / "p.toml", tmp_path / "proj-evil" / "p",
                 tmp_path / "missing" / "p.toml"):
        assert reaches_into(root, path) is None, path
    monkeypatch.chdir(root / "sub")  # relative paths are taken from the cwd, as written
    assert reaches_into(root, Path("p.toml")) == root / "sub"
    assert reaches_into(root, Path("../../out/p.toml")) == root / "sub"  # through the tree
    monkeypatch.chdir(root)
    assert reaches_into(root, Path("../out/p.toml")) is None  # through the root itself only


def test_a_path_refused_for_a_link_names_the_link(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "p.toml").write_text("x")
    (tmp_path / "p.toml").symlink_to(root / "p.toml")
    with pytest.raises(ConfigError, match=r"the file \S+/p.toml is inside the project root "
                       r"\S+ \(through \S+/proj/p.toml\)") as err:
        check_outside(root, tmp_path / "p.toml", "the file", fix="move it")
    assert err.value.fix == "move it"
