"""The audit log: hash-chained NDJSON records of everything a run does.

Layout: `<project state dir>/audit/YYYY-MM-DD.ndjson` (UTC day of the write; the state dir is
per user and outside the project tree, see executor/state.py; the directory can be overridden
with one outside the project), one record a line, directory mode 0700, files 0600. Every file
is opened without following links and without blocking, and must be a regular file we own: a
symlink or FIFO in place of a day file is an error, never followed and never a hang. A lock file
`.lock` beside the day files serialises writers (one `fcntl.flock` held while the tail is
read and the record appended), so concurrent runs on one root keep one chain. When records
are fsynced: executor/durable.py.

Record: `{"seq": n, "ts": "2024-05-01T12:00:00.000000Z", "kind": ..., "session": ...,
"run": ..., <fields>, "prev": <hash of record n-1>, "hash": <hash of this record>}`.

Canonical form: `json.dumps(record, sort_keys=True, separators=(",", ":"),
ensure_ascii=True, allow_nan=False)` encoded as ASCII. `hash` is the lowercase hex
SHA-256 of the canonical form of the record *without* its `hash` key; the line written
is the canonical form *with* it, plus `\\n`. `seq` starts at 1 and the first record's
`prev` is 64 zeros. The chain runs across day files: the first record of a day carries
the hash of the last record of the previous file. See docs/AUDIT.md.

Every value except `seq`, `ts`, `prev` and `hash` passes the `Redactor` before it is
hashed and written. A failed write is reported and the run goes on, unless the log is
`required`, when it raises `AuditError` (the loop records a tool call before running it,
so a required log stops the run before the call executes).
"""

from __future__ import annotations

import csv
import enum
import getpass
import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Literal, TextIO

from executor import toolmeta
from executor.audit_chain import (  # the format's names, where they always were
    DAY_FILE,
    LOCK_NAME,
    ZERO_HASH,
    ChainFiles,
    canonical,
    day_files,
    record_hash,
    sealed,
)
from executor.audit_chain import Head as _Head
from executor.errors import AuditError, AuditIntegrityError, ConfigError, SandboxAgentError
from executor.redact import Redactor
from executor.state import (
    check_outside,
    ensure_project_dir,
    open_private,
    private_dir,
    project_dir,
    real_root,
)
from executor.text import inert_line

if TYPE_CHECKING:  # pydantic is not needed to verify or read a log: `audit verify` starts fast
    from executor.hooks import Event, HookBus, Subscriber
    from executor.toolmeta import ChangeRecord

log = logging.getLogger(__name__)

__all__ = [
    "DAY_FILE",
    "LOCK_NAME",
    "ZERO_HASH",
    "AuditLog",
    "canonical",
    "read_records",
    "record_hash",
    "verify",
]

RESERVED = frozenset({"seq", "ts", "kind", "session", "run", "prev", "hash"})
"""Keys `record` sets itself; callers may not pass them as fields."""
RECORD_KINDS = (
    "run_start", "sandbox_start", "model_request", "tool_call", "tool_result", "write", "apply",
    "undo", "retry", "warning", "error", "run_end", "run_abandoned", "connection",
)
"""Every kind of record written (docs/AUDIT.md); each export format maps each one (a test
checks it against the `record("...")` calls in executor/)."""
PLANNED_KINDS: tuple[str, ...] = ()
"""Kinds the formats already map but nothing writes yet."""

WarningCallback = Callable[[str], None]
Clock = Callable[[], datetime]


# ---------------------------------------------------------------------------- format


def utc_now() -> datetime:
    """The current time in UTC (the default clock)."""
    return datetime.now(UTC)


