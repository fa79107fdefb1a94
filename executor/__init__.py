"""sandbox-agent: a coding agent whose every tool call runs in a hardened per-session container."""

__version__ = "0.1.0"
