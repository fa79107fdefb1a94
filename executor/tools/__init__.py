"""Tools the model may call: the typed base class, the registry, and the built-ins."""

from __future__ import annotations

from executor.messages import function_schema
from executor.tools.base import (
    Preview,
    RiskLevel,
    Tool,
    ToolContext,
    ToolRegistry,
    format_validation_error,
)
from executor.tools.builtin import BUILTIN_TOOLS

_custom: list[Tool] = []


def register(tool: Tool | type[Tool]) -> Tool:
    """Register a custom tool globally; every `Runner.build` afterwards offers it."""
    instance = tool() if isinstance(tool, type) else tool
    _custom[:] = [t for t in _custom if t.name != instance.name] + [instance]
    return instance


def default_registry() -> ToolRegistry:
    """The built-in tools followed by every globally registered custom tool."""
    registry = ToolRegistry(cls() for cls in BUILTIN_TOOLS)
    for tool in _custom:
        registry.register(tool)
    return registry


__all__ = [
    "BUILTIN_TOOLS", "Preview", "RiskLevel", "Tool", "ToolContext", "ToolRegistry",
    "default_registry", "format_validation_error", "function_schema", "register",
]
