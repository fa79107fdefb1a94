"""Audit records as OCSF events (Open Cybersecurity Schema Framework 1.8.0), one a line.

Each record becomes one event of the class that fits it (docs/AUDIT.md has the table, field by
field): the run and its container as Application Lifecycle, model requests and tool-call
decisions as API Activity (the decision under `action_id`, `disposition_id` and
`authorizations`), shell commands as Process Activity, file reads and writes as File System
Activity, warnings and errors as Application Error, egress connections as Network Activity.

Every event keeps what a consumer needs to check the chain: `metadata.sequence` is the record's
`seq`, `raw_data` is the canonical form of the record without its `hash` (exactly the bytes
hashed), and `raw_data_hash` is that hash, so `sha256(raw_data) == raw_data_hash.value` and
`json.loads(raw_data)["prev"]` is the previous event's hash.

The mapper is a small state machine read in one pass: it remembers each run's user, host,
provider and container (from `run_start`/`sandbox_start`) and each call's arguments until its
result, so a large log streams.
"""

from __future__ import annotations

import json
import posixpath
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from executor import __version__
from executor.audit_formats import run_ended

OCSF_VERSION = "1.8.0"
"""The OCSF schema version the events conform to."""
FORMAT_VERSION = "sandbox-agent-ocsf/1"
"""This mapping's own version (`metadata.log_version`); docs/AUDIT.md says what changed."""
SHA256 = 3
"""OCSF fingerprint algorithm_id of SHA-256."""
_PRODUCT = {"name": "sandbox-agent", "vendor_name": "sandbox-agent", "version": __version__}
_MAX_PENDING = 10_000
"""Calls remembered while waiting for their results (a call without one is forgotten)."""

# (class_uid, category_uid) of the classes used.
FILE_ACTIVITY = (1001, 1)
PROCESS_ACTIVITY = (1007, 1)
NETWORK_ACTIVITY = (4001, 4)
APPLICATION_LIFECYCLE = (6002, 6)
API_ACTIVITY = (6003, 6)
APPLICATION_ERROR = (6008, 6)
BASE_EVENT = (0, 0)

PROFILE_OF = {"device": "host", "action_id": "security_control",
              "disposition_id": "security_control", "authorizations": "security_control",
              "ai_model": "ai_operation"}
"""The OCSF profile that brings each of these attributes (declared in `metadata.profiles`)."""

