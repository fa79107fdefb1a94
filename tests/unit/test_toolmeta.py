"""executor/toolmeta.py: a reply's meta read as typed values, hostile shapes included."""

from __future__ import annotations

from executor import toolmeta


def test_changes_keep_only_objects_with_a_path_and_say_when_the_list_is_whole() -> None:
    good = {"path": "a", "change": "created"}
    meta = {"changes": [good, {"path": ""}, "junk", {"change": "deleted"}]}
    assert toolmeta.changes(meta) == [good]
    assert toolmeta.any_changes(meta) and not toolmeta.changes_complete(meta)
    assert toolmeta.changes_complete({"changes": [good]})
    assert not toolmeta.changes_complete({"changes": [good], "changes_incomplete": True})
    assert toolmeta.changes({"changes": "a.txt"}) == [] and toolmeta.any_changes(
        {"changes": "a.txt"})
    assert toolmeta.outside_changes({"outside_changes": [good]}) == [good]


def test_command_fields_are_typed_or_none() -> None:
    assert toolmeta.exit_code({"exit_code": 2}) == 2
    assert toolmeta.exit_code({"exit_code": True}) is None  # a bool is no exit code
    assert toolmeta.exit_code({"exit_code": "0"}) is None
    assert toolmeta.ran_command({"exit_code": None}) and not toolmeta.ran_command({})
    assert toolmeta.timed_out({"timed_out": False}) is False
    assert toolmeta.timed_out({}) is None and toolmeta.timed_out({"timed_out": "yes"}) is None
    assert toolmeta.duration_ms({"duration_ms": 4}) == 4
    assert toolmeta.duration_ms({"duration_ms": "4"}) is None
    assert toolmeta.duration_ms({"duration_ms": True}) is None


def test_preview_facts_read_wrong_types_as_not_known() -> None:
    facts = toolmeta.preview_facts({"resolved": 5, "symlink": 1, "exists": True,
                                    "sha256_before": ["x"], "error": 0})
    assert facts == {"path": "", "resolved": None, "symlink": True, "exists": True,
                     "binary": False, "sha256_before": None, "sha256_after": None,
                     "error": None}
    assert toolmeta.preview_facts({"error": "denied"})["error"] == "denied"


def test_writes_searches_and_host_operations() -> None:
    assert toolmeta.sha256_after({"sha256_after": ""}) is None
    assert toolmeta.written_path({"path": 3}) is None
    assert toolmeta.written_bytes({"bytes": 7}) == 7
    assert toolmeta.still_there({"still_there": ["x"]}) == {}
    assert toolmeta.matches({"matches": 0}) == 0 and toolmeta.matches({}) is None
    assert toolmeta.manifest_entries({"entries": {}}) is None
    assert not toolmeta.manifest_complete({"complete": 1})
    assert toolmeta.chunks({"files": "x"}) == []
    meta = {"resolved": "a", "exists": True, "sha256": "0", "data": "QQ=="}
    assert toolmeta.snapshot(meta) == {"resolved": "a", "exists": True, "sha256": "0"}
    assert toolmeta.snapshot_data(meta) == "QQ==" and toolmeta.snapshot_data({"data": 1}) is None


def test_the_audit_split_lifts_the_result_fields_and_drops_the_change_lists() -> None:
    lifted, rest = toolmeta.for_audit({"exit_code": 1, "changes": [], "outside_changes": 0,
                                       "signal": "SIGKILL", "bytes": 2})
    assert lifted == {"exit_code": 1, "bytes": 2} and rest == {"signal": "SIGKILL"}
    assert toolmeta.change_details({"path": "a", "kind": "file", "change": "created",
                                    "target": None}) == {"change": "created", "file_kind": "file"}
