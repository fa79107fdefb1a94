"""The records a tool reply's meta becomes in the audit log, pinned byte for byte.

The audit reads the meta through executor/toolmeta.py; how the host reads it must not change
a byte of a log (an old log must still verify, and exports read these fields).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from executor.audit import AuditLog, verify
from executor.redact import Redactor

PINNED = Path(__file__).parent / "audit_meta_records.ndjson"

CHANGE = {"path": "a.txt", "change": "modified", "kind": "file", "sha256_before": "0" * 64,
          "sha256_after": "1" * 64, "size_before": 3, "size_after": 4, "mode_before": "0644",
          "mode_after": "0644", "target": None}
REPLIES: list[tuple[str, bool, dict[str, Any]]] = [
    ("run_shell_command", True, {
        "exit_code": 0, "timed_out": False, "duration_ms": 12.6, "signal": None,
        "stdout_bytes": 3, "changes": [CHANGE, {"path": "", "x": 1}, "junk", {
            "path": "l", "change": "created", "kind": "symlink", "target": "x",
            "unhashed": "too big"}],
        "changes_total": 2, "outside_changes": [CHANGE], "setid_cleared": [],
        "git_quarantined": [{"path": ".git", "kind": "dir", "renamed_to": "q"}]}),
    ("write_file", False, {"bytes": 5, "sha256_before": None, "sha256_after": "2" * 64,
                           "lines_changed": 1, "created": True, "duration_ms": 3}),
    ("edit_file", True, {"bytes": 5, "sha256_before": "3" * 64, "sha256_after": "2" * 64,
                         "lines_changed": 1, "path": "real/p.py", "toolbox_restarted": True,
                         "before_unknown": False}),
    ("search_files", False, {"matches": 0, "truncated": False, "engine": "rg"}),
    ("run_shell_command", True, {"changes": "not a list", "outside_changes": None,
                                 "exit_code": None, "timed_out": True}),
    ("read_file", False, {}),
]
"""Replies as the toolbox (and the host, after a restart) shape them, and malformed ones."""


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 1, 10, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def test_tool_results_are_recorded_as_they_always_were(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=7))  # the run id, fixed
    log = AuditLog(tmp_path, session="s1", clock=Clock(), redactor=Redactor({}))
    for number, (tool, ok, meta) in enumerate(REPLIES):
        log.tool_result(tool=tool, ok=ok, output=f"out {number}", meta=meta,
                        call_id=f"c{number}")
    (written,) = tmp_path.glob("*.ndjson")
    assert written.read_bytes() == PINNED.read_bytes()
    assert verify(tmp_path).ok
