"""Configuration: flags > `SANDBOX_AGENT_*` environment variables > the user config file
(`~/.config/sandbox-agent/config.toml`, executor/userconfig.py) > built-in defaults.

`load_settings` builds the merged `Settings` and turns every invalid value, wherever it came
from, into one `ConfigError` that names its source: the flag, the variable, or the file and line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from executor.choices import DEFAULT_BASE_IMAGE as DEFAULT_BASE_IMAGE
from executor.choices import DEFAULT_IMAGE as DEFAULT_IMAGE
from executor.choices import CopyStorage as CopyStorage
from executor.choices import Provider as Provider
from executor.choices import ThinkLevel as ThinkLevel
from executor.choices import ToolProtocol as ToolProtocol
from executor.choices import WorkspaceMode as WorkspaceMode
from executor.durable import FsyncPolicy
from executor.errors import ConfigError
from executor.userconfig import read_user_config, user_config_path, where

OFFLINE_BASE_IMAGE = "sandbox-agent-base:bookworm"
"""Base built with debootstrap (scripts/build-base-image.sh) where no registry is reachable."""


DEFAULT_MEMORY = "512m"
"""Container memory limit (no swap on top)."""
DEFAULT_PIDS_LIMIT = 256
"""Container process limit."""
DEFAULT_TMP_SIZE = "64m"
"""Size cap of the container's /tmp."""
DEFAULT_TIMEOUT = 300.0
"""Seconds one model response may take (each read, and the whole of it) unless --timeout says:
the servers' default; the embedded model has its own for a whole reply (docs/MODELS.md)."""
DEFAULT_TOOL_TIMEOUT = 60
"""Seconds run_shell_command may take unless the call asks otherwise."""
DEFAULT_DISK_BUDGET = 1024**3
"""Bytes the project may grow by in one session before commands are killed and writes refused."""
DEFAULT_NOFILE = 8192
"""Open files per process in the container (Podman's default exceeds common hard limits)."""
DEFAULT_NPROC = 8192
"""RLIMIT_NPROC in the container; the pids limit is the real bound (Podman needs one set)."""
DEFAULT_COPY_LIMIT = 1024**3
"""Bytes a project may have to be copied into a copy workspace."""
DEFAULT_COPY_MAX_FILES = 100_000
"""Entries (files, directories, links) a project may have to be copied."""
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
"""Bytes of one model reply: ~80,000 streamed tokens of an OpenAI-compatible server."""
COPY_MEMORY_MAX = 256 * 1024 * 1024
"""Projects up to this size are copied into memory (tmpfs) with copy_storage auto."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIZE = re.compile(r"(\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from a size like `1g`, `500m`, `64k` or `1048576` (binary units); ValueError else."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r} (give bytes, or a number with k, m, g or t)")
    number, unit = int(match[1]), (match[2] or " ").lower()
    return number << 10 * " kmgt".index(unit)


def default_cpus() -> float:
    """All cores up to 4: searches use every core, a runaway cannot take a big host."""
    return float(max(1, min(4, os.cpu_count() or 1)))


class Settings(BaseSettings):
    """Every knob of a run; flags override the environment, which overrides these defaults."""

    model_config = SettingsConfigDict(env_prefix="SANDBOX_AGENT_", extra="ignore")

    provider: Provider = "ollama"
    """Model provider."""
    model: str | None = None
    """Model name; None picks the provider's default."""
    host: str | None = None
    """Model server base URL (Ollama falls back to OLLAMA_HOST, then localhost:11434)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the OpenAI-compatible API key."""
    tool_protocol: ToolProtocol | None = None
    """How tools are offered; None: native for servers, constrained for the embedded model."""
    temperature: float | None = None
    """Sampling temperature passed to the model (None: the server's default)."""
    timeout: float | None = Field(None, gt=0)
    """Seconds one model response may take, from the request sent to its last byte (and each
    read of it); None: DEFAULT_TIMEOUT, the embedded model's own for a whole reply."""
    max_retries: int = Field(2, ge=0, le=20)
    """Retries after a first attempt that times out or gets 429/5xx (0: no retries)."""
    retry_base_delay: float = Field(0.5, ge=0)
    """First backoff delay in seconds (doubles per attempt, with jitter)."""
    max_reply_bytes: int = Field(DEFAULT_MAX_REPLY_BYTES, ge=64 * 1024)
    """Bytes one model reply may take (`16m`; a streamed line a sixteenth): past it, exit 23."""
    max_turns: int = Field(20, ge=1)
    """Model turns before the run stops with an error."""
    max_tokens: int | None = None
    """Context budget in tokens; None: the model's context length, else 8192."""
    stream: bool = True
    """Stream tokens from the model."""
    think: ThinkLevel | None = None
    """Thinking mode: Ollama's `think` (on, off, low, medium, high); `reasoning_effort` for an
    OpenAI-compatible server (low, medium, high); None: the server's default."""
    image: str = DEFAULT_IMAGE
    """Sandbox image."""
    runtime: str | None = None
    """OCI runtime the engine runs the container with (`runsc`: gVisor); None: the engine's."""
    tool_timeout: int = Field(DEFAULT_TOOL_TIMEOUT, ge=1)
    """Default timeout in seconds of run_shell_command."""
    memory: str = DEFAULT_MEMORY
    """Container memory limit (no swap on top)."""
    pids_limit: int = Field(DEFAULT_PIDS_LIMIT, ge=16)
    """Maximum processes in the container."""
    cpus: float = Field(default_factory=default_cpus, gt=0)
    """CPU limit of the container (default: the host's cores, at most 4)."""
    tmp_size: str = DEFAULT_TMP_SIZE
    """Size of the container's /tmp tmpfs."""
    warm: int = Field(0, ge=0, le=86400)
    """Seconds a container made at a run's end waits for the next run on the root with the same
    sandbox (its warm start, executor/sandbox/warm.py); 0: none is made."""
    env_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Host environment variables passed into the container (none by default)."""
    allow_git_writes: bool = False
    """Mount .git read-write (it is read-only by default)."""
    disk_budget: int = Field(DEFAULT_DISK_BUDGET, ge=0)
    """Bytes the project may grow by in a session (`1g`, `500m` or bytes; 0: no budget)."""
    workspace: WorkspaceMode = "bind"
    """bind: the root is mounted and changes land as they happen; copy: the sandbox works on a
    copy and its changes come back for review (`diff`, `apply`, `undo`)."""
    copy_limit: int = Field(DEFAULT_COPY_LIMIT, ge=1)
    """Size guard of the copy workspace (`1g`, `500m` or bytes): a bigger project is refused."""
    copy_max_files: int = Field(DEFAULT_COPY_MAX_FILES, ge=1)
    """Entries a project may have to be copied."""
    copy_exclude: list[str] = Field(default_factory=list)
    """gitignore-style patterns left out of the copy (docs/WORKSPACES.md)."""
    copy_storage: CopyStorage = "auto"
    """Where the copy lives in the container: memory (tmpfs: fast, counts against the memory
    limit), disk (a volume on the engine's disk), auto (memory up to 256 MiB)."""
    skills_enabled: bool = True
    """Add prompt skills to the system prompt (docs/SKILLS.md)."""
    skill_paths: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    """More skill files, or directories of them, named by the person."""
    skills_include: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Only these skill ids (empty: every skill meant for the command)."""
    skills_exclude: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Skill ids left out."""
    external_skills_enabled: bool = True
    """Use the project's skills (`.sandbox-agent/skills/*.md`) the person trusted."""
    allow_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts the sandbox may reach through the egress proxy (`HOST[:PORT]`, `*.DOMAIN`, an
    address or a range; docs/NETWORK.md), besides those of --allow-host."""
    network: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Network presets (pypi, npm, github), besides those of --network."""
    egress_resolve: dict[str, str] = Field(default_factory=dict)
    """Names the egress proxy resolves to these addresses (like curl --resolve); the address
    is still checked like any other."""
    egress_max_bytes: int = Field(4 * 1024**3, ge=1)
    """Bytes a session may move through the egress proxy, both ways (`1g`, `500m`, bytes)."""
    audit: bool = True
    """Write the audit log."""
    audit_dir: Path | None = None
    """Audit directory (outside the project); None: the project's dir in the user state dir."""
    audit_max_result_bytes: int = Field(4096, ge=0)
    """Bytes of each tool result kept in the audit preview."""
    otel_endpoint: str | None = None
    """OTLP/HTTP collector URL for traces (`http://127.0.0.1:4318`); the standard
    OTEL_EXPORTER_OTLP_* variables win; None and unset: no traces (executor/telemetry.py)."""
    fsync: FsyncPolicy = "background"
    """When session and audit lines are fsynced: on a background thread right after each write
    (background), or before the loop goes on (always); docs/SESSIONS.md."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments (flags), then the environment, then the user config file."""
        return init_settings, env_settings, UserConfigSource(settings_cls)

    @field_validator("skills_include", "skills_exclude", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> Any:
        """Skill ids as for env_allow: a JSON list, or separated by commas or spaces."""
        return split_names(value)

    @field_validator("allow_hosts", "network", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        """As for env_allow: a JSON list, or separated by commas or spaces."""
        return split_names(value)

    @field_validator("skill_paths", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        """A JSON list, or paths separated by the OS's path separator (`:`), like PATH."""
        if isinstance(value, str) and not value.strip().startswith("["):
            return [part for part in value.split(os.pathsep) if part]
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("env_allow", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        """A JSON list (`'["LANG"]'`) or plain names separated by commas or spaces (`LANG,TZ`)."""
        return split_names(value)

    @field_validator("env_allow")
    @classmethod
    def _valid_names(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not an environment variable name: {bad[0]!r}")
        return value

    @field_validator("memory", "tmp_size")
    @classmethod
    def _limit(cls, value: str) -> str:
        """A size the engine takes as it is (`512m`), checked now: an unreadable one failed
        every tool call of the run, and 0 means no limit at all to Docker (and to a tmpfs)."""
        if parse_size(value) < 1 << 20:
            raise ValueError(f"{value!r} is under 1m (0 would mean no limit)")
        return value.strip()

    @field_validator("disk_budget", "copy_limit", "egress_max_bytes", "max_reply_bytes",
                     mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        """Sizes are given as text (`1g`) in flags and the environment."""
        return parse_size(value) if isinstance(value, str) else value


class _GivenSettings(Settings):
    """Settings from the values given alone, for a later phase or a child session of a run:
    the environment and the user config were read at the run's start, not again."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The arguments only."""
        return (init_settings,)


def derive_settings(base: Settings, values: Mapping[str, Any]) -> Settings:
    """`values` over `base`, validated (ValidationError), reading neither the environment nor
    the user config file again."""
    return _GivenSettings(**{**base.model_dump(), **values})


def split_names(value: Any) -> Any:
    """A JSON list (`'["a"]'`) or names separated by commas or spaces (`a,b`); else as it is."""
    if not isinstance(value, str):
        return value
    if value.strip().startswith("["):
        return json.loads(value)
    return [name for name in re.split(r"[,\s]+", value) if name]


class UserConfigSource(PydanticBaseSettingsSource):
    """The user config file as a settings source (below the environment)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: `__call__` reads the whole file at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values, _ = read_user_config(self.settings_cls.model_fields)
        return values


FLAGS = {
    "provider": "--provider", "model": "--model", "host": "--host",
    "tool_protocol": "--tool-protocol", "timeout": "--timeout", "max_turns": "--max-turns",
    "max_tokens": "--max-tokens", "stream": "--stream", "image": "--image", "env_allow": "--env",
    "allow_git_writes": "--allow-git-writes", "disk_budget": "--disk-budget",
    "max_retries": "--max-retries", "think": "--think", "skill_paths": "--skill",
    "skills_enabled": "--skills", "skills_include": "--skills-include",
    "skills_exclude": "--skills-exclude", "external_skills_enabled": "--project-skills",
    "allow_hosts": "--allow-host", "network": "--network", "copy_limit": "--copy-limit",
    "runtime": "--runtime", "workspace": "--workspace",
}
"""The flag that sets each setting, for error messages."""


VALUES_FIX = ("see the values each flag takes in `sandbox-agent ask --help` "
              "(or docs/CONFIGURATION.md)")


def load_settings(flags: Mapping[str, Any] | None = None) -> Settings:
    """Settings from `flags` (field names), the environment, the user config and defaults.

    Raises ConfigError naming where the first invalid value came from.
    """
    given = dict(flags or {})
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise _invalid(exc, given) from None
    except SettingsError as exc:  # a value the environment source could not even decode
        raise ConfigError(str(exc), fix=VALUES_FIX) from None


def _invalid(exc: ValidationError, flags: Mapping[str, Any]) -> ConfigError:
    err = exc.errors()[0]
    name = str(err["loc"][0]) if err["loc"] else ""
    message = str(err["msg"]).removeprefix("Value error, ")
    variable = f"SANDBOX_AGENT_{name.upper()}"
    if name in flags:
        source, value = FLAGS.get(name, "argument"), flags[name]
    elif variable in os.environ:
        source, value = variable, os.environ[variable]
    else:
        values, lines = read_user_config(Settings.model_fields)
        source, value = where(user_config_path(), lines.get(name)), values.get(name)
    return ConfigError(f"invalid value for {name} ({source}) {value!r}: {message}",
                       fix=VALUES_FIX)
