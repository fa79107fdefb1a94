"""A run's egress decisions, made once from the person (flags, user config, presets), and the
hooks that put each connection on the run's bus (so into the audit chain, the progress view
and `--json`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, Protocol

from executor.config import Settings
from executor.hooks import ConnectionEvent, HookBus, ToolCallEvent, ToolResultEvent
from executor.network.deps import deps_volume
from executor.network.egress import AllowedHost, EgressConfig, EgressHooks, granted
from executor.network.notes import Refusals
from executor.network.presets import preset
from executor.network.proxy import Connection
from executor.network.rules import Rule, parse_rule

Answer = Literal["y", "n", "a"]
"""yes (this connection), no, always (this host and port, for the session)."""


class HostPrompt(Protocol):
    """Asks the person at the terminal about a host no rule allows."""

    def __call__(self, host: str, port: int, command: str) -> Answer:
        ...


def egress_config(settings: Settings, flags: Iterable[str], presets: Iterable[str],
                  root: Path | None = None, *, from_config: bool = True,
                  policy: Iterable[tuple[str, str]] = ()) -> EgressConfig | None:
    """The session's allow-list (None: no host allowed, no network); a bad rule or preset is
    a ConfigError now, before anything starts. `from_config`: the user config's and the
    person's policy's hosts and presets count too (not for --read-only runs and review: they
    take the flags only). `policy`: (rule or `preset:NAME`, source) of the person's policy."""
    hosts = [AllowedHost(text=text, source="--allow-host") for text in flags]
    named = [(name, "--network") for name in presets]
    if from_config:
        hosts += [AllowedHost(text=text, source="config") for text in settings.allow_hosts]
        hosts += [AllowedHost(text=text, source=source) for text, source in policy
                  if not text.startswith("preset:")]
        named += [(name, "config") for name in settings.network]
        named += [(text.removeprefix("preset:"), source) for text, source in policy
                  if text.startswith("preset:")]
    env: dict[str, str] = {}
    files: dict[str, str] = {}
    for name in dict.fromkeys(name for name, _ in named):
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
        self.command = ""
        """What the running call runs (a shell command; else the tool's name)."""
        hooks.subscribe(self._on_event, "tool_call", "tool_result")

    def _on_event(self, event: object) -> None:
        if isinstance(event, ToolCallEvent) and event.decision == "allow":
            self.current = event.call_id
            self.command = str(event.arguments.get("command") or event.tool)
        elif isinstance(event, ToolResultEvent) and event.call_id == self.current:
            self.current, self.command = None, ""


def egress_hooks(hooks: HookBus, prompt: HostPrompt | None = None,
                 refusals: Refusals | None = None) -> EgressHooks:
    """Connections become `connection` events on `hooks`, under the call that ran; with a
    `prompt`, a host no rule allows is the person's to decide (one question at a time)."""
    tracker = CallTracker(hooks)
    asking = threading.Lock()

    def on_connection(connection: Connection) -> None:
        if refusals is not None:
            refusals.add(connection)
        hooks.emit(ConnectionEvent(**connection.record()))

    def ask(host: str, port: int, call_id: str | None) -> tuple[Rule, bool] | None:
        assert prompt is not None
        with asking:
            answer = prompt(host, port, tracker.command if call_id else "")
        if answer == "n":
            return None
        return granted(host, port, "user:session" if answer == "a" else "user"), answer == "a"

    return EgressHooks(on_connection=on_connection, current_call=lambda: tracker.current,
                       ask=ask if prompt is not None else None)
