"""Values the command line shows before any work is done, importable without pydantic.

The CLI builds every command's options (their types and defaults) at start-up, so these live
apart from the modules that need pydantic, Rich or the docker SDK: `--version`, `--help` and
the commands that only read files start fast. executor/config.py re-exports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

Provider = Literal["ollama", "openai", "embedded"]
"""Model providers."""
ToolProtocol = Literal["native", "json", "constrained"]
"""How tools are offered to the model."""
WorkspaceMode = Literal["bind", "copy"]
"""bind: the project is mounted; copy: a copy is, and changes come back for review."""
ThinkLevel = Literal["low", "medium", "high", "on", "off"]
"""Thinking mode: on/off, or a reasoning effort (docs/MODELS.md)."""
CopyStorage = Literal["auto", "memory", "disk"]
"""Where a copy workspace lives in the container: tmpfs, a volume, or chosen by size."""

DEFAULT_IMAGE = "sandbox-agent:latest"
"""Tag of the sandbox image `sandbox-agent image build` produces."""
DEFAULT_BASE_IMAGE = "python:3.12-slim"
"""Base the sandbox image is built from when a registry is reachable."""


class RiskLevel(StrEnum):
    """How much harm a tool can do; the policy's default decision depends on it."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"