def format_ts(moment: datetime) -> str:
    """ISO-8601 UTC with microseconds and a `Z` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_audit_dir(root: Path) -> Path:
    """`<project state dir>/audit` (not created)."""
    return project_dir(root) / "audit"


def audit_dir_for(root: Path, override: Path | str | None = None) -> Path:
    """The audit directory for `root`: `override` (relative to the working dir) or the default."""
    if override is None or str(override) == "":
        return default_audit_dir(root)
    return Path(override).expanduser().absolute()


def _plain(value: Any) -> Any:
    """`value` as JSON-native data (what is hashed is exactly what will be read back)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # most values: at once
        return value
    if kind is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        return _plain(dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, datetime):
        return format_ts(value)
    if isinstance(value, PurePath | bytes | bytearray):
        return os.fsdecode(value) if isinstance(value, PurePath) else bytes(value).hex()
    return str(value)


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (e.g. an arbitrary uid in a container)
        return str(os.getuid())


# ---------------------------------------------------------------------------- writer


class AuditLog:
    """Appends redacted, hash-chained records for one run to an audit directory."""

    def __init__(
        self,
        directory: Path,
        *,
        session: str,
        required: bool = False,
        max_result_bytes: int = 4096,
        audit_prompts: bool = False,
        redactor: Redactor | None = None,
        clock: Clock = utc_now,
        on_warning: WarningCallback | None = None,
        state_root: Path | None = None,
    ) -> None:
        self.directory = directory
        self.session = session
        self.required = required
        self.max_result_bytes = max_result_bytes
        self.audit_prompts = audit_prompts
        self.run_id = uuid.uuid4().hex[:12]
        """Tells apart records of concurrent runs in one session."""
        self.failures = 0
        """Records that could not be written."""
        self._redactor = redactor or Redactor.from_environ()
        self._clock = clock
        self._on_warning = on_warning
        self._state_root = state_root
        self._lock = threading.Lock()
        self._files: ChainFiles | None = None
        self._warned = False
        self._paths: dict[str, str] = {}
        self._started: float | None = None
        self._prepared = False

    @classmethod
    def for_root(
        cls, root: Path, *, session: str, audit_dir: Path | str | None = None, **options: Any
    ) -> AuditLog:
        """The log of `root` (`audit_dir` overrides the default); refuses dirs in the project."""
        directory = audit_dir_for(root, audit_dir)
        check_outside(real_root(root), directory, "the audit directory")
        state_root = root if audit_dir is None or str(audit_dir) == "" else None
        return cls(directory, session=session, state_root=state_root, **options)

    # ------------------------------------------------------------------ recording

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one record; returns it (as written, or as attempted when writing failed)."""
        return self._record(kind, fields)

    def _record(self, kind: str, fields: dict[str, Any], clean: tuple[str, ...] = ()
                ) -> dict[str, Any]:
        """`record`; the string fields named in `clean` are already what redaction makes of
        them (it would change nothing) and are not redacted again."""
        clash = RESERVED.intersection(fields)
        if clash:
            raise ValueError(f"reserved audit field(s): {', '.join(sorted(clash))}")
        body = {"kind": kind, "session": self.session, "run": self.run_id, **fields}
        kept = {name: body.pop(name) for name in clean}
        try:
            body = {**self._redactor.value(_plain(body)), **kept}
            return self._append(body)
        except (OSError, ValueError, TypeError, SandboxAgentError) as exc:
            self._fail(exc)
            return body

    def run_start(
        self,
        *,
        root: str | Path,
        provider: str,
        model: str,
        image: str,
        image_digest: str | None,
        container_id: str | None,
        mount_mode: str,
        policy_source: str,
        argv: Sequence[str] = (),
        user: str | None = None,
        host: str | None = None,
        session: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Who started which run, where, with what model, sandbox and policy.

        `session` (part of the hook payload) is not a field: every record carries the log's own.
        """
        self._started = time.monotonic()
        return self.record(
            "run_start", user=user or _current_user(), host=host or socket.gethostname(),
            pid=os.getpid(), root=str(root), provider=provider, model=model, image=image,
            image_digest=image_digest, container_id=container_id, mount_mode=mount_mode,
            policy_source=policy_source, argv=self._redactor.argv(argv), **extra,
        )

    def sandbox_start(
        self,
        *,
        container_id: str,
        image: str,
        image_digest: str,
        mount_mode: str,
        duration_ms: float | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The container a run started when it was first needed (its run_start has none)."""
        return self.record(
            "sandbox_start", container_id=container_id, image=image, image_digest=image_digest,
            mount_mode=mount_mode, duration_ms=_ms(duration_ms), **extra,
        )

    def model_request(
        self,
        *,
        messages: int,
        prompt_bytes: int,
        duration_ms: float,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        model: str | None = None,
        reply: str | None = None,
        prompt: Any = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """One model request: sizes, duration, tokens; prompt and reply only with audit_prompts."""
        if reply is not None:
            extra["reply_bytes"] = _utf8_len(reply)
        if self.audit_prompts:
            extra.update({k: v for k, v in (("prompt", prompt), ("reply", reply)) if v is not None})
        return self.record(
            "model_request", model=model, messages=messages, prompt_bytes=prompt_bytes,
            duration_ms=_ms(duration_ms), prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, **extra,
        )

    def tool_call(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        decision: str,
        rule: str,
        reason: str | None = None,
        approved_by: str | None = None,
        call_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A tool call and the policy decision on it (record it BEFORE running the call)."""
        if call_id is not None and isinstance(arguments.get("path"), str):
            self._paths[call_id] = arguments["path"]  # the write record of its result needs it
        return self.record(
            "tool_call", tool=tool, call_id=call_id,
            arguments=_capped(arguments, self._redactor.text),
            decision=decision, rule=rule, reason=reason, approved_by=approved_by, **extra,
        )

    def tool_result(
        self,
        *,
        tool: str,
        ok: bool,
        output: str = "",
        meta: Mapping[str, Any] | None = None,
        call_id: str | None = None,
        path: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A tool result with a capped preview; a write's hashes also get a `write` record.

        Files a shell command changed (`meta["changes"]`) and files changed outside tool calls
        since the last command (`meta["outside_changes"]`) get one `write` record each.
        """
        meta = dict(meta or {})
        changed = [(c, "command") for c in toolmeta.changes(meta)]
        changed += [(c, "outside") for c in toolmeta.outside_changes(meta)]
        lifted, meta = toolmeta.for_audit(meta)
        if isinstance(lifted.get("duration_ms"), float):
            lifted["duration_ms"] = _ms(lifted["duration_ms"])
        preview, truncated = self._preview(output)
        record = self._record("tool_result", dict(
            tool=tool, call_id=call_id, ok=ok, output_bytes=_utf8_len(output),
            preview=preview, preview_truncated=truncated, **lifted,
            **({"meta": meta} if meta else {}), **extra,
        ), clean=("preview",) if preview == output else ())  # nothing to redact in it: once
        remembered = self._paths.pop(call_id, None) if call_id is not None else None
        if "sha256_after" in lifted:
            self.write(
                tool=tool, path=path or toolmeta.written_path(meta) or remembered,
                call_id=call_id,
                sha256_before=lifted.get("sha256_before"), sha256_after=lifted["sha256_after"],
                nbytes=lifted.get("bytes"), lines_changed=lifted.get("lines_changed"),
            )
        for change, source in changed:
            self._change(tool if source == "command" else None, call_id, change, source)
        return record

    def _change(self, tool: str | None, call_id: str | None, change: ChangeRecord,
                source: str) -> None:
        """A `write` record for one file a command (or someone outside) created/changed/deleted."""
        extra = toolmeta.change_details(change)
        self.record(
            "write", tool=tool, call_id=call_id, path=change.get("path"),
            sha256_before=change.get("sha256_before"), sha256_after=change.get("sha256_after"),
            bytes=change.get("size_after"), lines_changed=None, source=source, **extra,
        )

    def write(
        self,
        *,
        tool: str,
        path: str | None,
        sha256_before: str | None,
        sha256_after: str,
        nbytes: int | None,
        lines_changed: int | None,
        call_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A file written by a tool: its hashes before (None: new file) and after."""
        return self.record(
            "write", tool=tool, call_id=call_id, path=path, sha256_before=sha256_before,
            sha256_after=sha256_after, bytes=nbytes, lines_changed=lines_changed, **extra,
        )

    def retry(
        self,
        *,
        attempt: int,
        reason: str,
        delay: float | None = None,
        url: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Attempt `attempt` failed for `reason`; the next one follows in `delay` seconds."""
        delay_ms = _ms(delay * 1000) if delay is not None else None
        return self.record(
            "retry", attempt=attempt, reason=reason, delay_ms=delay_ms, url=url, **extra
        )

    def error(
        self,
        *,
        message: str,
        error_type: str | None = None,
        exit_code: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """An error that ended or disturbed the run."""
        return self.record(
            "error", error_type=error_type, message=message, exit_code=exit_code, **extra
        )

    def warning(self, *, message: str, **extra: Any) -> dict[str, Any]:
        """Something the user was warned about."""
        return self.record("warning", message=message, **extra)

    def connection(self, *, host: str, port: int, decision: str, **fields: Any) -> dict[str, Any]:
        """One egress connection: destination, resolved address, decision and who allowed it,
        bytes each way, duration, the tool call it belongs to."""
        return self.record("connection", host=host, port=port, decision=decision, **fields)

    def run_end(
        self,
        *,
        turns: int | None,
        status: str = "ok",
        duration_ms: float | None = None,
        answer: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The run finished: status ("ok", "error", "interrupted", ...), turns and duration.

        Without `duration_ms` the time since `run_start` is used; the answer is kept as a
        capped preview.
        """
        if duration_ms is None and self._started is not None:
            duration_ms = (time.monotonic() - self._started) * 1000
        if answer is not None:
            extra["answer_bytes"] = _utf8_len(answer)
            extra["answer_preview"] = self._preview(answer)[0]
        return self.record(
            "run_end", status=status, turns=turns, duration_ms=_ms(duration_ms), **extra
        )

    def attach(self, bus: HookBus, *, exclude: Iterable[str] = ()) -> Subscriber:
        """Record hook events (`complete` as `run_end`); returns the subscriber.

        A required log subscribes as critical: its `AuditError` propagates out of `emit`,
        so a failed `tool_call` record stops the run before the call executes.
        """
        left_out = set(exclude)
        kinds: list[Any] = [kind for kind in RECORDED_EVENTS if kind not in left_out]
        return bus.subscribe(self.record_event, *kinds, critical=self.required)

    def record_event(self, event: Event) -> dict[str, Any] | None:
        """The record of one hook event (None: a kind the log does not record)."""
        from executor import hooks as h  # pydantic only where events exist: `verify` starts fast

        if isinstance(event, h.RunStartEvent):
            parent = {"parent_session": event.parent_session} if event.parent_session else {}
            return self.run_start(
                root=event.root, provider=event.provider, model=event.model, image=event.image,
                image_digest=event.image_digest, container_id=event.container_id,
                mount_mode=event.mount_mode, policy_source=event.policy_source, argv=event.argv,
                user=event.user, host=event.host, runtime=event.runtime, engine=event.engine,
                workspace=event.workspace, instructions=event.instructions, skills=event.skills,
                tools=event.tools, **parent)
        if isinstance(event, h.SandboxStartEvent):
            return self.sandbox_start(
                container_id=event.container_id, image=event.image,
                image_digest=event.image_digest, mount_mode=event.mount_mode,
                duration_ms=event.duration_ms, container_name=event.container_name,
                network=event.network, user=event.user, workspace=event.workspace,
                runtime=event.runtime, engine=event.engine, reattached=event.reattached)
        if isinstance(event, h.ModelRequestEvent):
            return self.model_request(
                messages=event.messages, prompt_bytes=event.prompt_bytes,
                duration_ms=event.duration_ms, prompt_tokens=event.prompt_tokens,
                completion_tokens=event.completion_tokens, model=event.model, reply=event.reply,
                prompt=event.prompt, tools=event.tools)
        if isinstance(event, h.ToolCallEvent):
            return self.tool_call(
                tool=event.tool, arguments=event.arguments, decision=event.decision,
                rule=event.rule, reason=event.reason, approved_by=event.approved_by,
                call_id=event.call_id)
        if isinstance(event, h.ToolResultEvent):
            return self.tool_result(tool=event.tool, ok=event.ok, output=event.output,
                                    meta=event.meta, call_id=event.call_id)
        return self._record_other(event)

    def _record_other(self, event: Event) -> dict[str, Any] | None:
        from executor import hooks as h

        if isinstance(event, h.RetryEvent):
            return self.retry(attempt=event.attempt, reason=event.reason, delay=event.delay,
                              url=event.url)
        if isinstance(event, h.CompleteEvent):
            return self.run_end(turns=event.turns, status=event.status,
                                duration_ms=event.duration_ms, answer=event.answer)
        if isinstance(event, h.ErrorEvent):
            return self.error(message=event.message, error_type=event.error_type,
                              exit_code=event.exit_code)
        if isinstance(event, h.WarningEvent):
            return self.warning(message=event.message)
        if isinstance(event, h.ConnectionEvent):
            return self.connection(**event.data)
        return None

    # ------------------------------------------------------------------ internals

    def _preview(self, output: str) -> tuple[str, bool]:
        """Redact first, then cap: a cut must never expose the head of a secret."""
        data = self._redactor.text(output).encode("utf-8", "surrogatepass")
        if len(data) <= self.max_result_bytes:
            return data.decode("utf-8", "replace"), False
        return data[: self.max_result_bytes].decode("utf-8", "ignore"), True

    def _append(self, body: dict[str, Any]) -> dict[str, Any]:
        files = self._prepare_dir()
        with self._lock, files.locked() as names:
            head = files.head(names)
            now = self._clock()
            record = {**body, "seq": head.seq + 1, "ts": format_ts(now), "prev": head.hash}
            record["hash"], line = sealed(record)
            files.append(self._target(names, now), line, _Head(record["seq"], record["hash"]))
        self._warned = False
        return record

    def _target(self, names: Sequence[str], now: datetime) -> str:
        """Today's file, or the newest one if the clock went back (the order stays the chain's)."""
        name = now.astimezone(UTC).strftime("%Y-%m-%d") + ".ndjson"
        if names and names[-1] > name:
            ahead = (now + timedelta(days=2)).astimezone(UTC).strftime("%Y-%m-%d") + ".ndjson"
            if names[-1] > ahead:  # a planted far-future file would capture every record
                raise ValueError(f"day file {names[-1]} is dated in the future; check the "
                                 "clock, or move that file away")
            name = names[-1]
        return name

    def _prepare_dir(self) -> ChainFiles:
        """Make and check the directory: before the first record and after a failed one (a
        file in it is opened without following links and checked whenever it is not the
        one our last record left open: executor/audit_chain.py)."""
        files = self._files
        if files is not None and self._prepared and files.directory == self.directory:
            return files
        if self._state_root is not None:
            ensure_project_dir(self._state_root)
        private_dir(self.directory, parents=True)
        if files is None or files.directory != self.directory:
            if files is not None:
                files.close()
            files = self._files = ChainFiles(self.directory)
        self._prepared = True
        return files

    def close(self) -> None:
        """Close the files the log holds open between records (a later record reopens them)."""
        if self._files is not None:
            self._files.close()

    def _fail(self, exc: Exception) -> None:
        self.failures += 1
        self._prepared = False
        if self._files is not None:
            self._files.close()  # the next record opens and checks everything again
        error = AuditError(
            f"audit record could not be written to {self.directory}: {exc}",
            fix="make the audit directory writable (or run without --audit-required)",
        )
        if self.required:
            raise error from exc
        if self._warned:
            log.debug("%s", error.message)
            return
        self._warned = True
        message = f"{error.message}; the run continues without a complete audit trail"
        log.warning("%s", message)
        if self._on_warning:
            self._on_warning(message)


RECORDED_EVENTS = ("run_start", "sandbox_start", "model_request", "tool_call", "tool_result",
                   "retry", "complete", "error", "warning", "connection")
"""The hook events the log records (`complete` as `run_end`)."""
ARGUMENT_MAX_BYTES = 16 * 1024
"""A longer string argument (a write's content) is kept as its head, length and SHA-256."""


def _capped(arguments: Mapping[str, Any], redact: Callable[[str], str]) -> dict[str, Any]:
    """Tool arguments with long strings cut: the model chooses their size, the log must not.

    Redacted before the cut, so a secret across the cut cannot leave its head behind.
    """
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else b""
        if len(data) <= ARGUMENT_MAX_BYTES:
            out[key] = value
            continue
        kept = redact(value).encode("utf-8", "surrogatepass")
        head = kept[:ARGUMENT_MAX_BYTES].decode("utf-8", "ignore")
        digest = hashlib.sha256(data).hexdigest()
        out[key] = f"{head}[... {len(data)} bytes in all, sha256 {digest}]"
    return out




# ---------------------------------------------------------------------------- verify

ProblemKind = Literal["broken", "edited", "removed", "inserted", "reordered"]


@dataclass(frozen=True)
class AuditProblem:
    """The first place where the chain does not hold."""

    kind: ProblemKind
    file: str
    """Day file name."""
    line: int
    """1-based line in that file."""
    seq: int | None
    """The record's sequence number, when it could be read."""
    detail: str

    def __str__(self) -> str:
        seq = f", seq {self.seq}" if self.seq is not None else ""
        return f"{self.kind} record at {self.file} line {self.line}{seq}: {self.detail}"


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`: ok, empty, or the first problem."""

    path: str
    files: tuple[str, ...]
    records: int
    """Records checked and found intact (before the problem, if any)."""
    head_seq: int
    """Sequence number of the last intact record (0 when none)."""
    head_hash: str
    """Hash of the last intact record: keep it elsewhere to detect a truncated tail later."""
    problem: AuditProblem | None = None

    @property
    def ok(self) -> bool:
        """No problem found (an empty log is ok)."""
        return self.problem is None

    @property
    def empty(self) -> bool:
        """No records at all (missing directory, no day files, or empty files)."""
        return self.records == 0 and self.problem is None

    def raise_for_problem(self) -> None:
        """Raise `AuditIntegrityError` naming the first problem, if there is one."""
        if self.problem is not None:
            raise AuditIntegrityError(
                f"audit log {self.path} failed verification: {self.problem}",
                fix="compare with a backup or export; records after this point are not trusted",
            )


@dataclass(frozen=True)
class _Entry:
    """One line of the log as verify sees it."""

    file: str
    line: int
    first_in_file: bool
    seq: int | None = None
    prev: str | None = None
    hash: str | None = None
    error: tuple[ProblemKind, str] | None = None


def verify(path: Path) -> VerifyReport:
    """Check every record of an audit directory (or of one exported .jsonl file)."""
    files = _files_of(path)
    entries = [entry for file in files for entry in _entries(file)]
    expected, good = _Head(0, ZERO_HASH), 0
    for index, entry in enumerate(entries):
        problem = entry_problem(entries, index, expected)
        if problem:
            return _report(path, files, good, expected, problem)
        expected, good = _Head(entry.seq or 0, entry.hash or ""), good + 1
    return _report(path, files, good, expected, None)


def _report(
    path: Path, files: Sequence[Path], good: int, head: _Head, problem: AuditProblem | None
) -> VerifyReport:
    return VerifyReport(
        path=str(path), files=tuple(f.name for f in files), records=good,
        head_seq=head.seq, head_hash=head.hash, problem=problem,
    )


def _files_of(path: Path) -> list[Path]:
    """One exported file, or the day files of a directory (a link is not followed)."""
    return [path] if path.is_file() and not path.is_symlink() else day_files(path)


def _read(path: Path) -> bytes:
    """A log file's bytes; a link, FIFO or device raises OSError instead of being followed."""
    with os.fdopen(open_private(path, os.O_RDONLY, owner=False), "rb") as f:
        return f.read()


def _entries(path: Path) -> Iterator[_Entry]:
    try:
        data = _read(path)
    except OSError as exc:
        yield _Entry(path.name, 1, True, error=("broken", f"cannot be read: {exc.strerror or exc}"))
        return
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last record
    for number, raw in enumerate(lines, start=1):
        yield _check_line(path.name, number, raw)


def _check_line(file: str, number: int, raw: bytes) -> _Entry:
    """Parse one line and check it against its own hash."""
    try:
        record = json.loads(raw)
    except ValueError:
        return _Entry(file, number, number == 1, error=("broken", "not valid JSON (torn/edited)"))
    seq = record.get("seq") if isinstance(record, dict) else None
    if type(seq) is not int or not isinstance(record.get("prev"), str):
        return _Entry(file, number, number == 1, error=("broken", "not an audit record"))
    entry = _Entry(file, number, number == 1, seq=seq, prev=record["prev"], hash=record.get("hash"))
    if record.get("hash") != record_hash(record):
        return _with_error(entry, "edited", "hash mismatch: the record was changed after writing")
    if canonical(record) != raw:
        return _with_error(entry, "edited", "line is not in canonical form (re-written)")
    return entry


def _with_error(entry: _Entry, kind: ProblemKind, detail: str) -> _Entry:
    return _Entry(
        file=entry.file, line=entry.line, first_in_file=entry.first_in_file, seq=entry.seq,
        prev=entry.prev, hash=entry.hash, error=(kind, detail),
    )


def entry_problem(entries: Sequence[_Entry], index: int, expected: _Head) -> AuditProblem | None:
    """What is wrong with `entries[index]` given the head before it (None if it links on)."""
    entry = entries[index]
    if entry.error:
        return _problem(entry, *entry.error)
    want = expected.seq + 1
    assert entry.seq is not None
    if entry.seq == want and entry.prev == expected.hash:
        return None
    if entry.seq > want:
        return _gap(entries, index, want)
    if entry.seq < want:
        return _backwards(entries, index)
    before = entries[index - 1] if index else None
    where = f"{before.file} line {before.line}" if before else "the start"
    return _problem(
        entry, "edited",
        f"prev does not match the hash of seq {expected.seq} ({where}): that record was "
        "replaced or forged",
    )


def _gap(entries: Sequence[_Entry], index: int, want: int) -> AuditProblem:
    """The record skips ahead: the missing ones are later (reordered) or gone (removed)."""
    entry = entries[index]
    assert entry.seq is not None
    later = next(
        (e for e in entries[index + 1 :] if e.seq is not None and want <= e.seq < entry.seq), None
    )
    if later:
        return _problem(
            entry, "reordered",
            f"seq {entry.seq} comes before seq {later.seq} ({later.file} line {later.line})",
        )
    missing = f"seq {want}" if want == entry.seq - 1 else f"seq {want}..{entry.seq - 1}"
    if index == 0:
        return _problem(entry, "removed", f"{missing} missing at the start of the log")
    before = entries[index - 1]
    if entry.first_in_file:
        return _problem(
            entry, "removed",
            f"{missing} missing between {before.file} and {entry.file} (a day file, or the end "
            f"of {before.file}, was removed)",
        )
    return _problem(entry, "removed", f"{missing} missing before this line")


def _backwards(entries: Sequence[_Entry], index: int) -> AuditProblem:
    """The record repeats or goes back: an inserted copy, a forged record, or a move."""
    entry = entries[index]
    twin = next((e for e in entries[:index] if e.seq == entry.seq), None)
    if twin is None:
        return _problem(entry, "reordered", f"seq {entry.seq} appears after a later record")
    if twin.hash == entry.hash:
        return _problem(
            entry, "inserted", f"a copy of the record at {twin.file} line {twin.line}"
        )
    return _problem(
        entry, "inserted",
        f"seq {entry.seq} is also used at {twin.file} line {twin.line} (one of them was inserted)",
    )


def _problem(entry: _Entry, kind: ProblemKind, detail: str) -> AuditProblem:
    return AuditProblem(kind=kind, file=entry.file, line=entry.line, seq=entry.seq, detail=detail)


# ---------------------------------------------------------------------------- reading


def read_records(
    path: Path, *, session: str | None = None, since: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """Records of an audit directory (or file) in order; unreadable lines are skipped."""
    for file in _files_of(path):
        try:
            data = _read(file)
        except OSError as exc:
            raise AuditError(f"cannot read {file}: {exc.strerror or exc}") from exc
        for raw in data.splitlines():
            record = _load(raw)
            if record is not None and _selected(record, session, since):
                yield record


def _load(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _selected(record: Mapping[str, Any], session: str | None, since: datetime | None) -> bool:
    if session is not None and record.get("session") != session:
        return False
    if since is None:
        return True
    try:
        return datetime.fromisoformat(str(record.get("ts"))) >= since
    except ValueError:
        return False


_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO-8601 time (naive means UTC) or a duration ago like `30m`, `1h`, `2d`, `1w`."""
    match = _DURATION.match(text)
    if match:
        delta = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        return (now or utc_now()) - delta
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--since {text!r} is neither an ISO-8601 time nor a duration",
            fix="use e.g. --since 2024-05-01T12:00 or --since 1h (s, m, h, d, w)",
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# ---------------------------------------------------------------------------- export

ExportFormat = Literal["jsonl", "csv"]

CSV_COLUMNS = (
    "seq", "ts", "kind", "session", "run", "tool", "call_id", "decision", "approved_by",
    "rule", "reason", "ok", "exit_code", "timed_out", "duration_ms", "output_bytes", "bytes",
    "path", "sha256_before", "sha256_after", "lines_changed", "status", "turns", "message",
    "prev", "hash",
)
"""CSV columns; every other field goes, as canonical JSON, into a final `details` column."""
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def export_records(records: Iterable[Mapping[str, Any]], fmt: ExportFormat, out: TextIO, *,
                   terminal: bool = False) -> int:
    """Write `records` as JSON lines (canonical, byte-identical to the log) or CSV.

    `terminal`: for a person at a terminal, each CSV value made inert on one line
    (executor/text.py), so no string the model chose (a tool name, a path) moves the cursor,
    sets the title or forges a row; otherwise the data itself. JSON lines are ASCII, every
    control character escaped, so they are inert either way.
    """
    if fmt == "jsonl":
        return _export_jsonl(records, out)
    if fmt == "csv":
        return _export_csv(records, out, terminal)
    raise ConfigError(f"unknown export format {fmt!r}", fix="use --format jsonl or csv")


def _export_jsonl(records: Iterable[Mapping[str, Any]], out: TextIO) -> int:
    count = 0
    for record in records:
        out.write(canonical(record).decode("ascii") + "\n")
        count += 1
    return count


def _export_csv(records: Iterable[Mapping[str, Any]], out: TextIO, terminal: bool) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, "details"])
    count = 0
    for record in records:
        details = {k: v for k, v in record.items() if k not in CSV_COLUMNS}
        cells = [csv_cell(record.get(column)) for column in CSV_COLUMNS]
        if terminal:
            cells = [inert_line(cell) for cell in cells]
        writer.writerow([*cells, canonical(details).decode("ascii") if details else ""])
        count += 1
    return count


def csv_cell(value: Any) -> str:
    """A CSV cell: JSON for non-strings, and text a spreadsheet would run as a formula defused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    # Tool arguments come from the model: never let them become spreadsheet formulas.
    return "'" + value if value.startswith(_FORMULA_START) else value
