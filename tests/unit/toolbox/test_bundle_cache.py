"""The compiled toolbox kept between processes: in the lock dir, private, verified on read."""

from __future__ import annotations

import marshal
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.sandbox import bundle


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """Each test is a new process as far as the in-memory copy goes."""
    bundle.compiled_toolbox.cache_clear()
    yield
    bundle.compiled_toolbox.cache_clear()


def _kept(lock_dir: Path) -> Path:
    (path,) = (lock_dir / bundle.BUNDLES).glob("toolbox-*.bin")
    return path


def _next_process(lock_dir: Path) -> bytes:
    bundle.compiled_toolbox.cache_clear()
    return bundle.compiled_toolbox(lock_dir)


def _planted(key: str, blob: bytes) -> bytes:
    """A file in the format we write, holding `blob`: what a later process would load."""
    return bundle._cache_header(key, blob) + blob


def test_the_first_process_keeps_it_private(tmp_path: Path):
    blob = bundle.compiled_toolbox(tmp_path)
    path = _kept(tmp_path)
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes().endswith(blob)
    assert blob == bundle._compile(bundle._toolbox_modules())  # what an uncached one makes
    modules = marshal.loads(zlib.decompress(blob))
    assert "toolbox.__main__" in modules and not modules["toolbox.__main__"][0]


def test_the_next_process_loads_it_without_compiling(tmp_path: Path):
    """A bundle kept for these sources is what the next process sends, as it is on disk."""
    bundle.compiled_toolbox(tmp_path)
    path = _kept(tmp_path)
    key = bundle._bundle_key(bundle._toolbox_modules())
    stand_in = zlib.compress(marshal.dumps({"toolbox": (True, compile("", "t", "exec"))}))
    path.write_bytes(_planted(key, stand_in))
    assert _next_process(tmp_path) == stand_in
    payload = bundle.toolbox_payload(bundle.MAGIC_NUMBER.hex().encode(), tmp_path)
    assert payload == f"code {len(stand_in)}\n".encode() + stand_in


@pytest.mark.parametrize("spoil", ["edited", "short", "empty", "other key", "no header"])
def test_a_spoiled_file_is_ignored_and_rewritten(tmp_path: Path, spoil: str):
    genuine = bundle.compiled_toolbox(tmp_path)
    path = _kept(tmp_path)
    data = path.read_bytes()
    spoiled = {"edited": data[:-1] + bytes([data[-1] ^ 1]), "short": data[:-100], "empty": b"",
               "other key": _planted("0" * 64, genuine[:-1] + b"x"),
               "no header": genuine}[spoil]
    path.write_bytes(spoiled)
    assert _next_process(tmp_path) == genuine
    assert path.read_bytes() == data


def test_a_link_is_never_followed(tmp_path: Path):
    """A link at the bundle's name (to a file in the right format, even) is not read, and the
    rewrite replaces the link, not what it points at."""
    genuine = bundle.compiled_toolbox(tmp_path)
    path = _kept(tmp_path)
    key = bundle._bundle_key(bundle._toolbox_modules())
    elsewhere = tmp_path / "elsewhere.bin"
    planted = _planted(key, b"not the toolbox")
    elsewhere.write_bytes(planted)
    path.unlink()
    path.symlink_to(elsewhere)
    assert _next_process(tmp_path) == genuine
    assert not path.is_symlink() and elsewhere.read_bytes() == planted


def test_a_directory_others_can_write_is_not_trusted(tmp_path: Path):
    bundle.compiled_toolbox(tmp_path)
    path = _kept(tmp_path)
    key = bundle._bundle_key(bundle._toolbox_modules())
    path.write_bytes(_planted(key, b"not the toolbox"))
    os.chmod(path.parent, 0o777)
    assert _next_process(tmp_path) != b"not the toolbox"
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700  # made private again


def test_a_linked_directory_is_not_used(tmp_path: Path):
    """`bundles` as a link to a directory elsewhere: nothing is read or written through it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    key = bundle._bundle_key(bundle._toolbox_modules())
    (elsewhere / f"toolbox-{key[:32]}.bin").write_bytes(_planted(key, b"not the toolbox"))
    os.chmod(elsewhere / f"toolbox-{key[:32]}.bin", 0o600)
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    (lock_dir / bundle.BUNDLES).symlink_to(elsewhere)
    assert bundle.compiled_toolbox(lock_dir) == bundle._compile(bundle._toolbox_modules())
    assert [p.name for p in elsewhere.iterdir()] == [f"toolbox-{key[:32]}.bin"]


def test_other_sources_get_their_own_and_old_ones_go(tmp_path: Path):
    """The key is the sources' content and the bytecode format: a changed module is another
    bundle, and writing it removes the one of the old sources."""
    modules = bundle._toolbox_modules()
    changed = dict(modules)
    package, filename, text = changed["toolbox.wire"]
    changed["toolbox.wire"] = (package, filename, text + b"\n# changed\n")
    assert bundle._bundle_key(changed) != bundle._bundle_key(modules)
    stale = tmp_path / bundle.BUNDLES / "toolbox-0123456789abcdef0123456789abcdef.bin"
    stale.parent.mkdir(mode=0o700)
    stale.write_bytes(b"old")
    bundle.compiled_toolbox(tmp_path)
    assert _kept(tmp_path).name == f"toolbox-{bundle._bundle_key(modules)[:32]}.bin"


def test_an_unwritable_lock_dir_only_costs_a_compile(tmp_path: Path):
    (tmp_path / bundle.BUNDLES).write_text("a file where the directory goes")
    assert bundle.compiled_toolbox(tmp_path) == bundle._compile(bundle._toolbox_modules())
