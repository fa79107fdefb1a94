"""The session's sandbox: made from the backend, wrapped for its workspace (bind or copy),
started now or lazily, recorded in the session header, and its changes collected at the end."""

from __future__ import annotations

import os
import secrets
from typing import Any

from executor.errors import ConfigError, SandboxAgentError
from executor.hooks import NoticeEvent, SandboxStartEvent
from executor.network.session import egress_hooks
from executor.protocols import Sandbox
from executor.runner.options import is_sandbox
from executor.runner.state import RunnerState
from executor.sandbox import warm
from executor.sandbox.config import container_name, default_lock_dir
from executor.sandbox.docker import DockerSandbox, SandboxConfig
from executor.sandbox.environment import sandbox_environment
from executor.session import NdjsonSessionStore, SessionHeader
from executor.workspace.apply import pending
from executor.workspace.changes import load_changes
from executor.workspace.copyload import ArchiveLoader
from executor.workspace.sessions import CopyWorkspace, JournaledSandbox
from executor.workspace.store import BlobStore


class SandboxWiring(RunnerState):
    """Making, starting and recording the session's sandbox."""

    def _may_start_later(self) -> bool:
        """A bind mount on the default engine can start on first use; a copy, or an engine named
        by DOCKER_HOST, starts now, so a project too big to copy or a disk the engine cannot see
        is said before the model is asked."""
        return self.settings.workspace == "bind" and not os.environ.get("DOCKER_HOST")

    def _collect_changes(self) -> bool:
        """Keep a copy session's changes; whether the sandbox may go (it stays when they could
        not be collected, for a later --resume)."""
        if not isinstance(self.sandbox, CopyWorkspace) or self.options.read_only:
            return True
        if self._lazy is not None and not self._lazy.started:
            return True  # never started: nothing was copied, nothing changed
        try:
            self.changes = self.sandbox.finish()
        except SandboxAgentError as exc:
            self._warn(f"the changes of the copy could not be collected ({exc}); its container "
                       "is kept: resume the session to try again, or `sandbox-agent gc` "
                       "discards it")
            self.sandbox.detach()
            return False
        return True

    def attach_mentions(self, query: str) -> str:
        """`query` with the files it mentions as `@path` attached, read through the sandbox
        (executor/attach.py); ConfigError when one cannot be read."""
        from executor.attach import with_attachments

        sandbox = self._lazy or self.sandbox
        if sandbox is None or "@" not in query:
            return query
        attached, paths = with_attachments(
            query, lambda path: sandbox.call("read_file", {"path": path}))
        for path in paths:
            self.hooks.emit(NoticeEvent(message=f"attached {path}"))
        return attached

    def _new_sandbox(self, store: NdjsonSessionStore) -> Sandbox:
        """The session's sandbox, not started: the backend, wrapped for its workspace.

        A Docker backend checks the engine and the image now (one ping, one lookup), so a
        missing one is said before the model is asked even when the container starts later.
        """
        header = store.header
        ahead = None if self.options.resume or self.backend is not None else warm.POOL.reserve(
            self._warm_key(self.options.parent_session, self.options.read_only))
        if ahead is None and self._leaves_standby():
            ahead = self._left_for_us()
        if ahead is not None:  # the container made ahead names it (warm.py)
            store.update_header(sandbox_id=ahead)
        self._sandbox_id = ahead or header.sandbox_id or secrets.token_hex(6)  # store names it
        self._workspace_mode = workspace = self._workspace(header)
        put_back = self._put_back(store.name) if workspace == "copy" else {}
        config = self._sandbox_config(self._sandbox_id, header.image_digest, workspace, put_back)
        config = config.model_copy(update={"session_name": store.name})
        backend = self._backend_for(config)
        if isinstance(backend, DockerSandbox):
            backend.preflight()
            if self._leaves_standby() and not warm.eligible(config, (), quick=True):
                self._leave = config  # the next run's, made at this one's end
            if ahead is None:  # an orchestrator: its children come while its model thinks
                self._prepare_standby(config, store.name, again=False)
            else:  # a child: its next sibling's once its own start is done
                self._ahead = (config, store.name, True)
        return self._wrap(backend, store.name, workspace, set(put_back))

    # -- warm starts (executor/sandbox/warm.py) ----------------------------------------------

    def _warm_key(self, parent: str | None, read_only: bool) -> str:
        """Which sessions a standby suits: the children of one session, read-only or not."""
        return f"{self.options.root}\0{parent}\0{read_only}"

    def _prepare_standby(self, config: SandboxConfig, session: str, *, again: bool) -> None:
        """A container made ahead for the next child session: an orchestrator's first (a
        read-only one, the delegate tool's default), and a child's next sibling (`again`: this
        child took one). Only a session whose spec equals it ever adopts it."""
        if warm.eligible(config, (), quick=True):
            return
        if again and self.options.parent_session:
            parent, read_only = self.options.parent_session, self.options.read_only
        elif self.options.orchestrator and self.options.depth < self.options.delegation_depth:
            parent, read_only = session, True
            self._warm_keys.append(self._warm_key(session, True))
        else:
            return
        next_id = secrets.token_hex(6)
        child = config.model_copy(update={"session_id": next_id, "read_only": read_only})
        warm.POOL.prepare(self._warm_key(parent, read_only), next_id,
                          container_name(next_id), lambda: DockerSandbox(child), self._warn)

    def _close_standbys(self) -> None:
        """The standbys this orchestrator's children (or this session) did not take go with
        it; then the one left for the next run is made."""
        for key in self._warm_keys:
            warm.POOL.close(key, self._warn)
        self._warm_keys = []
        self._leave_standby()

    def _leaves_standby(self) -> bool:
        """Whether this run takes a container left by the last one and leaves one for the
        next (the `warm` setting: a top-level run on the Docker engine; not a resume, which
        has its own container)."""
        return (self.settings.warm > 0 and self.backend is None and not self.options.resume
                and not self.options.parent_session)

    def _left_for_us(self) -> str | None:
        """The session id of a standby the last run on this root left (claimed now, adopted
        or not at the sandbox's start: warm.py), or None."""
        from executor.sandbox.engine import connect

        try:
            standby = warm.left(default_lock_dir(), self.options.root,
                                read_only=self.options.read_only, client=connect())
        except SandboxAgentError:
            return None
        if standby is None:
            return None
        key = f"left\0{self._warm_key(None, self.options.read_only)}"
        session_id = standby.name.removeprefix(container_name(""))
        warm.POOL.put(key, session_id, standby)
        self._warm_keys.append(key)  # not started (no tool call): it goes at the end
        return warm.POOL.reserve(key)

    def _leave_standby(self) -> None:
        """A container for the next run on this root with this run's sandbox, left waiting
        `warm` seconds (made at the end: a writable session's sandbox no longer writes the
        tree its walk and mounts see)."""
        config, self._leave = self._leave, None
        if config is None:
            return
        config = config.model_copy(update={"session_id": secrets.token_hex(6)})
        try:
            standby = DockerSandbox(config, warn=self._warn).standby(self.settings.warm)
        except SandboxAgentError as exc:
            self._warn(f"no container was left for the next run: {exc.message}")
            return
        if standby is None:
            return
        try:
            warm.leave(standby, config.lock_dir or default_lock_dir(), read_only=config.read_only)
        except OSError as exc:
            standby.settle(self._warn)
            self._warn(f"no container was left for the next run: {exc}")

    def _start_sandbox(self, store: NdjsonSessionStore) -> Sandbox:
        sandbox = self.sandbox = self._new_sandbox(store)
        sandbox.start()
        self._record_sandbox(sandbox, store)
        return sandbox

    def _record_sandbox(self, sandbox: Sandbox, store: NdjsonSessionStore) -> None:
        if self._ahead is not None:  # its own start is done: the next one's can be made
            config, session, again = self._ahead
            self._prepare_standby(config, session, again=again)
            self._ahead = None
        info = sandbox.info
        if self.options.resume:
            how = "re-attached to" if getattr(sandbox, "reattached", False) else "started a new"
            self.hooks.emit(NoticeEvent(message=f"resumed session {store.name}: {how} container "
                                            f"{info.container_name}"))
        store.update_header(container=info.container_name, sandbox_id=self._sandbox_id,
                            image_digest=info.image_digest, mount_mode=info.mount_mode,
                            workspace=self._workspace_mode)

    def _workspace(self, header: SessionHeader) -> str:
        """The configured workspace; a resumed session keeps the one it started with."""
        recorded = header.workspace if self.options.resume else ""
        if recorded and recorded != self.settings.workspace:
            self.hooks.emit(NoticeEvent(message=f"session {header.name} runs in its "
                                            f"{recorded} workspace"))
        return recorded or self.settings.workspace

    def _put_back(self, session: str) -> dict[str, list[Any] | None]:
        """A resumed copy session's pending changes, to put back into a new copy."""
        changeset = load_changes(self.options.root, session) if self.options.resume else None
        if changeset is None:
            return {}
        return {c.path: c.after.row() if c.after else None
                for c in pending(self.options.root, changeset)}

    def _backend_for(self, config: SandboxConfig) -> Sandbox:
        """The sandbox given, one from the factory given, or a DockerSandbox."""
        if self.backend is None:
            prompt = getattr(self.approver, "host", None) if self.options.interactive else None
            hooks = (egress_hooks(self.hooks, prompt, self._refusals)
                     if config.egress is not None else None)
            loader = ArchiveLoader() if config.workspace == "copy" else None
            return DockerSandbox(config, warn=self._warn, egress_hooks=hooks, copy_loader=loader)
        if is_sandbox(self.backend):
            return self.backend  # type: ignore[return-value]
        return self.backend(config)  # type: ignore[operator]

    def _wrap(self, backend: Sandbox, session: str, workspace: str, put_back: set[str]
              ) -> Sandbox:
        """Copy sessions keep a base and collect changes; bind sessions journal writes."""
        root = self.options.root
        if self.options.read_only:
            return backend  # nothing to journal, nothing comes back
        if workspace == "copy":
            if not callable(getattr(backend, "copy_manifest", None)):
                raise ConfigError("this sandbox backend cannot run a copy workspace",
                                  fix="use --workspace bind")
            return CopyWorkspace(backend, root=root, session=session,  # type: ignore[arg-type]
                                 put_back=put_back)
        return JournaledSandbox(backend, root=root, session=session)

    def _sandbox_started(self, took: float) -> None:
        """A lazily started sandbox is up: the session header and a `sandbox_start` event."""
        assert self.sandbox is not None and self.store is not None
        self._record_sandbox(self.sandbox, self.store)
        info = self.sandbox.info
        self.hooks.emit(SandboxStartEvent(
            container_id=info.container_id, container_name=info.container_name, image=info.image,
            image_digest=info.image_digest, mount_mode=info.mount_mode, network=info.network,
            user=info.user, workspace=info.workspace, runtime=info.runtime, engine=info.engine,
            reattached=getattr(self.sandbox, "reattached", False), adopted=info.adopted,
            duration_ms=round(took * 1000)))

    def _sandbox_config(self, session_id: str, digest: str, workspace: str = "bind",
                        put_back: dict[str, list[Any] | None] | None = None) -> SandboxConfig:
        """On resume, the very image the session started with, falling back to the configured."""
        s = self.settings
        env = sandbox_environment(s.env_allow, secret_names=[s.api_key_env])
        resumed = self.options.resume and digest
        return SandboxConfig(
            root=self.options.root, session_id=session_id, image=digest if resumed else s.image,
            fallback_image=s.image if resumed else None,
            read_only=self.options.read_only, memory=s.memory, pids_limit=s.pids_limit,
            cpus=s.cpus, tmp_size=s.tmp_size, tool_timeout=s.tool_timeout, env=env,
            allow_git_writes=s.allow_git_writes, disk_budget=s.disk_budget, runtime=s.runtime,
            workspace=workspace, copy_limit=s.copy_limit, copy_max_files=s.copy_max_files,
            copy_exclude=s.copy_exclude, copy_storage=s.copy_storage,
            copy_overlay=put_back or {},
            blob_dir=BlobStore.for_root(self.options.root).directory if put_back else None,
            egress=self.egress,
        )
