"""The exception tree of sandbox-agent.

Every error the library raises derives from `SandboxAgentError`. Third-party
exceptions (docker, httpx, xllamacpp, tomllib) are translated at the one place
they are called and never leak past it. Each class carries the exit code the
CLI uses for it (see docs/EXIT_CODES.md) and, where there is one, the command
that fixes it.

    SandboxAgentError                         1
    ├── UserError                             2   the caller's mistake
    │   ├── ConfigError                       2   bad flag / env var / argument value
    │   ├── PolicyFileError                   3   policy TOML invalid (line and reason)
    │   └── SessionNotFoundError              4   no such session
    ├── SandboxError                          10  container infrastructure
    │   ├── EngineUnavailableError            11  Docker engine unreachable
    │   ├── ImageNotFoundError                12  sandbox image missing
    │   ├── ToolboxError                      13  toolbox died / spoke garbage
    │   │   └── ToolboxTimeoutError           14  (also TimeoutError) host deadline passed
    │   ├── WorkspaceUnreachableError         15  bind mode: the engine cannot see the root
    │   └── RuntimeNotFoundError              16  the engine lacks the OCI runtime asked for
    ├── ModelError                            20  model provider failures
    │   ├── ModelUnavailableError             21  (also ConnectionError) server unreachable
    │   ├── ModelTimeoutError                 22  (also TimeoutError) no answer in time
    │   ├── ModelResponseError                23  4xx / unusable payload
    │   │   └── ContextOverflowError          25  the request exceeds the served window
    │   └── EmbeddedModelError                24  embedded model missing or corrupt
    ├── AgentError                            30  e.g. unusable model replies in a row
    │   ├── MaxTurnsExceeded                  31  no answer within --max-turns
    │   ├── CallsDeniedError                  32  `ask --fail-on-denied`: calls were denied
    │   ├── IncompleteRunError                34  answered, but every change it tried failed
    │   └── TruncatedAnswerError              35  answered, but the answer was cut short
    ├── FindingsError                         33  `review --fail-on`: findings at that severity
    ├── SessionError                          40  session file unreadable
    │   └── SessionCorruptError               41  a corrupt line in the middle
    ├── AuditError                            50  audit log could not be written
    │   └── AuditIntegrityError               51  `audit verify` found tampering
    └── WorkspaceError                        60  copy workspace / pending changes unusable
        ├── ConflictError                     61  files changed on the host: not applied/undone
        ├── ProjectTooLargeError              62  the project exceeds the copy size guard
        ├── ApplyDeclinedError                63  the person said no: nothing applied/undone
        └── UnrestorableError                 64  undo: some paths cannot be restored

A failed *tool* (missing file, non-zero exit, timeout inside the sandbox) is not
an exception: it is a `ToolResult` the model sees.
"""

from __future__ import annotations


class SandboxAgentError(Exception):
    """Root of every error sandbox-agent raises."""

    exit_code: int = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message


class UserError(SandboxAgentError):
    """The caller asked for something that cannot work as given."""

    exit_code = 2


class ConfigError(UserError):
    """A flag, environment variable or argument has an invalid value."""

    exit_code = 2


class PolicyFileError(UserError):
    """A policy file could not be parsed or validated."""

    exit_code = 3


class SessionNotFoundError(UserError):
    """No session with the requested name exists for this root."""

    exit_code = 4


class SandboxError(SandboxAgentError):
    """The container sandbox failed (not a tool failure inside it)."""

    exit_code = 10


class EngineUnavailableError(SandboxError, ConnectionError):
    """The Docker engine cannot be reached."""

    exit_code = 11


class ImageNotFoundError(SandboxError):
    """The sandbox image does not exist locally."""

    exit_code = 12


class ToolboxError(SandboxError):
    """The in-container toolbox died or answered something unreadable."""

    exit_code = 13


