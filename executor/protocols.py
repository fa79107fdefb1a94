"""The seams between the layers, as Protocols kept in one place.

Real implementations and the test fakes both satisfy these without inheriting from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, Self, runtime_checkable

from pydantic import BaseModel

from executor.choices import ToolProtocol
from executor.messages import Message, ModelReply, ToolResult, ToolSpec

LoadPhase = Literal["assemble", "verify", "load", "ready"]


@dataclass(frozen=True)
class LoadProgress:
    """One report while the embedded model is prepared (for a progress bar or spinner)."""

    phase: LoadPhase
    """assemble (parts to cache), verify (hashing), load (server starting), ready."""
    done_bytes: int = 0
    """Bytes handled so far (assemble, verify)."""
    total_bytes: int = 0
    """Bytes to handle in this phase (0 when not counted in bytes)."""
    elapsed: float = 0.0
    """Seconds since the phase began."""

    @property
    def fraction(self) -> float | None:
        """Share done in [0, 1], or None when the phase has no known end."""
        return self.done_bytes / self.total_bytes if self.total_bytes else None

    def describe(self) -> str:
        """A short human-readable line, e.g. 'assembling model: 512/1066 MiB'."""
        verb = {
            "assemble": "assembling model",
            "verify": "verifying model",
            "load": "loading model",
            "ready": "model ready",
        }[self.phase]
        if self.total_bytes:
            return f"{verb}: {self.done_bytes >> 20}/{self.total_bytes >> 20} MiB"
        return f"{verb} ({self.elapsed:.0f} s)"


TokenCallback = Callable[[str], None]
OutputCallback = Callable[[str, str], None]
"""Receives a running command's output as it comes: (stream, text), stream "stdout"/"stderr"."""


@runtime_checkable
class Model(Protocol):
    """A chat model that may call tools."""

    name: str
    """Model name as the provider knows it."""
    tool_protocol: ToolProtocol
    """How tools are offered: native (the `tools` field), json or constrained (in the text)."""

    def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_token: TokenCallback | None = None,
        on_thinking: TokenCallback | None = None,
    ) -> ModelReply:
        """Send the conversation and the offered tools; return the parsed assistant turn.

        `on_token` gets the reply's text as it streams, `on_thinking` the model's reasoning
        (thinking mode), which ends up in `reply.message.thinking`, never in its content.
        """
        ...

    def context_length(self) -> int | None:
        """The model's context window in tokens, when the provider can tell."""
        ...

    def close(self) -> None:
        """Release connections (and, for the embedded model, the server)."""
        ...


@runtime_checkable
class LoadingModel(Model, Protocol):
    """A model that loads before its first request (the embedded one), reporting progress."""

    def start(self, progress: Callable[[LoadProgress], None] | None = None) -> object:
        """Load (and serve) the model; does nothing when it runs already."""
        ...


@runtime_checkable
class TokenizingModel(Model, Protocol):
    """A model that counts tokens with its own tokenizer (the embedded one, via llama.cpp)."""

    def count_tokens(self, text: str) -> int | None:
        """Tokens of `text` as the model reads them; None when it cannot tell just now."""
        ...


@runtime_checkable
class ServedModel(Model, Protocol):
    """A model behind a server that can say whether it answers and which models it has."""

    def ping(self) -> str:
        """What the server says it is (raises a ModelError when it does not answer)."""
        ...

    def list_models(self) -> list[str]:
        """The names of the models the server has."""
        ...


class SandboxInfo(BaseModel):
    """What an audit needs to know about the sandbox a call ran in."""

    container_id: str
    container_name: str
    image: str
    image_digest: str
    mount_mode: str
    """'ro' or 'rw'."""
    network: str
    user: str
    """uid:gid the tools run as."""
    runtime: str = ""
    """The OCI runtime the engine reports for the container (`runc`, `runsc`; Podman: `oci`)."""
    engine: str = ""
    """`Docker` or `Podman` (its Docker-compatible API)."""
    workspace: str = "bind"
    """'bind' (the root is mounted) or 'copy' (the sandbox works on a copy)."""
    adopted: dict[str, str] | None = None
    """A container made ahead that this session adopted (executor/sandbox/warm.py): when it was
    made (`made_at`) and by which run (`made_by_run`, `made_by_session`); None: made now."""


@runtime_checkable
class Sandbox(Protocol):
    """Where tool calls run. Start and stop it as a context manager."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def start(self) -> None:
        """Create (or re-attach) the container and start the toolbox."""
        ...

    def stop(self) -> None:
        """Stop the toolbox and remove the container."""
        ...

    def call(self, tool: str, args: dict[str, Any], *, timeout: float | None = None,
             on_output: OutputCallback | None = None) -> ToolResult:
        """Run one built-in tool inside the sandbox.

        `on_output`, when given, gets a running command's output while it runs (untrusted text,
        rate-limited and capped by the toolbox; the result still carries the output).
        """
        ...

    def preview(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """What a `write_file` / `edit_file` call would change, without changing it.

        `output` is the unified diff against the file in the sandbox; `meta` has `path`,
        `resolved` (the real path, relative), `symlink`, `exists`, `binary`, `sha256_before`
        and `error` (why the call would fail, or None).
        """
        ...

    def is_alive(self) -> bool:
        """Whether the container and toolbox are up."""
        ...

    @property
    def info(self) -> SandboxInfo:
        """Identity of the running sandbox (only valid after start)."""
        ...


class SessionSummary(BaseModel):
    """One line of `sandbox-agent sessions`."""

    name: str
    started_at: str
    turns: int
    """Model turns (replies), as `ask` counts them in "done in N turn(s)"."""
    status: str = ""
    """How the last request ended: ok, max_turns, error, interrupted or unfinished."""
    model: str
    provider: str
    last_message: str
    path: str
    parent_session: str | None = None
    """The session that delegated this one (orchestrate), when it is a child."""


@runtime_checkable
class SessionStore(Protocol):
    """Where conversations are kept, one message at a time."""

    def append(self, message: Message) -> None:
        """Persist one message durably before returning."""
        ...

    def load(self) -> list[Message]:
        """All messages of the session, in order."""
        ...

    def list(self) -> list[SessionSummary]:
        """Sessions for this root, newest first."""
        ...

