"""A session's egress: its configuration (part of the sandbox spec), the environment it gives
the sandbox, and its lifetime beside the container (the proxy for the session, a forwarder
for each container).

Only `DockerSandbox` calls in here, in a few named places: `Egress.check_engine` before a
container exists, `Egress.attach` once one runs (before any command), `Egress.detach` before
it goes and `Egress.stop` at the end.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from executor.errors import ConfigError, SandboxError
from executor.network.deps import deps_environment, deps_mount
from executor.network.forwarder import SOCKET_NAME, Forwarder, forwarder_options
from executor.network.proxy import Asker, Connection, EgressProxy, Limits, pinned_resolver
from executor.network.rules import EgressRules, Rule, address_of, parse_rule, valid_host
from executor.toolbox.nofollow import open_dir

PROXY_PORT = 3128
"""Where the forwarder listens in the sandbox (its loopback)."""


class AllowedHost(BaseModel):
    """One rule of the allow-list and who gave it."""

    text: str
    """`HOST[:PORT]`, `*.DOMAIN`, an address or a range."""
    source: str
    """`--allow-host`, `config`, `policy`, `preset pypi` ..."""


class EgressConfig(BaseModel):
    """What a session's sandbox may reach (None in SandboxConfig: nothing, no network)."""

    allow: list[AllowedHost]
    """The allow-list (at least one rule)."""
    resolve: dict[str, str] = Field(default_factory=dict)
    """Names pinned to addresses (the person's, like curl --resolve); still checked."""
    port: int = PROXY_PORT
    """The forwarder's port in the sandbox."""
    max_bytes: int = Limits.max_bytes
    """Bytes both ways over the session."""
    max_connections: int = Limits.max_connections
    """Connections over the session."""
    env: dict[str, str] = Field(default_factory=dict)
    """What points the sandbox's tools at the allowed indexes (a preset's PIP_INDEX_URL ...)."""
    files: dict[str, str] = Field(default_factory=dict)
    """The person's files mounted read-only (inside -> host path), e.g. their pip's CA bundle."""
    deps_volume: str | None = None
    """The project's volume installs go to (executor/network/deps.py); None: none."""

    def rules(self) -> EgressRules:
        """The allow-list as rules."""
        return EgressRules(parse_rule(host.text, host.source) for host in self.allow)

    def spec(self) -> dict[str, Any]:
        """What the sandbox spec holds of it: a resumed container never keeps another list."""
        return {"allow": self.rules().texts(), "resolve": dict(sorted(self.resolve.items())),
                "port": self.port, "max_bytes": self.max_bytes,
                "max_connections": self.max_connections}


def environment(config: EgressConfig | None) -> dict[str, str]:
    """The proxy variables proxy-aware tools read (pip, npm, git, curl, urllib, requests)."""
    if config is None:
        return {}
    url = f"http://127.0.0.1:{config.port}"
    deps = deps_environment() if config.deps_volume else {}
    env = {**deps, **config.env, "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url,
           "https_proxy": url, "npm_config_proxy": url, "npm_config_https_proxy": url}
    if not config.rules().loopback():  # the sandbox's own servers stay its own
        local = "localhost,127.0.0.1,::1"
        env |= {"NO_PROXY": local, "no_proxy": local}
    return env


def mounts(config: EgressConfig | None) -> list[Any]:
    """The project's package volume, when installs have one, and the person's files."""
    from docker.types import Mount

    if config is None:
        return []
    files = [Mount(inside, host, type="bind", read_only=True)
             for inside, host in sorted(config.files.items())]
    return files + ([deps_mount(config.deps_volume)] if config.deps_volume else [])


def check_engine(config: EgressConfig | None, *, gvisor: bool) -> None:
    """ConfigError when this runtime cannot carry egress the way it is built."""
    if config is not None and gvisor:
        raise ConfigError(
            "--allow-host does not work under gVisor (runsc): its network stack is its own, "
            "so nothing beside the sandbox can listen on the sandbox's loopback",
            fix="drop --runtime runsc for runs that need the network, or drop --allow-host")


