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

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor import toolmeta
from executor.audit_chain import (  # the format's names, where they always were
    DAY_FILE,
    LOCK_NAME,
    ZERO_HASH,
    ChainFiles,
    canonical,
    record_hash,
    sealed,
)
from executor.audit_chain import Head as _Head
from executor.audit_read import (
    CSV_COLUMNS,
    AuditProblem,
    VerifyReport,
    csv_cell,
    entry_problem,
    export_records,
    parse_since,
    read_records,
    verify,
)
from executor.audit_values import (  # the format's values, importable from here as always
    ARGUMENT_MAX_BYTES,
    _capped,
    _current_user,
    _ms,
    _plain,
    _utf8_len,
    audit_dir_for,
    default_audit_dir,
    format_ts,
    utc_now,
)
from executor.errors import AuditError, SandboxAgentError
from executor.redact import Redactor
from executor.state import (
    check_outside,
    ensure_project_dir,
    private_dir,
    real_root,
)

if TYPE_CHECKING:  # pydantic is not needed to verify or read a log: `audit verify` starts fast
    from executor.hooks import Event, HookBus, Subscriber
    from executor.toolmeta import ChangeRecord

log = logging.getLogger(__name__)

__all__ = [  # besides the writer: the format and the readers, importable from here as always
    "ARGUMENT_MAX_BYTES",
    "CSV_COLUMNS",
    "DAY_FILE",
    "LOCK_NAME",
    "ZERO_HASH",
    "AuditLog",
    "AuditProblem",
    "VerifyReport",
    "audit_dir_for",
    "canonical",
    "csv_cell",
    "default_audit_dir",
    "entry_problem",
    "export_records",
    "format_ts",
    "parse_since",
    "read_records",
    "record_hash",
    "utc_now",
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
            parent: dict[str, Any] = (
                {"parent_session": event.parent_session} if event.parent_session else {})
            if event.sandbox_adopted:  # a container made ahead (warm.py): when, by which run
                parent["sandbox_adopted"] = event.sandbox_adopted
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
                runtime=event.runtime, engine=event.engine, reattached=event.reattached,
                **({"adopted": event.adopted} if event.adopted else {}))
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
        with self._lock:  # not while another thread appends through them
            if self._files is not None:
                self._files.close()

    def _fail(self, exc: Exception) -> None:
        self.failures += 1
        self._prepared = False
        with self._lock:
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
