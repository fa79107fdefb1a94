"""A run's egress decisions, made once from the person (flags, user config, presets), and the
hooks that put each connection on the run's bus (so into the audit chain, the progress view
and `--json`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from executor.config import Settings
from executor.hooks import ConnectionEvent, HookBus, ToolCallEvent, ToolResultEvent
from executor.network.deps import deps_volume
from executor.network.egress import AllowedHost, EgressConfig, EgressHooks
from executor.network.presets import preset
from executor.network.proxy import Asker, Connection
from executor.network.rules import parse_rule


def egress_config(settings: Settings, flags: Iterable[str], presets: Iterable[str],
                  root: Path | None = None) -> EgressConfig | None:
    """The session's allow-list (None: no host allowed, no network); a bad rule or preset is
    a ConfigError now, before anything starts."""
    hosts = [AllowedHost(text=text, source="--allow-host") for text in flags]
    hosts += [AllowedHost(text=text, source="config") for text in settings.allow_hosts]
    env: dict[str, str] = {}
    files: dict[str, str] = {}
    for name in dict.fromkeys([*presets, *settings.network]):
        found = preset(name)
        hosts += [AllowedHost(text=text, source=f"preset {name}") for text in found.hosts]
        env |= found.env
        files |= found.files
    for host in hosts:
        parse_rule(host.text, host.source)
    if not hosts:
        return None
    return EgressConfig(allow=hosts, resolve=settings.egress_resolve,
                        max_bytes=settings.egress_max_bytes, env=env, files=files,
                        deps_volume=deps_volume(root) if root is not None else None)


def prompt_note(config: EgressConfig | None) -> str:
    """What the model is told about the network."""
    if config is None:
        return ""
    hosts = ", ".join(config.rules().texts())
    return (f" Network: only these hosts are reachable, through the proxy that HTTP_PROXY and "
            f"HTTPS_PROXY name (pip, npm, git, curl use it): {hosts}. There is no DNS; a "
            "blocked host answers 403 with the reason.")


class CallTracker:
    """Which tool call runs now, from the bus (connections are recorded under it)."""

    def __init__(self, hooks: HookBus) -> None:
        self.current: str | None = None
        hooks.subscribe(self._on_event, "tool_call", "tool_result")

    def _on_event(self, event: object) -> None:
        if isinstance(event, ToolCallEvent) and event.decision == "allow":
            self.current = event.call_id
        elif isinstance(event, ToolResultEvent) and event.call_id == self.current:
            self.current = None


def egress_hooks(hooks: HookBus, ask: Asker | None = None) -> EgressHooks:
    """Connections become `connection` events on `hooks`, under the call that ran."""
    tracker = CallTracker(hooks)

    def on_connection(connection: Connection) -> None:
        hooks.emit(ConnectionEvent(**connection.record()))

    return EgressHooks(on_connection=on_connection, current_call=lambda: tracker.current,
                       ask=ask)