@dataclass
class EgressHooks:
    """What the run gives a session's egress: where records go, whose call runs, who asks."""

    on_connection: Callable[[Connection], None] = lambda connection: None
    current_call: Callable[[], str | None] = lambda: None
    ask: Asker | None = None


class Egress:
    """One session's proxy, and the forwarder of its current container."""

    def __init__(self, config: EgressConfig, lock_dir: Path, name: str,
                 hooks: EgressHooks | None = None) -> None:
        self.config = config
        self.hooks = hooks or EgressHooks()
        self.socket_dir = lock_dir / f"{name}.egress"
        self._name = name
        self._proxy: EgressProxy | None = None
        self._forwarder: Forwarder | None = None

    def start(self) -> None:
        """Listen on the socket, in a directory only we may enter."""
        if self._proxy is not None:
            return
        _private(self.socket_dir)
        limits = Limits(max_bytes=self.config.max_bytes,
                        max_connections=self.config.max_connections)
        self._proxy = EgressProxy(
            self.config.rules(), self.socket_dir / SOCKET_NAME,
            on_connection=self.hooks.on_connection, current_call=self.hooks.current_call,
            resolver=pinned_resolver(self.config.resolve), limits=limits, ask=self.hooks.ask)
        self._proxy.start()

    def attach(self, client: Any, container: Any, image: str, labels: dict[str, str],
               security_opt: list[str], ulimits: list[Any]) -> None:
        """Start the forwarder of `container` (the proxy first, when it is not yet)."""
        self.start()
        assert self._proxy is not None
        self.detach()
        token = Forwarder.token()
        ready = self._proxy.expect_forwarder(token)
        options = forwarder_options(
            sandbox_id=container.id, sandbox_name=self._name, image=image,
            socket_dir=self.socket_dir, port=self.config.port, token=token, labels=labels,
            security_opt=security_opt, ulimits=ulimits)
        self._forwarder = Forwarder(client, options)
        self._forwarder.start(ready)

    def detach(self) -> None:
        """Remove the forwarder (its container is about to go or be replaced)."""
        if self._forwarder is not None:
            self._forwarder.stop()
            self._forwarder = None

    def stop(self) -> None:
        """Remove the forwarder and stop the proxy; safe to call twice."""
        self.detach()
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None
        with contextlib.suppress(OSError):
            self.socket_dir.rmdir()


_NAME = re.compile(r"sandbox-agent-[A-Za-z0-9][A-Za-z0-9_.-]*")


def drop_socket_dir(lock_dir: Path, name: str) -> None:
    """Remove the proxy socket directory a killed run of container `name` left (`gc` passes
    the engine's name: checked, never a path; nothing followed through a link)."""
    if not _NAME.fullmatch(name) or name.endswith("-egress"):
        return
    directory = lock_dir / f"{name}.egress"
    try:
        folder = open_dir(directory)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(SOCKET_NAME, dir_fd=folder)
    finally:
        os.close(folder)
    with contextlib.suppress(OSError):
        directory.rmdir()


def _private(directory: Path) -> None:
    """`directory` as a real directory of ours, mode 0700 (the socket's only way in)."""
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise SandboxError(f"cannot make the egress directory {directory}: "
                           f"{exc.strerror}") from exc
    if not os.path.isdir(directory) or os.path.islink(directory) or info.st_uid != os.geteuid():
        raise SandboxError(f"{directory} is not a directory of ours: no proxy starts there")
    os.chmod(directory, 0o700)


def granted(host: str, port: int, by: str) -> Rule:
    """The rule a person's yes at the terminal makes: exactly that host and port, never a
    wildcard or a range (the proxy asks only about valid hosts: rules.valid_host)."""
    if not valid_host(host):
        raise ValueError(f"not a host to allow: {host!r}")
    address = address_of(host)
    if address is not None:
        return Rule(f"{host}:{port}", by, network=ipaddress.ip_network(address), port=port)
    return Rule(f"{host}:{port}", by, host=host.lower().rstrip("."), port=port)
