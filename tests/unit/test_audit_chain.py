"""The audit writer that keeps its files open between records: same bytes, same checks."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from executor import durable
from executor.audit import AuditLog, canonical, record_hash, verify
from executor.audit_chain import sealed
from executor.redact import Redactor

_KEYS = st.sampled_from(["a", "hash_x", "has", "hasi", "h", "kind", "seq", "ts", "zz", "Z", "é"])
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=8))
def test_a_sealed_line_is_the_canonical_form_with_its_hash(record: dict[str, Any]) -> None:
    digest, line = sealed(record)
    assert digest == record_hash(record)
    assert line == canonical({**record, "hash": digest}) + b"\n"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def make_log(directory: Path, **options: Any) -> AuditLog:
    return AuditLog(directory, session="s", redactor=Redactor({}), clock=Clock(), **options)


def test_two_writers_taking_turns_in_one_process_keep_one_chain(tmp_path: Path) -> None:
    first, second = make_log(tmp_path / "log"), make_log(tmp_path / "log")
    for n in range(20):
        (first if n % 3 else second).record("note", n=n)
    report = verify(tmp_path / "log")
    assert report.ok and report.records == 20


def test_a_day_file_replaced_by_a_link_behind_the_writer_is_never_written_through(
        tmp_path: Path) -> None:
    directory, target = tmp_path / "log", tmp_path / "bashrc"
    target.write_text("original\n")
    warnings: list[str] = []
    log = make_log(directory, on_warning=warnings.append)
    log.record("note")
    day = directory / "2024-05-01.ndjson"
    day.rename(directory / "moved")
    day.symlink_to(target)
    log.record("note")  # the open descriptor is not the file the name leads to any more
    assert target.read_text() == "original\n"
    assert log.failures == 1 and warnings
    assert (directory / "moved").read_bytes().count(b"\n") == 1


def test_a_record_appended_by_someone_else_is_linked_to(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = make_log(directory)
    log.record("note")
    other = make_log(directory)
    other.record("other")
    other.close()
    log.record("note")
    log.close()
    report = verify(directory)
    assert report.ok and report.records == 3


def _held(directory: Path) -> list[str]:
    """What this process holds open in `directory`."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{directory}/"):
            found.append(os.path.basename(target))
    return sorted(found)


def test_close_lets_go_of_every_descriptor(tmp_path: Path) -> None:
    log = make_log(tmp_path / "log")
    log.record("note")
    durable.SYNCER.flush()  # its own descriptor of the file lives until the fsync
    assert _held(tmp_path / "log") == [".lock", "2024-05-01.ndjson"]
    log.close()
    assert _held(tmp_path / "log") == []
