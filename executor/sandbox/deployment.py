"""The Deployment: the place a session's tools run (SWE-ReX's Deployment beside its Runtime).

It owns the container: the engine's facts (Podman, gVisor), the image, the options it is made
with (hardening.py), making it, re-attaching to it (a copy session's, only when its
`SandboxSpec` is this run's; a bind session's never) and removing it; the session lock, the
run record and the egress forwarder beside the container. The toolbox inside is the Runtime's.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from executor.errors import (
    ImageNotFoundError,
    RuntimeNotFoundError,
    SandboxError,
    WorkspaceUnreachableError,
)
from executor.gitsafety.hostgit import Protected
from executor.network import egress as network
from executor.network.egress import EgressHooks
from executor.protocols import SandboxInfo
from executor.sandbox import lockfile, rootlock, runrecord, seccomp, warm
from executor.sandbox.bundle import toolbox_command
from executor.sandbox.config import (
    LABEL_HOST,
    LABEL_LOCK,
    LABEL_ROOT,
    LABEL_SESSION,
    SandboxConfig,
    container_name,
    default_lock_dir,
    mount_user,
)
from executor.sandbox.engine import (
    IMAGE_FIX,
    RUNTIME_FIX,
    connect,
    docker_errors,
    endpoint,
    force_remove,
    is_podman,
    runtimes,
)
from executor.sandbox.hardening import container_options, hosts_file, ulimits
from executor.sandbox.spec import SandboxSpec
from executor.state import check_install_outside, check_outside, real_root

Warn = Callable[[str], None]


class Deployment:
    """One session's container and what goes with it: lock, run record, egress."""

    def __init__(self, config: SandboxConfig, *, client: Any = None, warn: Warn,
                 egress_hooks: EgressHooks | None = None) -> None:
        self.config = config
        self.client = client
        self._warn = warn
        self._egress_hooks = egress_hooks
        self._egress: network.Egress | None = None
        self.container: Any = None
        self.attached: Any = None
        """The stream of a container just made with the toolbox as its first process."""
        self._lock_fd: int | None = None
        self._root_lock = ""
        """The root's lock this session holds (rootlock.py), or ''."""
        self.seccomp_file: Path | None = None
        self.podman = False
        self.gvisor = False
        self.image_id = ""
        self.reattached = False
        self.adopted = False
        """Whether this start adopted a standby (warm.py) instead of making a container."""
        self.standby_mode = False
        """The container's PID 1 waits to be adopted (warm.py): a standby's, or the spec a
        session compares a standby with."""
        self._standby: warm.Standby | None = None
        self.lock_path = (config.lock_dir or default_lock_dir()) / f"{self.name}.lock"
        """The session's lock file; its directory holds what is mounted from the host (the
        session id and the lock dir are the config's for good: decided once)."""
        self._lock_dir_checked = False

    @property
    def name(self) -> str:
        """The container's name."""
        return container_name(self.config.session_id)

    # -- the engine --------------------------------------------------------------------------

    def preflight(self) -> None:
        """Fail now when the engine or the image is missing (one ping and one lookup)."""
        self.client = self.client or connect()
        self.image()
        if self.config.runtime:  # one more question to the engine, only when a runtime is named
            self.podman = is_podman(self.client)
            network.check_engine(self.config.egress, gvisor=self._runtime_is_gvisor())

    def connect(self) -> Any:
        """Learn the engine's facts (Podman, gVisor); the image this run uses."""
        self.client = self.client or connect()
        self.podman = is_podman(self.client)
        if self.podman:  # it reads the profile from a file, not from the request
            self.seccomp_file = seccomp.profile_file(self.lock_path.parent)
        self.gvisor = self._runtime_is_gvisor()
        network.check_engine(self.config.egress, gvisor=self.gvisor)
        image = self.image()
        self.image_id = str(image.id)
        return image

    def image(self) -> Any:
        """The configured image, else (with a warning) the fallback when one is given."""
        import docker.errors

        with docker_errors(f"looking up image {self.config.image}"):
            try:
                return self.client.images.get(self.config.image)
            except docker.errors.ImageNotFound:
                if not self.config.fallback_image:
                    raise ImageNotFoundError(
                        f"sandbox image {self.config.image!r} not found", fix=IMAGE_FIX
                    ) from None
        self._warn(f"image {self.config.image[:19]} is gone; using {self.config.fallback_image}")
        self.config = self.config.model_copy(
            update={"image": self.config.fallback_image, "fallback_image": None})
        return self.image()

    def _runtime_is_gvisor(self) -> bool:
        """Whether the runtime asked for is gVisor's runsc; an error when the engine lacks it."""
        name = self.config.runtime
        if not name:
            return False
        if self.podman:
            raise RuntimeNotFoundError(
                f"Podman's Docker-compatible API ignores the runtime a container asks for: the "
                f"sandbox would run under Podman's default runtime, not {name!r}",
                fix=f'set runtime = "{name}" under [engine] in Podman\'s containers.conf and '
                "drop --runtime / SANDBOX_AGENT_RUNTIME")
        offered, _ = runtimes(self.client)
        if name not in offered:
            raise RuntimeNotFoundError(
                f"the engine has no OCI runtime {name!r} (it offers: {', '.join(offered)})",
                fix=RUNTIME_FIX)
        return Path(offered[name]).name.startswith("runsc")

    # -- the container -----------------------------------------------------------------------

    def options(self, config: SandboxConfig, protected: Protected, *,
                toolbox: Callable[[], list[str]], channel: Path | None) -> dict[str, Any]:
        """What the container is created with (`container_options` for this engine);
        `toolbox`: the toolbox's argv, asked for when it is the container's first process."""
        # A bind mount of our hosts file needs an engine that sees this machine's disk: any
        # bind session's, or a copy session's whose FIFO channel is mounted from it too.
        local = config.workspace == "bind" or channel is not None
        quick = (local and not self.podman and not config.network
                 and config.egress is None)  # a forwarder joins a namespace the engine made
        first = config.workspace == "bind" and not self.podman and not self.gvisor
        options = container_options(config, self.lock_path, mount_user(config), protected,
                                    podman_profile=self.seccomp_file, gvisor=self.gvisor,
                                    hosts=hosts_file(self.lock_path.parent) if quick else None,
                                    toolbox=toolbox() if first else None, channel=channel)
        if self.standby_mode and first:
            options["command"] = toolbox_command(toolbox(), standby=True)
            options["labels"][warm.LABEL_STANDBY] = warm.run_id()  # data: the nonce decides
            options["stdin_once"] = False  # its maker's stream ends; its adopter attaches anew
        return options

    # -- a standby (warm.py) -----------------------------------------------------------------

    def standby_made(self, spec: SandboxSpec, paths: list[str],
                     record: runrecord.RunRecord | None) -> warm.Standby:
        """The container just made, as a standby: it, its stream and the lock go to it."""
        lock, self._lock_fd = self._lock_fd, None
        made = [Path(record.root) / rel for rel in record.made_dirs] if record else []
        standby = warm.Standby(self.name, self.container, self.take_attached(), None, lock,
                               spec.digest, warm.identities(self.config.root, paths), made,
                               record, self.lock_path.parent)
        self.container = None
        return standby

    @property
    def made_ahead(self) -> list[Path]:
        """Mountpoints the engine made for the standby this session took (none: none)."""
        return self._standby.made if self._standby is not None else []

    def adopt(self, spec: Callable[[], SandboxSpec]) -> warm.Standby | None:
        """The standby made for this session, when this run may adopt it (warm.py), its
        toolbox told to start on its stream; else None (a standby there is removed)."""
        standby, self._standby = self._standby, None
        if standby is None:
            return None
        why = standby.why_not(spec().digest, self.config.root)
        self.standby_mode = False  # what this session makes from now on is a cold one
        if why or not standby.claim():
            self._warn(f"the container made ahead is not used ({why or 'its PID 1 refused'});"
                       " starting a new one")
            standby.discard()
            return None
        self.container, self.attached, self.adopted = standby.container, standby.attached, True
        return standby

    def existing(self, spec: Callable[[], SandboxSpec]) -> Any:
        """A copy session's container when it is exactly what this run would create (else the
        run stops: the session's changes are in it). A bind session never re-uses one: its
        mounts hold the tree as it was when it was made, and a protected directory the person
        replaced since (`rm -rf .git && git init`) is silently no longer mounted in it."""
        import docker.errors

        with docker_errors("looking for the session's container"):
            try:
                container = self.client.containers.get(self.name)
            except docker.errors.NotFound:
                return None
            if container.labels.get(LABEL_ROOT) != str(self.config.root):
                raise SandboxError(f"container {self.name} belongs to another project root")
            if self.config.workspace != "copy":  # its mounts are the tree as it was: see above
                self._warn(f"container {self.name} of an earlier run is not re-used: a bind "
                           "session always starts a new one (files in /tmp are lost)")
                container.remove(force=True, v=True)
                return None
            changed = ", ".join(spec().differences(container.labels))
            if changed:
                raise SandboxError(
                    f"container {self.name} holds this session's copy, but it was made with "
                    f"other {changed} than this run asks for, so it is not re-used",
                    fix="resume with the options of the run that made it, or discard it "
                        f"(`docker rm -f {self.name}`: its uncollected changes are lost)")
            if container.status != "running":
                container.start()
        self.reattached = True
        self.container = container
        return container

    def create(self, options: dict[str, Any]) -> Any:
        """Make and start the container (attached first when the toolbox is its process)."""
        with _unreachable_root(self.config.root), docker_errors("creating the sandbox container"):
            container = _create(self.client, dict(options))
            try:
                self._check_runtime(container)
                if options.get("stdin_open"):  # the toolbox is its first process: attach first
                    self.attached = self.client.api.attach_socket(
                        container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                container.start()
            except BaseException:
                if self.attached is not None:
                    self.attached.close()
                    self.attached = None
                container.remove(force=True)
                raise
        self.container = container
        return container

    def take_attached(self) -> Any:
        """The stream `create` attached (once), or None: the toolbox is exec'd."""
        attached, self.attached = self.attached, None
        return attached

    def remove(self) -> bool:
        """Remove the container (with its anonymous volume); whether there was one."""
        if self.container is None:
            return False
        with docker_errors("removing the sandbox container"):
            force_remove(self.container)
        self.container = None
        return True

    def forget(self) -> None:
        """Leave the container as it is (detached for a later resume)."""
        self.container = None

    def is_running(self) -> bool:
        """Whether the container runs (asked of the engine)."""
        if self.container is None:
            return False
        try:
            with docker_errors("inspecting the sandbox"):
                self.container.reload()
        except SandboxError:
            return False
        return bool(self.container.status == "running")

    def ensure_running(self) -> bool:
        """Start the container if it stopped; whether it was running."""
        with docker_errors("checking the sandbox container"):
            self.container.reload()
            if self.container.status == "running":
                return True
            self._warn(f"container {self.name} was {self.container.status}; starting it")
            self.container.start()
        return False

    def _check_runtime(self, container: Any) -> None:
        """The runtime asked for is the one the engine used (Podman's API ignores it)."""
        used = runtime_of(container)
        if self.config.runtime and used != self.config.runtime:
            raise RuntimeNotFoundError(f"the engine would run the sandbox under {used!r}, not "
                                       f"{self.config.runtime!r}", fix=RUNTIME_FIX)

    def describe(self, image: Any, user: str) -> SandboxInfo:
        """What an audit needs to know about this container."""
        config = self.config
        return SandboxInfo(
            container_id=self.container.id, container_name=self.name, image=config.image,
            image_digest=str(image.id), mount_mode="ro" if config.read_only else "rw",
            network="bridge" if config.network else "egress" if config.egress else "none",
            user=user, workspace=config.workspace, runtime=runtime_of(self.container),
            engine="Podman" if self.podman else "Docker",
        )

    # -- egress ------------------------------------------------------------------------------

    def start_egress(self) -> None:
        """The forwarder of this container, before any command runs (none without egress)."""
        if self.config.egress is None:
            return
        if self._egress is None:
            self._egress = network.Egress(self.config.egress, self.lock_path.parent, self.name,
                                          self._egress_hooks)
        kept = (LABEL_SESSION, LABEL_ROOT, LABEL_LOCK, LABEL_HOST)  # so `gc` knows it too
        labels = {k: v for k, v in self.container.labels.items() if k in kept}
        profile = (f"seccomp={seccomp.profile_file(self.lock_path.parent, unix=True)}"
                   if self.podman else seccomp.forwarder_security_opt())  # Podman: a path
        self._egress.attach(self.client, self.container, self.image_id, labels,
                            ["no-new-privileges", profile],
                            ulimits(self.config.model_copy(update={"disk_budget": 0}),
                                    gvisor=False))

    def detach_egress(self) -> None:
        """The container goes, the proxy stays (a new container attaches to it)."""
        if self._egress is not None:
            self._egress.detach()

    def stop_egress(self) -> None:
        """The forwarder and the proxy end."""
        if self._egress is not None:
            self._egress.stop()
            self._egress = None

    # -- the lock and the run record ---------------------------------------------------------

    def lock_root(self) -> None:
        """Hold the project root's lock (rootlock.py) when this is a writable bind session:
        one at a time per root, from before the start's walk until the checks after it."""
        if self.config.workspace != "bind" or self.config.read_only or self._root_lock:
            return
        self._root_lock = rootlock.hold(self._lock_dir(), real_root(self.config.root),
                                        self.config.session_name or self.config.session_id)

    @contextlib.contextmanager
    def root_locked(self) -> Iterator[None]:
        """The root's lock held for a while (a standby's walk and create), then given back:
        its session, when it adopts the standby, takes it again before its own walk."""
        held = bool(self._root_lock)
        self.lock_root()
        try:
            yield
        finally:
            if not held and self._root_lock:
                rootlock.release(self._root_lock)
                self._root_lock = ""

    def lock(self) -> None:
        """Hold the session's lock: `gc` removes containers whose lock is free, which also
        covers a controller killed with SIGKILL."""
        path = self.lock_path
        self._lock_dir()
        standby = None if self.standby_mode else warm.POOL.take(self.name)  # not a standby's
        if standby is not None:  # made ahead for this session, holding its lock since
            self._lock_fd, self._standby, self.standby_mode = standby.take_lock(), standby, True
            return
        try:  # 20 tries: `gc` holds a free lock for a moment while it checks it
            self._lock_fd = lockfile.acquire(path, tries=20)
        except BlockingIOError:
            raise SandboxError(
                f"session {self.config.session_id} is in use by another process") from None
        except OSError as exc:
            raise SandboxError(f"cannot take the session's lock {path}: {exc}") from exc

    def unlock(self) -> None:
        """Release the session's lock and the root's (and a standby taken but never adopted:
        it goes)."""
        if self._standby is not None:
            self._standby.discard()
            self._standby = None
        if self._lock_fd is not None:  # a free lock and none mean the same: it goes
            lockfile.release(self._lock_fd, self.lock_path)
            self._lock_fd = None
        if self._root_lock:
            rootlock.release(self._root_lock)
            self._root_lock = ""

    def _lock_dir(self) -> Path:
        """The lock dir, made when missing (never inside the project: what is there is
        mounted into the container, the hosts file and the channel); checked once a session:
        the root's lock and the session's each ask, and a walk of the path costs a readlink a
        component."""
        folder = self.lock_path.parent
        if not self._lock_dir_checked:
            check_outside(real_root(self.config.root), folder,
                          "the lock dir (XDG_RUNTIME_DIR or XDG_CACHE_HOME)")
            if not self.config.read_only:
                check_install_outside(self.config.root)
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._lock_dir_checked = True
        return folder

    def save_record(self, record: runrecord.RunRecord | None) -> None:
        """What the end-of-session checks need, on disk until they ran (runrecord.py)."""
        if record is not None:
            record.save(self.lock_path.parent)

    def forget_record(self) -> None:
        """The end-of-session checks ran."""
        runrecord.forget(self.lock_path.parent, self.name)

    def abandoned(self) -> list[tuple[Path, runrecord.RunRecord]]:
        """Runs on this root whose controller died before their end-of-session checks, each
        with the lock dir its record is in: ours, or another one a container of the root names
        (a run started with another `$XDG_RUNTIME_DIR` or `$HOME`)."""
        found = [(self.lock_path.parent, record) for record
                 in runrecord.abandoned(self.lock_path.parent, self.config.root)]
        for lock_dir, name in self._other_lock_dirs():
            seen = {record.name for _, record in found}
            found += [(lock_dir, record) for record
                      in runrecord.abandoned(lock_dir, self.config.root)
                      if record.name == name and name not in seen]
        return [(lock_dir, record) for lock_dir, record in found
                if not warm.waiting_named(lock_dir, record.name)]  # left, waiting

    def _other_lock_dirs(self) -> list[tuple[Path, str]]:
        """(lock dir, container name) of this host's containers of the root whose lock label
        names a lock dir other than ours."""
        ours = self.lock_path.parent
        with docker_errors("listing the project's containers"):
            listed = self.client.api.containers(
                all=True, filters={"label": [f"{LABEL_ROOT}={self.config.root}"]})
        others = []
        for summary in listed:
            labels = summary.get("Labels") or {}
            name = str((summary.get("Names") or ["/"])[0]).lstrip("/")
            lock_dir = runrecord.lock_dir_named(str(labels.get(LABEL_LOCK, "")), name)
            if lock_dir is not None and lock_dir != ours \
                    and labels.get(LABEL_HOST) == socket.gethostname():
                others.append((lock_dir, name))
        return others


def _create(client: Any, options: dict[str, Any]) -> Any:
    """`containers.create(**options)`; with `stdin_once` False, a container whose stdin stays
    open when its first attached stream ends (the SDK always sets StdinOnce with stdin_open)."""
    if options.pop("stdin_once", True):
        return client.containers.create(**options)
    from docker.models.containers import _create_container_args

    args = _create_container_args({**options, "version": client.api._version})
    name, platform = args.pop("name", None), args.pop("platform", None)
    config = client.api.create_container_config(**args)
    config["StdinOnce"] = False
    return client.containers.get(
        client.api.create_container_from_config(config, name, platform)["Id"])


def runtime_of(container: Any) -> str:
    """The OCI runtime the engine says a container runs under (Podman always says 'oci')."""
    return str((container.attrs.get("HostConfig") or {}).get("Runtime") or "")


@contextlib.contextmanager
def _unreachable_root(root: Path) -> Iterator[None]:
    """An engine that refuses to bind a path it does not have cannot see this disk."""
    try:
        yield
    except SandboxError as exc:
        if "bind source path does not exist" not in str(exc):
            raise
        raise WorkspaceUnreachableError(
            f"the Docker engine at {endpoint()} has no {root}: it cannot see this machine's "
            "disk", fix="use --workspace copy (or an engine on this machine)") from exc