INFORMATIONAL, LOW, MEDIUM = 1, 2, 3
SUCCESS, FAILURE = 1, 2
ALLOWED, DENIED = 1, 2
READ_TOOLS = frozenset({"read_file", "list_files", "search_files"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
SHELL_TOOL = "run_shell_command"


@dataclass
class _Run:
    """What a run's later records do not repeat."""

    user: str | None = None
    host: str | None = None
    provider: str | None = None
    container: str | None = None


class OcsfMapper:
    """Turns records, in chain order, into OCSF events."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._calls: OrderedDict[str, Mapping[str, Any]] = OrderedDict()

    def event(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The OCSF event of one record (an unknown kind becomes a Base Event)."""
        mapper = MAPPERS.get(str(record.get("kind")), _base_event)
        event = mapper(self, record)
        profiles = sorted({PROFILE_OF[key] for key in event if key in PROFILE_OF})
        if profiles:  # the attributes a profile adds are valid only where it is declared
            event["metadata"]["profiles"] = profiles
        return event

    # ---------------------------------------------------------------- context

    def run(self, record: Mapping[str, Any]) -> _Run:
        """The remembered facts of the record's run."""
        return self._runs.setdefault(str(record.get("run")), _Run())

    def remember_call(self, record: Mapping[str, Any]) -> None:
        """Keep a call's arguments for its result (bounded)."""
        call_id = record.get("call_id")
        if not isinstance(call_id, str):
            return
        self._calls[call_id] = {"tool": record.get("tool"), "arguments": record.get("arguments")}
        while len(self._calls) > _MAX_PENDING:
            self._calls.popitem(last=False)

    def call_of(self, record: Mapping[str, Any], *, keep: bool = False) -> Mapping[str, Any]:
        """The call a result or write belongs to ({} when not seen)."""
        call_id = record.get("call_id")
        if not isinstance(call_id, str):
            return {}
        return (self._calls.get(call_id) if keep else self._calls.pop(call_id, None)) or {}

    def actor(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """sandbox-agent acting for the person who started the run."""
        actor: dict[str, Any] = {"app_name": "sandbox-agent"}
        user = self.run(record).user
        if user:
            actor["user"] = {"name": user}
        return actor

    def sandbox(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The device tool calls ran on: the run's container (a virtual device)."""
        run = self.run(record)
        device: dict[str, Any] = {"type_id": 6, "name": "sandbox"}
        if run.container:
            device["uid"] = run.container
        if run.host:
            device["hostname"] = run.host
        return device

    def host(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The machine the controller ran on."""
        run = self.run(record)
        return {"type_id": 0, "hostname": run.host} if run.host else {"type_id": 0,
                                                                      "name": "unknown"}


# ---------------------------------------------------------------------- envelope


def envelope(record: Mapping[str, Any], cls: tuple[int, int], activity: int, *,
             severity: int = INFORMATIONAL, name: str | None = None,
             status: int | None = None) -> dict[str, Any]:
    """What every event has: class, activity, time, metadata and the chain facts."""
    class_uid, category = cls
    body = {k: v for k, v in record.items() if k != "hash"}
    event: dict[str, Any] = {
        "class_uid": class_uid, "category_uid": category, "activity_id": activity,
        "type_uid": class_uid * 100 + activity, "severity_id": severity,
        "time": _epoch_ms(record.get("ts")), "metadata": _metadata(record),
        "raw_data": _CANONICAL(body),
        "unmapped": {"kind": record.get("kind"), "session": record.get("session"),
                     "run": record.get("run"), "prev": record.get("prev")},
    }
    if isinstance(record.get("hash"), str):
        event["raw_data_hash"] = {"algorithm_id": SHA256, "value": record["hash"]}
    if name:
        event["activity_name"] = name
    if status is not None:
        event["status_id"] = status
    return event


def _metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "version": OCSF_VERSION, "product": dict(_PRODUCT), "log_name": "audit",
        "log_version": FORMAT_VERSION, "event_code": str(record.get("kind")),
    }
    if type(record.get("seq")) is int:
        meta["sequence"] = record["seq"]
    if isinstance(record.get("hash"), str):
        meta["uid"] = record["hash"]
    if isinstance(record.get("run"), str):
        meta["correlation_uid"] = record["run"]
    if isinstance(record.get("ts"), str):
        meta["original_time"] = record["ts"]
    return meta


def _epoch_ms(ts: Any) -> int:
    try:
        return round(datetime.fromisoformat(str(ts)).timestamp() * 1000)
    except ValueError:
        return 0


def _set(target: dict[str, Any], **values: Any) -> dict[str, Any]:
    """`target` with the values that are not None (OCSF has no nulls for absent facts)."""
    target.update({k: v for k, v in values.items() if v is not None})
    return target


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=True)


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


# ---------------------------------------------------------------------- lifecycle


def _run_start(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    run = m.run(r)
    run.user, run.host = _text(r.get("user")), _text(r.get("host"))
    run.provider, run.container = _text(r.get("provider")), _text(r.get("container_id"))
    event = envelope(r, APPLICATION_LIFECYCLE, 3, status=SUCCESS)
    event["app"] = dict(_PRODUCT)
    event["actor"] = m.actor(r)
    event["device"] = m.host(r)
    event["message"] = f"run started: {r.get('provider')}/{r.get('model')} in {r.get('image')}"
    return event


def _sandbox_start(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    m.run(r).container = _text(r.get("container_id"))
    event = envelope(r, APPLICATION_LIFECYCLE, 3, status=SUCCESS)
    event["app"] = _set({"name": _text(r.get("image")) or "sandbox"},
                        uid=_text(r.get("container_id")), version=_text(r.get("image_digest")))
    event["actor"] = m.actor(r)
    event["device"] = m.sandbox(r)
    _set(event, duration=_int(r.get("duration_ms")))
    event["message"] = "sandbox re-attached" if r.get("reattached") else "sandbox started"
    return event


def _run_end(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    ok = r.get("status") == "ok"
    event = envelope(r, APPLICATION_LIFECYCLE, 4, status=SUCCESS if ok else FAILURE)
    event["app"] = dict(_PRODUCT)
    event["actor"] = m.actor(r)
    event["device"] = m.host(r)
    _set(event, duration=_int(r.get("duration_ms")), status_detail=_text(r.get("status")))
    event["message"] = f"run ended: {run_ended(r)}"
    return event


def _run_abandoned(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    """A resumed session's previous run died without recording its end."""
    event = envelope(r, APPLICATION_LIFECYCLE, 4, severity=LOW, status=FAILURE,
                     name="Abandoned")
    event["app"] = dict(_PRODUCT)
    event["actor"] = m.actor(r)
    event["device"] = m.host(r)
    calls = r.get("calls_without_result")
    event["count"] = len(calls) if isinstance(calls, list) else 0
    event["status_detail"] = "the previous run died without its end"
    return event


# ---------------------------------------------------------------------- API activity


def _api(m: OcsfMapper, r: Mapping[str, Any], activity: int, operation: str,
         **options: Any) -> dict[str, Any]:
    event = envelope(r, API_ACTIVITY, activity, **options)
    event["actor"] = m.actor(r)
    event["api"] = {"operation": operation, "service": {"name": "sandbox-agent"}}
    event["src_endpoint"] = _set({"name": "sandbox-agent"}, hostname=m.run(r).host)
    return event


def _model_request(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    event = _api(m, r, 1, "chat", name="Model request", status=SUCCESS)
    model = _text(r.get("model")) or "unknown"
    event["ai_model"] = {"name": model, "ai_provider": m.run(r).provider or "unknown"}
    _set(event, duration=_int(r.get("duration_ms")))
    event["unmapped"]["gen_ai"] = {
        "prompt_tokens": r.get("prompt_tokens"), "completion_tokens": r.get("completion_tokens"),
        "messages": r.get("messages"), "prompt_bytes": r.get("prompt_bytes"),
    }
    return event


def _retry(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    event = _api(m, r, 1, "chat", name="Model request retried", severity=LOW, status=FAILURE)
    _set(event, status_detail=_text(r.get("reason")))
    event["unmapped"]["attempt"] = r.get("attempt")
    return event


def _tool_call(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    m.remember_call(r)
    allowed = r.get("decision") == "allow"
    event = _api(m, r, 99, str(r.get("tool")), name="Tool call",
                 severity=INFORMATIONAL if allowed else LOW)
    event["action_id"] = ALLOWED if allowed else DENIED
    event["disposition_id"] = 1 if allowed else (25 if r.get("decision") == "reject" else 2)
    policy = _set({"name": _text(r.get("rule")) or "none"}, desc=_text(r.get("reason")))
    event["authorizations"] = [{"decision": str(r.get("decision")), "policy": policy}]
    event["api"]["request"] = _set({"uid": _text(r.get("call_id")) or "none"})
    event["unmapped"]["approved_by"] = r.get("approved_by")
    who = r.get("approved_by") or r.get("rule")
    event["message"] = f"{r.get('tool')}: {r.get('decision')} ({who})"
    return event


# ---------------------------------------------------------------------- tool results


def _tool_result(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    tool = str(r.get("tool"))
    call = m.call_of(r)
    if tool == SHELL_TOOL:
        return _shell_result(m, r, call)
    if tool in READ_TOOLS or tool in WRITE_TOOLS:
        return _file_result(m, r, call)
    event = _api(m, r, 99, tool, name="Tool result", status=SUCCESS if r.get("ok") else FAILURE)
    event["api"]["request"] = {"uid": _text(r.get("call_id")) or "none"}
    _set(event, duration=_int(r.get("duration_ms")))
    return event


def _status(r: Mapping[str, Any]) -> int:
    return SUCCESS if r.get("ok") else FAILURE


def _arguments(call: Mapping[str, Any]) -> Mapping[str, Any]:
    arguments = call.get("arguments")
    return arguments if isinstance(arguments, Mapping) else {}


def _shell_result(m: OcsfMapper, r: Mapping[str, Any], call: Mapping[str, Any]) -> dict[str, Any]:
    event = envelope(r, PROCESS_ACTIVITY, 2, status=_status(r))
    event["actor"] = m.actor(r)
    event["device"] = m.sandbox(r)
    process = {"uid": _text(r.get("call_id")) or "none", "sandbox": "sandbox-agent"}
    event["process"] = _set(process, cmd_line=_text(_arguments(call).get("command")))
    _set(event, exit_code=_int(r.get("exit_code")), duration=_int(r.get("duration_ms")))
    if r.get("timed_out"):
        event["status_detail"] = "timed out"
    return event


def _file_result(m: OcsfMapper, r: Mapping[str, Any], call: Mapping[str, Any]) -> dict[str, Any]:
    tool = str(r.get("tool"))
    path = _text(_arguments(call).get("path")) or "."
    if tool in READ_TOOLS:
        activity = 2
    else:
        activity = 1 if r.get("sha256_before") is None and r.get("sha256_after") else 3
    event = envelope(r, FILE_ACTIVITY, activity, status=_status(r))
    event["actor"] = m.actor(r)
    event["device"] = m.sandbox(r)
    folder = tool != "read_file" and tool not in WRITE_TOOLS
    event["file"] = _file(path, folder=folder, digest=_text(r.get("sha256_after")))
    _set(event, duration=_int(r.get("duration_ms")))
    event["unmapped"]["tool"] = tool
    return event


def _file(path: str, *, folder: bool = False, digest: str | None = None,
          size: Any = None, kind: Any = None) -> dict[str, Any]:
    type_id = 2 if folder else {"symlink": 7, "dir": 2, "directory": 2}.get(str(kind), 1)
    file: dict[str, Any] = {"name": posixpath.basename(path.rstrip("/")) or path,
                            "path": path, "type_id": type_id}
    if digest:
        file["hashes"] = [{"algorithm_id": SHA256, "value": digest}]
    return _set(file, size=_int(size))


_CHANGE_ACTIVITY = {"created": 1, "deleted": 4, "mode": 6, "modified": 3, "type": 3}


def _write(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    before, after = _text(r.get("sha256_before")), _text(r.get("sha256_after"))
    default = 1 if before is None and after else (4 if after is None else 3)
    activity = _CHANGE_ACTIVITY.get(str(r.get("change")), default)
    event = envelope(r, FILE_ACTIVITY, activity)
    event["actor"] = m.actor(r)
    if r.get("source") == "outside":  # the person (or something else) edited the tree
        event["actor"] = {"app_name": "outside sandbox-agent"}
    event["device"] = m.sandbox(r)
    path = _text(r.get("path")) or "unknown"
    kind = r.get("file_kind")
    event["file"] = _file(path, digest=before, size=r.get("size_before"), kind=kind)
    if after is not None or activity != 4:
        event["file_result"] = _file(path, digest=after, size=r.get("bytes"), kind=kind)
    event["unmapped"].update({k: r.get(k) for k in ("tool", "call_id", "source", "change",
                                                     "lines_changed") if r.get(k) is not None})
    return event


def _apply(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    """A copy session's changeset written into (or, for undo, restored in) the tree."""
    event = envelope(r, FILE_ACTIVITY, 3, name="Apply" if r.get("kind") == "apply" else "Undo")
    user = _text(r.get("user")) or m.run(r).user
    event["actor"] = _set({"app_name": "sandbox-agent"}, user={"name": user} if user else None)
    event["device"] = _set({"type_id": 0, "name": "project"}, hostname=_text(r.get("host")))
    event["file"] = {"name": "project tree", "type_id": 2}
    approver = _text(r.get("approved_by"))
    if approver:
        event["authorizations"] = [{"decision": "allow", "policy": {"name": approver}}]
    files = r.get("files")
    event["count"] = len(files) if isinstance(files, list) else 0
    event["unmapped"].update({"changeset": r.get("changeset"), "journal_id": r.get("journal_id"),
                              "approved_by": approver})
    return event


# ---------------------------------------------------------------------- the rest


def _problem(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    error = r.get("kind") == "error"
    event = envelope(r, APPLICATION_ERROR, 1, severity=MEDIUM if error else LOW,
                     name="Error" if error else "Warning")
    event["message"] = _text(r.get("message")) or ""
    _set(event, status_code=_text(r.get("error_type")))
    event["unmapped"]["exit_code"] = r.get("exit_code")
    return event


def _connection(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    """An egress connection through the proxy (planned: `host`, `port`, `decision`, `rule`)."""
    allowed = r.get("decision") == "allow"
    event = envelope(r, NETWORK_ACTIVITY, 1 if allowed else 5, severity=INFORMATIONAL
                     if allowed else LOW)
    event["action_id"] = ALLOWED if allowed else DENIED
    event["disposition_id"] = 1 if allowed else 2
    event["src_endpoint"] = m.sandbox(r) | {"type_id": 6}
    event["dst_endpoint"] = _set({"hostname": _text(r.get("host")) or "unknown"},
                                 port=_int(r.get("port")), ip=_text(r.get("address")))
    if r.get("rule") is not None:
        event["authorizations"] = [{"decision": str(r.get("decision")),
                                    "policy": {"name": _text(r.get("rule"))}}]
    return event


def _base_event(m: OcsfMapper, r: Mapping[str, Any]) -> dict[str, Any]:
    """A kind this version does not know: still exported, with its raw data."""
    return envelope(r, BASE_EVENT, 99, name=str(r.get("kind")))


Mapper = Callable[[OcsfMapper, Mapping[str, Any]], dict[str, Any]]
MAPPERS: dict[str, Mapper] = {
    "run_start": _run_start, "sandbox_start": _sandbox_start, "run_end": _run_end,
    "run_abandoned": _run_abandoned,
    "model_request": _model_request, "retry": _retry, "tool_call": _tool_call,
    "tool_result": _tool_result, "write": _write, "apply": _apply, "undo": _apply,
    "warning": _problem, "error": _problem, "connection": _connection,
}
"""The mapping of each record kind (executor.audit.RECORD_KINDS and PLANNED_KINDS)."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              allow_nan=False).encode
"""executor.audit.canonical as text, one encoder for the whole export (the chain test,
test_events_keep_the_chain_so_a_consumer_can_verify_it, shows they agree)."""
_EVENT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


def export_ocsf(records: Iterable[Mapping[str, Any]], out: TextIO) -> int:
    """Write one OCSF event a line (ASCII JSON, so inert anywhere); returns the count."""
    mapper = OcsfMapper()
    count = 0
    for record in records:
        out.write(_EVENT(mapper.event(record)) + "\n")
        count += 1
    return count