class ToolboxTimeoutError(ToolboxError, TimeoutError):
    """The toolbox did not answer before the host-side deadline."""

    exit_code = 14


class RuntimeNotFoundError(SandboxError):
    """The engine does not offer (or would silently ignore) the OCI runtime asked for."""

    exit_code = 16


class ModelError(SandboxAgentError):
    """The model provider failed."""

    exit_code = 20


class ModelUnavailableError(ModelError, ConnectionError):
    """The model server could not be reached."""

    exit_code = 21


class ModelTimeoutError(ModelError, TimeoutError):
    """The model server did not answer in time."""

    exit_code = 22


class ModelResponseError(ModelError):
    """The model server refused the request or sent something unusable."""

    exit_code = 23

    def __init__(self, message: str, *, status_code: int | None = None, fix: str | None = None):
        super().__init__(message, fix=fix)
        self.status_code = status_code


class ContextOverflowError(ModelResponseError):
    """The server refused a request as longer than its context window (even after a trim)."""

    exit_code = 25

    def __init__(self, message: str, *, status_code: int | None = None, fix: str | None = None,
                 prompt_tokens: int | None = None, context_size: int | None = None):
        super().__init__(message, status_code=status_code, fix=fix)
        self.prompt_tokens = prompt_tokens
        """The request's size as the server counted it, when it said."""
        self.context_size = context_size
        """The window the server serves, when it said."""


class EmbeddedModelError(ModelError):
    """The embedded model is not installed, corrupt, or failed to start."""

    exit_code = 24


class AgentError(SandboxAgentError):
    """The agent loop could not finish."""

    exit_code = 30


class MaxTurnsExceeded(AgentError):
    """The model did not give a final answer within the turn limit."""

    exit_code = 31


class CallsDeniedError(AgentError):
    """The run answered, but some tool calls were denied (`ask --fail-on-denied`)."""

    exit_code = 32


class IncompleteRunError(AgentError):
    """The run answered, but the files it set out to change are unchanged: every write or
    edit it ran failed (the answer is printed first)."""

    exit_code = 34


class TruncatedAnswerError(AgentError):
    """The run answered, but the model never finished its answer: it was cut at the reply's
    length limit or stopped repeating itself, and what it wrote was kept with a note."""

    exit_code = 35


class FindingsError(SandboxAgentError):
    """The review found problems at or above the `--fail-on` severity."""

    exit_code = 33


class SessionError(SandboxAgentError):
    """A session file could not be read or written."""

    exit_code = 40


class SessionCorruptError(SessionError):
    """A session file has a corrupt line before its last line."""

    exit_code = 41


class AuditError(SandboxAgentError):
    """The audit log could not be written or read."""

    exit_code = 50


class AuditIntegrityError(AuditError):
    """The audit hash chain is broken: a record was edited, removed, inserted or moved."""

    exit_code = 51


class WorkspaceUnreachableError(SandboxError):
    """Bind mode on an engine that cannot see the project root (another machine's disk)."""

    exit_code = 15


class WorkspaceError(SandboxAgentError):
    """A copy workspace or its pending changes could not be made, read or applied."""

    exit_code = 60


class ConflictError(WorkspaceError):
    """Files changed on the host since the copy (or the apply): they were left alone."""

    exit_code = 61

    def __init__(self, message: str, *, paths: list[str] | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.paths = list(paths or [])


class ProjectTooLargeError(WorkspaceError):
    """The project is bigger than the copy workspace's size guard."""

    exit_code = 62


class ApplyDeclinedError(WorkspaceError):
    """The person declined at the prompt of `apply` or `undo`: nothing was changed."""

    exit_code = 63


class UnrestorableError(WorkspaceError):
    """`undo` left paths as they are because their earlier content is nowhere (never kept),
    or what is there now could not be kept first; the rest was undone."""

    exit_code = 64

    def __init__(self, message: str, *, paths: list[str] | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.paths = list(paths or [])


#: Exit code for a run interrupted with Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
