"""sandbox-agent: a coding agent whose every tool call runs in a hardened per-session container."""

__version__ = "0.1.0"
DISTRIBUTION = "hardened-sandbox-agent"
"""The name pip installs this project by (the console script is `sandbox-agent`, the import
package `executor`). Not `sandbox-agent`: on the public index that is an unrelated project."""
LOCAL_EXTRA_FIX = f"pip install '{DISTRIBUTION}[local]'"
"""The command that installs everything the embedded model needs."""
